import { expect } from "chai";
import { createResponseValidator, readOpenapiDocument } from "../../../src/contract/validator.js";
import { formatSse } from "../../../src/http/sse.js";
import { goldenDir, readGoldens, renderResponse, renderStream } from "../harness.js";
import { dialect } from "./dialect.js";

const goldens = readGoldens(goldenDir(import.meta.url));
const files = goldens.map((g) => g.name);
const validator = createResponseValidator(readOpenapiDocument());

describe("golden: openai-chat", () => {
  it("covers every required scenario", () => {
    for (const need of ["text", "thinking", "tool-one", "tool-two", "stop-sequence", "max-tokens", "error"]) expect(files, need).to.include(`${need}.json`);
  });

  for (const { name, golden } of goldens) {
    const include_usage = golden.request.stream_options?.include_usage === true;
    describe(name.replace(/\.json$/, ""), () => {
      it("non-streamed response matches and follows openapi.json", () => {
        const got = renderResponse(dialect, golden);
        const failed = typeof got.status === "number";
        expect(validator.validateJson("createChatCompletion", failed ? got.status : 200, failed ? got.error : got)).to.deep.equal([]);
        expect(got).to.deep.equal(golden.response);
      });

      it("stream frames match and each follows openapi.json", () => {
        const { frames, encoder: enc } = renderStream(dialect, golden);
        expect(JSON.parse(JSON.stringify(frames))).to.deep.equal(golden.stream);
        for (const f of frames) {
          expect(f.event).to.equal(undefined);
          expect(validator.validateSseEvent("createChatCompletion", formatSse(f).slice("data: ".length, -2))).to.deep.equal([]);
        }
        expect(enc.push({ type: "text", text: "late" })).to.deep.equal([]);
      });

      it("stream invariants: deltas rebuild the response, [DONE] last, timings where the spec puts them", () => {
        const frames = golden.stream as Array<{ data: any }>;
        expect(frames[frames.length - 1].data).to.equal("[DONE]");
        const chunks = frames.slice(0, -1).map((f) => f.data);
        expect(chunks[0].choices[0].delta.role).to.equal("assistant");
        if (golden.response.status) {
          expect(chunks[chunks.length - 1].error).to.deep.equal(golden.response.error.error);
          return;
        }
        let content = "";
        let reasoning = "";
        const calls: any[] = [];
        for (const c of chunks) {
          expect(c.id).to.equal(golden.render.id);
          for (const ch of c.choices) {
            content += ch.delta.content ?? "";
            reasoning += ch.delta.reasoning_content ?? "";
            for (const tc of ch.delta.tool_calls ?? []) {
              if (tc.id) calls[tc.index] = { id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: "" } };
              calls[tc.index].function.arguments += tc.function?.arguments ?? "";
            }
          }
        }
        const msg = golden.response.choices[0].message;
        expect(content).to.equal(msg.content ?? "");
        expect(reasoning).to.equal(msg.reasoning_content ?? "");
        expect(calls).to.deep.equal(msg.tool_calls ?? []);
        for (const tc of calls) expect(tc.id).to.match(/^call_/);
        const finishing = chunks.filter((c) => c.choices.some((ch: any) => ch.finish_reason !== null));
        expect(finishing.length).to.equal(1);
        expect(finishing[0].choices[0].finish_reason).to.equal(golden.response.choices[0].finish_reason);
        expect(finishing[0].timings).to.deep.equal(golden.response.timings);
        const usage = chunks.filter((c) => c.usage);
        if (include_usage) {
          expect(usage.length).to.equal(1);
          expect(chunks[chunks.length - 1].choices).to.deep.equal([]);
          expect(chunks[chunks.length - 1].usage).to.deep.equal(golden.response.usage);
          expect(chunks[chunks.length - 1].timings).to.deep.equal(golden.response.timings);
        } else expect(usage.length).to.equal(0);
      });
    });
  }
});
