import { expect } from "chai";
import { capturedRequests } from "../../clients/captured.js";
import { toInternal, type CompletionRequest } from "../../../src/dialects/openai-completions/index.js";
import { ApiError } from "../../../src/errors.js";

const rc = { id: "cmpl-test" };

describe("openai-completions toInternal", () => {
  it("takes a string or a list of one string, with no template", () => {
    expect(toInternal({ prompt: "Once" }, rc).input).to.deep.equal({ kind: "text", text: "Once" });
    expect(toInternal({ prompt: ["Twice"] }, rc).input).to.deep.equal({ kind: "text", text: "Twice" });
    expect(() => toInternal({ prompt: ["a", "b"] }, rc)).to.throw(ApiError, /prompt/);
  });

  it("reads the common fields; max_completion_tokens wins", () => {
    const r = toInternal({ prompt: "x", max_tokens: 3, max_completion_tokens: 9, stop: ["\n"], seed: 1, temperature: 1 } as CompletionRequest, rc);
    expect(r.max_tokens).to.equal(9);
    expect(r.stop).to.deep.equal(["\n"]);
    expect(r.sampling).to.include({ seed: 1, temperature: 1, top_p: 1 });
  });

  it("accepts logprobs 0 and refuses a count", () => {
    expect(() => toInternal({ prompt: "x", logprobs: 0 } as unknown as CompletionRequest, rc)).to.not.throw();
    expect(() => toInternal({ prompt: "x", logprobs: 2 } as unknown as CompletionRequest, rc)).to.throw(ApiError, /logprobs/);
  });

  it("maps every captured completions request", () => {
    for (const c of capturedRequests((r) => r.path.split("?")[0] === "/v1/completions" && r.body !== null)) {
      const r = toInternal(c.body as CompletionRequest, rc);
      expect(r.input.kind, c.where).to.equal("text");
    }
  });
});
