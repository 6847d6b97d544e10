import { expect } from "chai";
import { createResponseValidator, readOpenapiDocument } from "../../../src/contract/validator.js";
import { systemFingerprint } from "../../../src/dialects/openai-completions/index.js";
import { formatSse } from "../../../src/http/sse.js";
import { goldenDir, readGoldens, renderResponse, renderStream } from "../harness.js";
import { dialect } from "./dialect.js";

const goldens = readGoldens(goldenDir(import.meta.url));
const files = goldens.map((g) => g.name);
const validator = createResponseValidator(readOpenapiDocument());

describe("golden: openai-completions", () => {
  it("covers every required scenario", () => {
    for (const need of ["text", "stop-sequence", "max-tokens", "error"]) expect(files, need).to.include(`${need}.json`);
  });

  it("system_fingerprint is stable per model and seed- style", () => {
    expect(systemFingerprint("smollm2-135m")).to.equal(systemFingerprint("smollm2-135m")).and.match(/^seed-[0-9a-f]{12}$/);
    expect(systemFingerprint("other")).to.not.equal(systemFingerprint("smollm2-135m"));
  });

  for (const { name, golden } of goldens) {
    const include_usage = golden.request.stream_options?.include_usage === true;
    describe(name.replace(/\.json$/, ""), () => {
      it("non-streamed response matches and follows openapi.json", () => {
        const got = renderResponse(dialect, golden);
        const failed = typeof got.status === "number";
        expect(validator.validateJson("createCompletion", failed ? got.status : 200, failed ? got.error : got)).to.deep.equal([]);
        expect(got).to.deep.equal(golden.response);
      });

      it("stream frames match, follow openapi.json and rebuild the text", () => {
        const { frames } = renderStream(dialect, golden);
        expect(JSON.parse(JSON.stringify(frames))).to.deep.equal(golden.stream);
        for (const f of frames) expect(validator.validateSseEvent("createCompletion", formatSse(f).slice("data: ".length, -2))).to.deep.equal([]);
        expect(frames[frames.length - 1].data).to.equal("[DONE]");
        if (golden.response.status) return;
        const chunks = frames.slice(0, -1).map((f) => f.data as any);
        expect(chunks.map((c) => c.choices.map((ch: any) => ch.text).join("")).join("")).to.equal(golden.response.choices[0].text);
        expect(chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason)).to.deep.equal([golden.response.choices[0].finish_reason]);
        expect(chunks.filter((c) => c.usage).length).to.equal(include_usage ? 1 : 0);
      });
    });
  }
});
