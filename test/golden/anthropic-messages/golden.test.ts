import { expect } from "chai";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ApiError } from "../../../src/errors.js";
import { formatSse } from "../../../src/http/sse.js";
import { fromInternal, MessagesStreamEncoder, omitsThinking } from "../../../src/dialects/anthropic-messages/index.js";
import type { GenerationEvent } from "../../../src/engine/types.js";
import { schemaErrors } from "../../clients/openapi-schema.js";

const dir = dirname(fileURLToPath(import.meta.url));
const files = readdirSync(dir).filter((f) => f.endsWith(".json"));

describe("golden: anthropic-messages", () => {
  it("covers every required scenario", () => {
    for (const need of ["text", "thinking", "tool-one", "tool-two", "stop-sequence", "max-tokens", "error"]) {
      expect(files, need).to.include(`${need}.json`);
    }
  });

  for (const name of files) {
    const golden = JSON.parse(readFileSync(join(dir, name), "utf8"));
    const events = golden.events as GenerationEvent[];
    describe(name.replace(/\.json$/, ""), () => {
      it("non-streamed response", () => {
        let got: unknown;
        try {
          got = fromInternal(events, golden.request, golden.render);
        } catch (e) {
          if (!(e instanceof ApiError)) throw e;
          got = { status: e.status("anthropic"), error: e.body("anthropic") };
        }
        expect(got).to.deep.equal(golden.response);
      });

      it("stream frames", () => {
        const enc = new MessagesStreamEncoder({ id: golden.render.id, model: golden.request.model ?? golden.render.model_id, omit_thinking: omitsThinking(golden.request) });
        const frames = events.flatMap((ev) => enc.push(ev));
        expect(JSON.parse(JSON.stringify(frames))).to.deep.equal(golden.stream);
        // Nothing is emitted after the stream ended.
        expect(enc.push({ type: "text", text: "late" })).to.deep.equal([]);
      });

      it("every output matches openapi.json (Message, MessageStreamEvent / AnthropicError)", () => {
        if (golden.response.status) expect(schemaErrors("AnthropicError", golden.response.error)).to.equal(null);
        else expect(schemaErrors("AnthropicMessage", golden.response)).to.equal(null);
        for (const f of golden.stream) expect(schemaErrors("AnthropicStreamEvent", f.data), f.event).to.equal(null);
      });

      it("stream invariants: names match types, blocks open and close in order, deltas rebuild the message", () => {
        const frames = golden.stream as Array<{ event: string; data: Record<string, any> }>;
        for (const f of frames) {
          expect(f.data.type, f.event).to.equal(f.event);
          expect(formatSse(f)).to.match(new RegExp(`^event: ${f.event}\ndata: \\{.*\\}\n\n$`));
        }
        expect(frames[0].event).to.equal("message_start");
        expect(frames[1].event).to.equal("ping");
        const blocks: any[] = [];
        const json: string[] = [];
        let open = -1;
        for (const f of frames.slice(2)) {
          if (f.event === "content_block_start") {
            expect(open, "a block was left open").to.equal(-1);
            expect(f.data.index).to.equal(blocks.length);
            blocks.push({ ...f.data.content_block });
            json.push("");
            open = f.data.index;
          } else if (f.event === "content_block_delta") {
            expect(f.data.index).to.equal(open);
            const b = blocks[open];
            const d = f.data.delta;
            if (d.type === "text_delta") b.text += d.text;
            else if (d.type === "thinking_delta") b.thinking += d.thinking;
            else if (d.type === "signature_delta") b.signature = d.signature;
            else if (d.type === "input_json_delta") json[open] += d.partial_json;
            else expect.fail(`unknown delta ${d.type}`);
          } else if (f.event === "content_block_stop") {
            expect(f.data.index).to.equal(open);
            if (blocks[open].type === "tool_use") blocks[open].input = JSON.parse(json[open] || "{}");
            if (blocks[open].type === "thinking") expect(blocks[open].signature).to.equal("mashbox-local");
            open = -1;
          }
        }
        const last = frames[frames.length - 1];
        if (last.event === "error") {
          expect(golden.response.status).to.equal(500);
          return;
        }
        expect(frames[frames.length - 2].event).to.equal("message_delta");
        expect(last.event).to.equal("message_stop");
        expect(blocks).to.deep.equal(golden.response.content);
        expect(frames[frames.length - 2].data.delta.stop_reason).to.equal(golden.response.stop_reason);
        expect(frames[frames.length - 2].data.usage).to.deep.equal(golden.response.usage);
      });
    });
  }
});
