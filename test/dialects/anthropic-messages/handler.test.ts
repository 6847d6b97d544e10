import { expect } from "chai";
import { ApiError } from "../../../src/errors.js";
import { createMessage } from "../../../src/handlers/createMessage.js";
import { countMessageTokens } from "../../../src/handlers/countMessageTokens.js";
import type { GenerationEvent, GenerationRequest } from "../../../src/engine/types.js";
import { fakeEngine, parseSse, serveHandler } from "../../clients/fake-app.js";

const usage = { prompt_tokens: 10, cached_tokens: 6, completion_tokens: 2, reasoning_tokens: 0 };
const timings = { prompt_n: 4, prompt_ms: 1, prompt_per_second: null, predicted_n: 2, predicted_ms: 1, predicted_per_second: null, cache_n: 6, queue_ms: 0 };
const ok: GenerationEvent[] = [
  { type: "start", prompt_tokens: 10, cached_tokens: 6 },
  { type: "text", text: "Hi" },
  { type: "text", text: "!" },
  { type: "done", finish_reason: "stop", stop_sequence: null, usage, timings },
];
const post = (url: string, body: unknown) => fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("createMessage / countMessageTokens handlers (scripted in-memory engine)", () => {
  it("answers a Message, echoing the model and reporting cached prompt tokens apart", async () => {
    const seen: GenerationRequest[] = [];
    const app = await serveHandler(createMessage, fakeEngine({ events: ok }, seen), "anthropic");
    try {
      const res = await post(app.url, { model: "claude-x", max_tokens: 5, messages: [{ role: "user", content: "hi" }] });
      expect(res.status).to.equal(200);
      const msg = await res.json();
      expect(msg.id).to.match(/^msg_/);
      expect(msg).to.deep.include({ model: "claude-x", stop_reason: "end_turn", content: [{ type: "text", text: "Hi!" }] });
      expect(msg.usage).to.deep.equal({ input_tokens: 4, cache_read_input_tokens: 6, cache_creation_input_tokens: 0, output_tokens: 2 });
      expect(seen[0].max_tokens).to.equal(5);
      expect(seen[0].id).to.equal(msg.id);
      expect(app.generations).to.deep.equal(["stop"]);
    } finally {
      await app.close();
    }
  });

  it("streams message_start … message_stop as SSE", async () => {
    const app = await serveHandler(createMessage, fakeEngine({ events: ok }), "anthropic");
    try {
      const res = await post(app.url, { max_tokens: 5, stream: true, messages: [{ role: "user", content: "hi" }] });
      expect(res.status).to.equal(200);
      expect(res.headers.get("content-type")).to.match(/^text\/event-stream/);
      const events = parseSse(await res.text());
      expect(events.map((e) => e.event)).to.deep.equal([
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
      ]);
      expect(events[0].data.message.model).to.equal("fake-model");
    } finally {
      await app.close();
    }
  });

  it("a request refused before it ran is an HTTP error in the Anthropic shape, even when streamed", async () => {
    const refused = new ApiError("context_length_exceeded", "too long", { param: "messages" });
    const app = await serveHandler(createMessage, fakeEngine({ events: [refused] }), "anthropic");
    try {
      for (const stream of [false, true]) {
        const res = await post(app.url, { max_tokens: 5, stream, messages: [{ role: "user", content: "hi" }] });
        expect(res.status).to.equal(400);
        expect(await res.json()).to.deep.equal({ type: "error", error: { type: "invalid_request_error", message: "too long" } });
      }
    } finally {
      await app.close();
    }
  });

  it("an engine failure after output ends the stream with an error event; unstreamed it is a 500", async () => {
    const failing: GenerationEvent[] = [ok[0], ok[1], { type: "error", code: "engine_error", message: "device fault" }];
    const app = await serveHandler(createMessage, fakeEngine({ events: failing }), "anthropic");
    try {
      const res = await post(app.url, { max_tokens: 5, stream: true, messages: [{ role: "user", content: "hi" }] });
      const events = parseSse(await res.text());
      const last = events[events.length - 1];
      expect(last.event).to.equal("error");
      expect(last.data.error).to.deep.equal({ type: "api_error", message: "device fault" });
      expect(last.data.request_id).to.equal(events[0].data.message.id);
      expect(events.some((e) => e.event === "message_stop")).to.equal(false);
      const plain = await post(app.url, { max_tokens: 5, messages: [{ role: "user", content: "hi" }] });
      expect(plain.status).to.equal(500);
      expect((await plain.json()).error.type).to.equal("api_error");
    } finally {
      await app.close();
    }
  });

  it("count_tokens counts the same chat prompt a Messages request renders", async () => {
    let counted: unknown = null;
    const engine = fakeEngine({ events: [], prompt_tokens: 42 });
    engine.countTokens = async (input) => {
      counted = input;
      return 42;
    };
    const app = await serveHandler(countMessageTokens, engine, "anthropic");
    try {
      const res = await post(app.url, { system: "S", messages: [{ role: "user", content: "hi" }], tools: [{ name: "t", input_schema: { type: "object" } }] });
      expect(await res.json()).to.deep.equal({ input_tokens: 42 });
      expect(counted).to.deep.equal({
        kind: "chat",
        chat: { system: ["S"], turns: [{ role: "user", content: "hi" }], tools: [{ name: "t", parameters: { type: "object" }, kind: "function" }], tool_choice: { type: "auto" } },
      });
    } finally {
      await app.close();
    }
  });
});
