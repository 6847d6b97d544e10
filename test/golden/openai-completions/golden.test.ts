import { expect } from "chai";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createResponseValidator, readOpenapiDocument } from "../../../src/contract/validator.js";
import { CompletionStreamEncoder, fromInternal, systemFingerprint } from "../../../src/dialects/openai-completions/index.js";
import type { GenerationEvent } from "../../../src/engine/types.js";
import { ApiError } from "../../../src/errors.js";
import { formatSse } from "../../../src/http/sse.js";

const dir = dirname(fileURLToPath(import.meta.url));
const files = readdirSync(dir).filter((f) => f.endsWith(".json"));
const validator = createResponseValidator(readOpenapiDocument());

describe("golden: openai-completions", () => {
  it("covers every required scenario", () => {
    for (const need of ["text", "stop-sequence", "max-tokens", "error"]) expect(files, need).to.include(`${need}.json`);
  });

  it("system_fingerprint is stable per model and seed- style", () => {
    expect(systemFingerprint("smollm2-135m")).to.equal(systemFingerprint("smollm2-135m")).and.match(/^seed-[0-9a-f]{12}$/);
    expect(systemFingerprint("other")).to.not.equal(systemFingerprint("smollm2-135m"));
  });

  for (const name of files) {
    const golden = JSON.parse(readFileSync(join(dir, name), "utf8"));
    const events = golden.events as GenerationEvent[];
    const include_usage = golden.request.stream_options?.include_usage === true;
    describe(name.replace(/\.json$/, ""), () => {
      it("non-streamed response matches and follows openapi.json", () => {
        let got: any;
        try {
          got = fromInternal(events, golden.render);
          expect(validator.validateJson("createCompletion", 200, got)).to.deep.equal([]);
        } catch (e) {
          if (!(e instanceof ApiError)) throw e;
          got = { status: e.status("openai"), error: e.body("openai") };
          expect(validator.validateJson("createCompletion", got.status, got.error)).to.deep.equal([]);
        }
        expect(got).to.deep.equal(golden.response);
      });

      it("stream frames match, follow openapi.json and rebuild the text", () => {
        const enc = new CompletionStreamEncoder(golden.render, { include_usage });
        const frames = events.flatMap((ev) => enc.push(ev));
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
