import { expect } from "chai";
import { createResponseValidator, readOpenapiDocument } from "../../../src/contract/validator.js";
import { systemFingerprint } from "../../../src/dialects/openai-completions/index.js";
import { formatSse } from "../../../src/http/sse.js";
import { describeGoldens } from "../harness.js";
import { dialect } from "./dialect.js";

const validator = createResponseValidator(readOpenapiDocument());

describe("openai-completions: system_fingerprint", () => {
  it("is stable per model and seed- style", () => {
    expect(systemFingerprint("smollm2-135m")).to.equal(systemFingerprint("smollm2-135m")).and.match(/^seed-[0-9a-f]{12}$/);
    expect(systemFingerprint("other")).to.not.equal(systemFingerprint("smollm2-135m"));
  });
});

describeGoldens(dialect, import.meta.url, (golden) => {
  const include_usage = golden.request.stream_options?.include_usage === true;

  it("the response and each stream frame follow openapi.json; the frames rebuild the text", () => {
    const failed = typeof golden.response.status === "number";
    expect(validator.validateJson("createCompletion", failed ? golden.response.status : 200, failed ? golden.response.error : golden.response)).to.deep.equal([]);
    const frames = golden.stream as Array<{ data: any }>;
    for (const f of frames) expect(validator.validateSseEvent("createCompletion", formatSse(f).slice("data: ".length, -2))).to.deep.equal([]);
    expect(frames[frames.length - 1].data).to.equal("[DONE]");
    if (golden.response.status) return;
    const chunks = frames.slice(0, -1).map((f) => f.data as any);
    expect(chunks.map((c) => c.choices.map((ch: any) => ch.text).join("")).join("")).to.equal(golden.response.choices[0].text);
    expect(chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason)).to.deep.equal([golden.response.choices[0].finish_reason]);
    expect(chunks.filter((c) => c.usage).length).to.equal(include_usage ? 1 : 0);
  });
});
