// Every route of the server core on a real engine: health (GET/HEAD, every path), models,
// metrics, openapi.json, the --ui page, 404/405, unknown fields, and the test-only script hook.
import { expect } from "chai";
import { postJson, rawRequest, scriptHeader, startTestServer, type TestServer } from "../helpers/server.js";

/** The generated text of an SSE answer, whichever dialect's deltas carry it. */
function streamedText(sse: string): string {
  let out = "";
  for (const block of sse.split("\n\n")) {
    const data = block.split("\n").find((l) => l.startsWith("data: "))?.slice(6);
    if (!data || data === "[DONE]") continue;
    const p = JSON.parse(data);
    out += p.choices?.[0]?.delta?.content ?? p.choices?.[0]?.text ?? "";
    if (p.type === "content_block_delta" && p.delta?.type === "text_delta") out += p.delta.text;
    if (p.type === "response.output_text.delta") out += p.delta;
  }
  return out;
}

describe("server routes", function () {
  this.timeout(120000);
  let s: TestServer;
  before(async () => {
    s = await startTestServer({ slots: 2, ctx: 256 });
  });
  after(async () => {
    await s?.close();
  });

  it("GET /v1/health, /health and / answer the Health object when ready", async () => {
    for (const path of ["/v1/health", "/health", "/"]) {
      const r = await fetch(s.url + path);
      expect(r.status, path).to.equal(200);
      const h = await r.json();
      expect(h.status).to.equal("ok");
      expect(h.live_rows).to.equal(0);
      expect(h.waiting).to.equal(0);
      expect(h.worker_restarts).to.equal(0);
      expect(h.worker_pid).to.be.a("number").and.not.equal(process.pid);
      expect(h.compiles_after_ready).to.equal(0);
    }
  });

  it("HEAD answers 200 with no body on every path", async () => {
    for (const path of ["/v1/health", "/", "/v1/models", "/no/such/path"]) {
      const r = await rawRequest(s.port, { method: "HEAD", path });
      expect(r.status, path).to.equal(200);
      expect(r.body, path).to.equal("");
    }
  });

  it("GET /v1/models lists the one model with every Model field", async () => {
    const r = await fetch(`${s.url}/v1/models`);
    expect(r.status).to.equal(200);
    const list = await r.json();
    expect(list.object).to.equal("list");
    expect(list.data).to.have.length(1);
    const m = list.data[0];
    expect(m).to.include({ id: "test-model", object: "model", owned_by: "mashbox-labs", created: 0, max_model_len: 256, slots: 2, prefix_cache: true, cache_ram_mib: 0 });
    expect(m.weights).to.match(/\.gguf$/);
    expect(m.gb).to.be.a("number").above(0);
    expect(m.bpw).to.be.a("number").above(0);
  });

  it("GET /v1/models/{model}: the model, or 404 model_not_found for another id", async () => {
    const ok = await fetch(`${s.url}/v1/models/test-model`);
    expect(ok.status).to.equal(200);
    expect((await ok.json()).id).to.equal("test-model");
    const nf = await fetch(`${s.url}/v1/models/gpt-4o`);
    expect(nf.status).to.equal(404);
    expect((await nf.json()).error).to.include({ code: "model_not_found", type: "invalid_request_error" });
  });

  it("unknown path → 404 not_found; wrong method → 405", async () => {
    const nf = await fetch(`${s.url}/v2/nothing`);
    expect(nf.status).to.equal(404);
    expect((await nf.json()).error.code).to.equal("not_found");
    const mna = await fetch(`${s.url}/v1/models`, { method: "DELETE" });
    expect(mna.status).to.equal(405);
    expect((await mna.json()).error.code).to.equal("method_not_allowed");
    const getChat = await fetch(`${s.url}/v1/chat/completions`);
    expect(getChat.status).to.equal(405);
  });

  it("GET /metrics: Prometheus text, every name prefixed mashbox:, the spec's metrics present, no identifying labels", async () => {
    const r = await fetch(`${s.url}/metrics`);
    expect(r.status).to.equal(200);
    expect(r.headers.get("content-type")).to.match(/^text\/plain/);
    const text = await r.text();
    const names = new Set<string>();
    for (const line of text.split("\n")) {
      if (line === "") continue;
      const name = line.startsWith("#") ? line.split(" ")[2] : line.split(/[{ ]/)[0];
      names.add(name);
      expect(name, line).to.match(/^mashbox:/);
      const labels = /\{(.*)\}/.exec(line)?.[1] ?? "";
      for (const l of labels.split(",").filter(Boolean)) expect(l.split("=")[0]).to.not.match(/user|key|session|tenant/i);
    }
    for (const n of [
      "mashbox:num_requests_running",
      "mashbox:num_requests_waiting",
      "mashbox:kv_cache_usage_perc",
      "mashbox:cache_config_info",
      "mashbox:request_success_total",
      "mashbox:prompt_tokens_total",
      "mashbox:generation_tokens_total",
      "mashbox:prefix_cache_queries_total",
      "mashbox:prefix_cache_hits_total",
      "mashbox:num_preemptions_total",
      "mashbox:worker_restarts_total",
      "mashbox:compiles_after_ready_total",
      "mashbox:time_to_first_token_seconds",
      "mashbox:request_queue_time_seconds",
      "mashbox:e2e_request_latency_seconds",
      "mashbox:time_per_output_token_seconds",
    ]) {
      expect(names.has(n), n).to.equal(true);
    }
    expect(text).to.match(/mashbox:cache_config_info\{block_size="256",num_blocks="2"\} 1/);
    expect(text).to.match(/^mashbox:num_preemptions_total 0$/m);
  });

  it("GET /openapi.json carries the running model id, not the placeholder", async () => {
    const r = await fetch(`${s.url}/openapi.json`);
    expect(r.status).to.equal(200);
    const doc = await r.json();
    expect(doc.openapi).to.match(/^3\.1/);
    const text = JSON.stringify(doc);
    expect(text).to.include('"test-model"');
    expect(doc.components.schemas.OpenAIModel.properties.id.examples).to.deep.equal(["test-model"]);
  });

  it("accepts and ignores unknown request fields; counts the generation in /metrics", async () => {
    const before = await (await fetch(`${s.url}/metrics`)).text();
    const count = (t: string) => Number(/^mashbox:generation_tokens_total (\d+)/m.exec(t)?.[1] ?? NaN);
    const r = await postJson(
      `${s.url}/v1/chat/completions`,
      { messages: [{ role: "user", content: "hi" }], max_tokens: 3, some_future_field: { x: 1 }, prompt_cache_key: "sess-42" },
      scriptHeader("Hello there"),
    );
    expect(r.status).to.equal(200);
    const body = await r.json();
    expect(body.object).to.equal("chat.completion");
    const after = await (await fetch(`${s.url}/metrics`)).text();
    expect(count(after)).to.be.above(count(before));
    // The log line names the session, never the prompt.
    const line = s.logs.find((l) => l.startsWith("POST /v1/chat/completions 200"));
    expect(line).to.match(/session=sess-42/);
    expect(s.logs.join("\n")).to.not.include("hi\"");
  });

  it("logs a client that left before its answer as 499 client-closed, not as a 404", async () => {
    const abort = new AbortController();
    const pending = fetch(`${s.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 200, prompt_cache_key: "left-early" }),
      signal: abort.signal,
    }).catch(() => null);
    await new Promise((r) => setTimeout(r, 150));
    abort.abort();
    await pending;
    const t0 = Date.now();
    let line: string | undefined;
    while (!(line = s.logs.find((l) => l.includes("session=left-early"))) && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
    expect(line).to.match(/^POST \/v1\/completions 499 [\d.]+ms client-closed session=left-early$/);
  });

  it("x-test-script scripts the output through a one-literal grammar (test harness)", async () => {
    const r = await postJson(`${s.url}/v1/completions`, { prompt: "x", max_tokens: 32 }, scriptHeader("Scripted ✓ text"));
    expect(r.status).to.equal(200);
    expect((await r.json()).choices[0].text).to.equal("Scripted ✓ text");
  });

  it("streams on every streaming route (each SSE event checked against openapi.json)", async () => {
    const cases: [string, Record<string, unknown>, RegExp][] = [
      ["/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true } }, /data: \[DONE\]\n\n$/],
      ["/v1/completions", { prompt: "hi", stream: true }, /data: \[DONE\]\n\n$/],
      ["/v1/messages", { max_tokens: 8, messages: [{ role: "user", content: "hi" }], stream: true }, /event: message_stop\n/],
      ["/v1/responses", { input: "hi", stream: true }, /event: response\.completed\n/],
    ];
    for (const [path, body, end] of cases) {
      const r = await postJson(s.url + path, body, scriptHeader("Streamed words"));
      expect(r.status, path).to.equal(200);
      expect(r.headers.get("content-type"), path).to.match(/^text\/event-stream/);
      const text = await r.text();
      expect(text, path).to.match(end);
      expect(streamedText(text), path).to.equal("Streamed words");
    }
  });

  it("/v1/messages accepts ?beta=true", async () => {
    const r = await postJson(`${s.url}/v1/messages?beta=true`, { max_tokens: 4, messages: [{ role: "user", content: "hi" }] }, scriptHeader("ok"));
    expect(r.status).to.equal(200);
    expect((await r.json()).type).to.equal("message");
  });
});

describe("server routes as production serves them, with --ui", function () {
  this.timeout(120000);
  let s: TestServer;
  before(async () => {
    s = await startTestServer({ scripts: false, ui: true });
  });
  after(async () => {
    await s?.close();
  });

  it("GET / is the chat page with --ui", async () => {
    const r = await fetch(`${s.url}/`);
    expect(r.status).to.equal(200);
    expect(r.headers.get("content-type")).to.match(/^text\/html/);
    const html = await r.text();
    expect(html).to.include("MASHBOX Chat").and.include("/v1/chat/completions");
  });

  it("knows no script header: the test harness alone adds it", async () => {
    const r = await postJson(`${s.url}/v1/completions`, { prompt: "x", max_tokens: 4 }, scriptHeader("SCRIPTED-ONLY-IN-TESTS"));
    expect(r.status).to.equal(200);
    expect((await r.json()).choices[0].text).to.not.equal("SCRIPTED-ONLY-IN-TESTS");
  });
});
