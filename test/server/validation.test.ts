// Every 4xx the server core answers for a bad request: media type, JSON syntax, contract
// validation naming the field, unsupported fields, and the model id check.
import { expect } from "chai";
import { postJson, startTestServer, type TestServer } from "../helpers/server.js";

describe("request validation", function () {
  this.timeout(120000);
  let s: TestServer;
  const chat = (extra: Record<string, unknown>) => postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], max_tokens: 2, ...extra });
  const error = async (r: Response, status: number) => {
    expect(r.status).to.equal(status);
    return (await r.json()).error;
  };
  before(async () => {
    s = await startTestServer();
  });
  after(async () => {
    await s?.close();
  });

  it("415 when a POST body is not application/json", async () => {
    const r = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "text/plain" }, body: "{}" });
    expect((await error(r, 415)).code).to.equal("unsupported_media_type");
    const form = await fetch(`${s.url}/v1/completions`, { method: "POST", body: new URLSearchParams({ prompt: "x" }) });
    expect(form.status).to.equal(415);
  });

  it("400 invalid_json for malformed JSON, in each route's shape", async () => {
    const r = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"messages": [' });
    expect((await error(r, 400)).code).to.equal("invalid_json");
    const a = await fetch(`${s.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: "{nope" });
    expect(a.status).to.equal(400);
    const body = await a.json();
    expect(body.type).to.equal("error");
    expect(body.error.type).to.equal("invalid_request_error");
  });

  it("400 naming a missing required field", async () => {
    const r = await postJson(`${s.url}/v1/chat/completions`, { max_tokens: 2 });
    const e = await error(r, 400);
    expect(e.message).to.match(/^messages: /);
    expect(e.param).to.equal("messages");
    const c = await postJson(`${s.url}/v1/completions`, {});
    expect((await error(c, 400)).message).to.match(/^prompt: /);
  });

  it("temperature > 4 → 400 naming temperature", async () => {
    const e = await error(await chat({ temperature: 4.5 }), 400);
    expect(e.message).to.equal("temperature: must be <= 4");
    expect(e.param).to.equal("temperature");
  });

  it("top_p = 0 → 400", async () => {
    expect((await error(await chat({ top_p: 0 }), 400)).message).to.match(/^top_p: /);
  });

  it("n != 1 → 400", async () => {
    expect((await error(await chat({ n: 2 }), 400)).message).to.match(/^n: /);
  });

  it("logprobs → 400 naming logprobs (unsupported)", async () => {
    const e = await error(await chat({ logprobs: true }), 400);
    expect(e.param).to.equal("logprobs");
    expect(e.message).to.match(/^logprobs/);
    expect(e.code).to.equal("unsupported_field");
    const c = await postJson(`${s.url}/v1/completions`, { prompt: "x", logprobs: 2 });
    expect((await error(c, 400)).param).to.equal("logprobs");
  });

  it("a field inside an array is named by its position", async () => {
    const e = await error(await chat({ messages: [{ role: "user", content: "a" }, { content: "b" }] }), 400);
    expect(e.message).to.match(/^messages\[1\]/);
  });

  it("404 model_not_found for another model id; absent or the served id is fine", async () => {
    const e = await error(await chat({ model: "gpt-4o" }), 404);
    expect(e.code).to.equal("model_not_found");
    expect((await chat({ model: "test-model" })).status).to.equal(200);
    expect((await chat({})).status).to.equal(200);
  });

  it("Anthropic validation errors use the Anthropic shape", async () => {
    const r = await postJson(`${s.url}/v1/messages`, { max_tokens: 1, messages: [], temperature: 9 });
    expect(r.status).to.equal(400);
    const body = await r.json();
    expect(body.type).to.equal("error");
    expect(body.error.type).to.equal("invalid_request_error");
    expect(body.error.message).to.match(/^(messages|temperature): /);
  });
});
