// A long prefill leaves an open stream silent for minutes; HTTP clients (undici's 300 s body
// timeout, agents' idle watchdogs) drop such a connection. Streams therefore send keep-alive
// frames while quiet: Anthropic's own ping event, an SSE comment elsewhere.
import { expect } from "chai";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import type { GenerationEvent } from "../../src/engine/types.js";
import { createChatCompletion } from "../../src/handlers/createChatCompletion.js";
import { createMessage } from "../../src/handlers/createMessage.js";
import { createResponse } from "../../src/handlers/createResponse.js";
import { ApiError } from "../../src/errors.js";
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

  // A stream queued behind busy slots gets its headers after one keep-alive period, not at
  // admission: a client must not wait 300 s for headers (undici's limit) just because others run.
  describe("a stream still waiting for a slot", () => {
    // the fake engine's first event (admission) comes 200 ms after submit; keep-alive period 30 ms
    const queued = { tick_ms: 200 };

    it("Messages: 200 with SSE comments while queued, then message_start; the SDK parses it", async () => {
      const app = await serveHandler(createMessage, fakeEngine({ events: slow, ...queued }), "anthropic", { sse_keepalive_ms: 30 });
      try {
        const res = await post(app.url, { model: "m", max_tokens: 5, stream: true, messages: [{ role: "user", content: "hi" }] });
        const raw = await res.text();
        expect(res.status).to.equal(200);
        expect(raw.startsWith(": waiting for a slot\n\n"), raw.slice(0, 80)).to.equal(true);
        const before_start = raw.slice(0, raw.indexOf("event: message_start"));
        expect(before_start, "no event before message_start").to.not.include("event:");
        const events = parseSse(raw).map((e) => e.event);
        expect(events[0]).to.equal("message_start");
        expect(events.at(-1)).to.equal("message_stop");

        const client = new Anthropic({ baseURL: app.url, apiKey: "k", maxRetries: 0 });
        const msg = await client.messages.stream({ model: "m", max_tokens: 5, messages: [{ role: "user", content: "hi" }] }).finalMessage();
        expect(msg.content[0]).to.include({ type: "text", text: "Hi" });
      } finally {
        await app.close();
      }
    });

    it("Responses: comments, then response.created ... response.completed with sequence numbers from 0", async () => {
      const app = await serveHandler(createResponse, fakeEngine({ events: slow, ...queued }), "openai", { sse_keepalive_ms: 30 });
      try {
        const res = await post(app.url, { model: "fake-model", stream: true, input: "hi" });
        const raw = await res.text();
        expect(raw.startsWith(": waiting for a slot\n\n")).to.equal(true);
        const frames = parseSse(raw);
        expect(frames[0].data.type).to.equal("response.created");
        expect(frames.map((f) => f.data.sequence_number)).to.deep.equal(frames.map((_, i) => i));
        expect(frames.at(-1)!.data.type).to.equal("response.completed");
      } finally {
        await app.close();
      }
    });

    it("a refusal after the commit is the dialect's in-stream error; before it, a JSON 4xx", async () => {
      const refused = [new ApiError("context_length_exceeded", "The prompt does not fit in the context window.")];
      const late = await serveHandler(createMessage, fakeEngine({ events: refused, ...queued }), "anthropic", { sse_keepalive_ms: 30 });
      try {
        const res = await post(late.url, { model: "m", max_tokens: 5, stream: true, messages: [{ role: "user", content: "hi" }] });
        expect(res.status).to.equal(200);
        const events = parseSse(await res.text());
        expect(events.map((e) => e.event)).to.deep.equal(["error"]);
        expect(events[0].data.error.type).to.equal("invalid_request_error");
      } finally {
        await late.close();
      }
      const early = await serveHandler(createChatCompletion, fakeEngine({ events: refused, tick_ms: 1 }), "openai", { sse_keepalive_ms: 5_000 });
      try {
        const res = await post(early.url, { model: "fake-model", stream: true, messages: [{ role: "user", content: "hi" }] });
        expect(res.status).to.equal(400);
        expect((await res.json()).error.code).to.equal("context_length_exceeded");
      } finally {
        await early.close();
      }
    });

    it("Chat Completions: a client that leaves while queued cancels the request", async () => {
      const seen: import("../../src/engine/types.js").GenerationRequest[] = [];
      let aborted = false;
      const engine = fakeEngine({ events: slow, tick_ms: 400 }, seen);
      const submit = engine.submit.bind(engine);
      engine.submit = (req, signal) => {
        signal?.addEventListener("abort", () => (aborted = true));
        return submit(req, signal);
      };
      const app = await serveHandler(createChatCompletion, engine, "openai", { sse_keepalive_ms: 30 });
      try {
        const ac = new AbortController();
        const res = await fetch(app.url, { method: "POST", signal: ac.signal, headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "fake-model", stream: true, messages: [{ role: "user", content: "hi" }] }) });
        expect(res.status, "headers arrive while the request is still queued").to.equal(200);
        ac.abort();
        for (let i = 0; i < 100 && !aborted; i++) await new Promise((r) => setTimeout(r, 10));
        expect(aborted).to.equal(true);
        expect(seen).to.have.length(1);
      } finally {
        await app.close();
      }
    });
  });
});
