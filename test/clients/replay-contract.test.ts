import { expect } from "chai";
import { createApp, type MashboxApp } from "../../src/server.js";
import type { GenerationEvent } from "../../src/engine/types.js";
import { capturedRequests, replayHeaders } from "./captured.js";
import { fakeEngine, parseSse } from "./fake-app.js";

// Every captured client request through the whole app — routing, openapi request validation,
// security, handlers, error rendering, and the response contract check on every JSON answer and
// SSE event — with a scripted in-memory engine whose answer uses every output kind (thinking,
// text, a tool call). The capture's own stub server answered to the model ids the clients were
// configured with, so the app is started under those ids.
const usage = { prompt_tokens: 10, cached_tokens: 6, completion_tokens: 9, reasoning_tokens: 2 };
const timings = { prompt_n: 4, prompt_ms: 1, prompt_per_second: 4000, predicted_n: 9, predicted_ms: 2, predicted_per_second: 4000, cache_n: 6, queue_ms: 0 };
const answer: GenerationEvent[] = [
  { type: "start", prompt_tokens: 10, cached_tokens: 6 },
  { type: "thinking", text: "The user wants a greeting." },
  { type: "text", text: "Hi" },
  { type: "tool_call_start", index: 0, id: "call_replay_0", name: "bash", kind: "function" },
  { type: "tool_call_delta", index: 0, arguments: '{"command":' },
  { type: "tool_call_end", index: 0, arguments: '{"command":"echo hi"}' },
  { type: "done", finish_reason: "tool_calls", stop_sequence: null, usage, timings },
];

describe("clients: every captured request through the full app (scripted engine, contract-checked)", () => {
  const captured = capturedRequests();
  const apps = new Map<string, { app: MashboxApp; url: string }>();
  const modelOf = (body: Record<string, any> | null) => (typeof body?.model === "string" ? body.model : "stub-model");

  before(async () => {
    for (const model of new Set(captured.map((r) => modelOf(r.body)))) {
      const app = createApp({ engine: fakeEngine({ events: answer, prompt_tokens: 7 }), model_id: model, validate_responses: true, log: () => {} });
      const { url } = await app.listen(0, "127.0.0.1");
      apps.set(model, { app, url });
    }
  });
  after(async () => {
    for (const { app } of apps.values()) await app.close();
  });

  for (const r of captured) {
    it(`${r.where} ${r.method} ${r.url}`, async () => {
      const { app, url } = apps.get(modelOf(r.body))!;
      const res = await fetch(url + r.url, { method: r.method, headers: replayHeaders(r), ...(r.body ? { body: JSON.stringify(r.body) } : {}) });
      const text = await res.text();
      expect(res.status, text.slice(0, 400)).to.equal(200);
      expect(app.contract_violations.splice(0)).to.deep.equal([]);
      if (r.body?.stream !== true) return;
      const events = parseSse(text);
      if (r.path === "/v1/messages") {
        expect(events.map((e) => e.event)).to.include.members(["message_start", "content_block_start", "message_delta", "message_stop"]);
        const start = events.find((e) => e.event === "content_block_start" && e.data.content_block.type === "tool_use");
        expect(start?.data.content_block.id).to.match(/^toolu_/);
      } else if (r.path === "/v1/responses") {
        events.forEach((e, i) => expect(e.data.sequence_number).to.equal(i));
        const done = events.filter((e) => e.event === "response.output_item.done").map((e) => e.data.item.type);
        expect(done).to.deep.equal(["reasoning", "message", "function_call"]);
        expect(events[events.length - 1].event).to.equal("response.completed");
      }
    });
  }
});
