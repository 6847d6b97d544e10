import { expect } from "chai";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { capturedRequests, replayHeaders, type CapturedRequest } from "./captured.js";
import { parseSse } from "./fake-app.js";

// Replays every captured client request (Claude Code, Codex, Pi, the SDKs; plain, tool and think
// runs; every route) against a live server on the fixture model. Only the token budget is
// rewritten, so the replay stays short; everything else goes out as the client sent it. The
// clients were pointed at model ids of the capture's stub server, so the server runs under those
// ids (one server per id). The harness checks every answer and SSE event against openapi.json.
const BUDGET = 4;
// Claude Code's system prompt and tools alone are ~20k tokens.
const CTX = 32768;
// The coding agents' prompts (Claude Code 12k-20k tokens, Codex ~10k) take minutes each to
// prefill on one CPU thread; they run with MASHBOX_REPLAY_LARGE=1 and are listed as pending
// otherwise. Every request, large ones included, also runs through the full app with a scripted
// engine in replay-contract.test.ts.
const LARGE_BODY_BYTES = 16_000;
const RUN_LARGE = process.env.MASHBOX_REPLAY_LARGE === "1";

function budgeted(r: CapturedRequest): Record<string, any> | null {
  if (!r.body) return null;
  const body = structuredClone(r.body);
  const cap = (field: string) => {
    if (typeof body[field] === "number") body[field] = Math.min(body[field], BUDGET);
  };
  if (r.path === "/v1/messages") {
    body.max_tokens = Math.min(body.max_tokens ?? BUDGET, BUDGET);
    cap("max_completion_tokens");
  } else if (r.path === "/v1/responses") {
    body.max_output_tokens = Math.min(body.max_output_tokens ?? BUDGET, BUDGET);
  } else if (r.path === "/v1/chat/completions" || r.path === "/v1/completions") {
    cap("max_tokens");
    cap("max_completion_tokens");
    if (body.max_tokens === undefined && body.max_completion_tokens === undefined) body.max_completion_tokens = BUDGET;
  }
  return body;
}

describe("clients: replay of every captured request against a live server", function () {
  this.timeout(600_000);
  const servers = new Map<string, Promise<TestServer>>();
  const serverFor = (model: string) => {
    if (!servers.has(model)) servers.set(model, startTestServer({ model_id: model, ctx: CTX, slots: 1 }));
    return servers.get(model)!;
  };
  after(async () => {
    for (const s of servers.values()) await (await s).close();
  });

  const captured = capturedRequests();
  it("has the captured requests of every client", () => {
    expect(captured.length).to.be.greaterThan(150);
  });

  for (const r of captured) {
    const large = JSON.stringify(r.body ?? "").length > LARGE_BODY_BYTES;
    (large && !RUN_LARGE ? it.skip : it)(`${r.where} ${r.method} ${r.url}`, async () => {
      const server = await serverFor(typeof r.body?.model === "string" ? r.body.model : "stub-model");
      const body = budgeted(r);
      const res = await fetch(server.url + r.url, { method: r.method, headers: replayHeaders(r), ...(body ? { body: JSON.stringify(body) } : {}) });
      const text = await res.text();
      expect(res.status, text.slice(0, 500)).to.equal(200);
      const streamed = (res.headers.get("content-type") ?? "").startsWith("text/event-stream");
      expect(streamed, "streamed iff asked").to.equal(body?.stream === true);
      if (!streamed) {
        const json = JSON.parse(text);
        if (r.path === "/v1/messages") expect(json.usage.output_tokens).to.be.within(0, BUDGET);
        if (r.path === "/v1/messages/count_tokens") expect(json.input_tokens).to.be.greaterThan(0);
        if (r.path === "/v1/responses") expect(["completed", "incomplete"]).to.include(json.status);
        return;
      }
      const events = parseSse(text);
      const last = events[events.length - 1];
      if (r.path === "/v1/messages") {
        expect(events[0].event).to.equal("message_start");
        expect(last.event).to.equal("message_stop");
      } else if (r.path === "/v1/responses") {
        expect(["response.completed", "response.incomplete"]).to.include(last.event);
        events.forEach((e, i) => expect(e.data.sequence_number).to.equal(i));
      } else {
        expect(last.data).to.equal("[DONE]");
      }
    });
  }
});
