import { expect } from "chai";
import { formatSse } from "../../../src/http/sse.js";
import { schemaErrors } from "../../clients/openapi-schema.js";
import { describeGoldens } from "../harness.js";
import { dialect } from "./dialect.js";

describeGoldens(dialect, import.meta.url, (golden) => {
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
