// A long prefill leaves an open stream silent for minutes; HTTP clients (undici's 300 s body
// timeout, agents' idle watchdogs) drop such a connection. Streams therefore send keep-alive
// frames while quiet: Anthropic's own ping event, an SSE comment elsewhere.
import { expect } from "chai";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import type { GenerationEvent } from "../../src/engine/types.js";
import { createChatCompletion } from "../../src/handlers/createChatCompletion.js";
import { createMessage } from "../../src/handlers/createMessage.js";
import { fakeEngine, parseSse, serveHandler } from "../clients/fake-app.js";

const usage = { prompt_tokens: 3, cached_tokens: 0, completion_tokens: 1, reasoning_tokens: 0 };
const timings = { prompt_n: 3, prompt_ms: 1, prompt_per_second: null, predicted_n: 1, predicted_ms: 1, predicted_per_second: null, cache_n: 0, queue_ms: 0 };
// start, then a "prefill" long enough for several keep-alives, then one token
const slow: GenerationEvent[] = [
  { type: "start", prompt_tokens: 3, cached_tokens: 0 },
  { type: "text", text: "Hi" },
  { type: "done", finish_reason: "stop", stop_sequence: null, usage, timings },
];
const post = (url: string, body: unknown) => fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("SSE keep-alive while a stream is quiet", () => {
  it("Messages: ping events between message_start and the first block; the SDK stream still parses", async () => {
    const app = await serveHandler(createMessage, fakeEngine({ events: slow, tick_ms: 150 }), "anthropic", { sse_keepalive_ms: 30 });
    try {
      const res = await post(app.url, { model: "m", max_tokens: 5, stream: true, messages: [{ role: "user", content: "hi" }] });
      const events = parseSse(await res.text()).map((e) => e.event);
      const first_block = events.indexOf("content_block_start");
      expect(events[0]).to.equal("message_start");
      expect(events.slice(1, first_block).every((e) => e === "ping")).to.equal(true);
      expect(first_block - 1, "pings before the first block").to.be.greaterThan(1);
      expect(events.at(-1)).to.equal("message_stop");

      const client = new Anthropic({ baseURL: app.url, apiKey: "k", maxRetries: 0 });
      const msg = await client.messages.stream({ model: "m", max_tokens: 5, messages: [{ role: "user", content: "hi" }] }).finalMessage();
      expect(msg.content).to.have.length(1);
      expect(msg.content[0]).to.include({ type: "text", text: "Hi" });
    } finally {
      await app.close();
    }
  });

  it("Chat Completions: SSE comments only (no extra chunks); the openai SDK ignores them", async () => {
    const app = await serveHandler(createChatCompletion, fakeEngine({ events: slow, tick_ms: 150 }), "openai", { sse_keepalive_ms: 30 });
    try {
      const res = await post(app.url, { model: "fake-model", stream: true, messages: [{ role: "user", content: "hi" }] });
      const raw = await res.text();
      expect(raw.match(/^: keep-alive$/gm)?.length ?? 0).to.be.greaterThan(1);
      const chunks = parseSse(raw);
      expect(chunks.at(-1)!.data).to.equal("[DONE]");
      expect(chunks.filter((c) => c.data !== "[DONE]").map((c) => c.data.choices[0]?.delta?.content ?? "").join("")).to.equal("Hi");

      const client = new OpenAI({ baseURL: app.url, apiKey: "k", maxRetries: 0 });
      let text = "";
      for await (const c of await client.chat.completions.create({ model: "fake-model", stream: true, messages: [{ role: "user", content: "hi" }] }))
        text += c.choices[0]?.delta?.content ?? "";
      expect(text).to.equal("Hi");
    } finally {
      await app.close();
    }
  });

  it("a stream that is never quiet gets no keep-alive", async () => {
    const app = await serveHandler(createMessage, fakeEngine({ events: slow, tick_ms: 1 }), "anthropic", { sse_keepalive_ms: 5_000 });
    try {
      const res = await post(app.url, { model: "m", max_tokens: 5, stream: true, messages: [{ role: "user", content: "hi" }] });
      expect(parseSse(await res.text()).filter((e) => e.event === "ping")).to.have.length(1); // the one after message_start
    } finally {
      await app.close();
    }
  });
});
