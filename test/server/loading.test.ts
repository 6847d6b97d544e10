// While the model is not loaded yet the server already listens: health says "loading" (503),
// HEAD 503, generation routes 503 (OpenAI) / 529 + x-should-retry (Anthropic) with Retry-After.
// The engine here is the CLI's DeferredEngine before a model is attached — the exact object
// `mashbox run` serves while it pulls a model — so the loading state holds for the whole test.
import { expect } from "chai";
import { DeferredEngine } from "../../src/engine/deferred.js";
import { postJson, rawRequest, startTestServer, type TestServer } from "../helpers/server.js";

describe("while the model loads", function () {
  this.timeout(60000);
  let s: TestServer;
  before(async () => {
    const engine = new DeferredEngine({
      id: "test-model", path: "/models/pending.gguf", architecture: "", n_ctx: 512, n_ctx_train: 0, slots: 2,
      n_vocab: 0, file_bytes: 0, bpw: 0, chat_template: null, bos_token: null, eos_token: null,
    });
    s = await startTestServer({ engine });
  });
  after(async () => {
    await s?.close();
  });

  it("GET /v1/health is 503 with status loading; HEAD is 503 with no body", async () => {
    const r = await fetch(`${s.url}/v1/health`);
    expect(r.status).to.equal(503);
    const body = await r.json();
    expect(body.status).to.equal("loading");
    expect(body.compiles_after_ready, "null before ready").to.equal(null);
    const h = await rawRequest(s.port, { method: "HEAD", path: "/v1/health" });
    expect(h.status).to.equal(503);
    expect(h.body).to.equal("");
  });

  it("OpenAI routes answer 503 with Retry-After", async () => {
    for (const [path, body] of [
      ["/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] }],
      ["/v1/completions", { prompt: "hi" }],
      ["/v1/responses", { input: "hi" }],
    ] as const) {
      const r = await postJson(s.url + path, body);
      expect(r.status, path).to.equal(503);
      expect(Number(r.headers.get("retry-after")), path).to.be.above(0);
      expect((await r.json()).error.code, path).to.equal("loading");
    }
  });

  it("Anthropic routes answer 529 overloaded_error with Retry-After and x-should-retry", async () => {
    for (const [path, body] of [
      ["/v1/messages", { max_tokens: 4, messages: [{ role: "user", content: "hi" }] }],
      ["/v1/messages/count_tokens", { messages: [{ role: "user", content: "hi" }] }],
    ] as const) {
      const r = await postJson(s.url + path, body);
      expect(r.status, path).to.equal(529);
      expect(Number(r.headers.get("retry-after")), path).to.be.above(0);
      expect(r.headers.get("x-should-retry"), path).to.equal("true");
      const e = await r.json();
      expect(e).to.deep.equal({ type: "error", error: { type: "overloaded_error", message: e.error.message } });
    }
  });

  it("models and metrics still answer", async () => {
    expect((await fetch(`${s.url}/v1/models`)).status).to.equal(200);
    expect((await fetch(`${s.url}/metrics`)).status).to.equal(200);
  });
});
