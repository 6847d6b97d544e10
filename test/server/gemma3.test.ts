// Gemma 3 through HTTP on its fixture (test/fixtures/gemma3-q8_0.gguf: the gemma3 architecture with
// Gemma 3's vocabulary and, as the base model gemma3-270m, no chat template): /v1/completions
// generates; every chat route answers 400 no_chat_template in its own error shape, naming what
// works instead; with a template given (--chat-template, the engine's chat_template) chat works
// and the prompt is that template's rendering.
import { expect } from "chai";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseRunArgs } from "../../src/cli.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

const FIXTURE = "test/fixtures/gemma3-q8_0.gguf";
// Gemma 3's own turn markup (a simplified form of its instruct template).
const TEMPLATE =
  "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n" +
  "{{ m.content }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

async function post(s: TestServer, route: string, body: unknown): Promise<{ status: number; json: any }> {
  const r = await fetch(s.url + route, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

const user = [{ role: "user", content: "What is the capital of France?" }];

describe("gemma3 over HTTP (fixture without a chat template)", function () {
  this.timeout(120_000);
  let plain: TestServer;
  before(async function () {
    plain = await startTestServer({ model_path: FIXTURE, model_id: "gemma3", slots: 1, ctx: 256, scripts: false });
  });
  after(async () => plain?.close());

  it("/v1/completions generates", async function () {
    const r = await post(plain, "/v1/completions", { model: "gemma3", prompt: "The capital of France is", max_tokens: 6, temperature: 0 });
    expect(r.status).to.equal(200);
    expect(r.json.usage.completion_tokens).to.equal(6);
    expect(r.json.choices[0].text).to.be.a("string");
  });

  for (const stream of [false, true]) {
    it(`/v1/chat/completions${stream ? " (stream)" : ""}: 400 no_chat_template in OpenAI's shape`, async function () {
      const r = await post(plain, "/v1/chat/completions", { model: "gemma3", messages: user, max_tokens: 4, stream });
      expect(r.status).to.equal(400);
      expect(r.json.error.type).to.equal("invalid_request_error");
      expect(r.json.error.code).to.equal("no_chat_template");
      expect(r.json.error.message).to.match(/no chat template/).and.match(/\/v1\/completions/).and.match(/--chat-template/);
    });
  }

  it("/v1/responses: 400 no_chat_template", async function () {
    const r = await post(plain, "/v1/responses", { model: "gemma3", input: "Hi", max_output_tokens: 4 });
    expect(r.status).to.equal(400);
    expect(r.json.error.code).to.equal("no_chat_template");
  });

  it("/v1/messages and count_tokens: 400 in Anthropic's shape", async function () {
    for (const route of ["/v1/messages", "/v1/messages/count_tokens"]) {
      const r = await post(plain, route, { model: "gemma3", messages: user, max_tokens: 4 });
      expect(r.status, route).to.equal(400);
      expect(r.json.type, route).to.equal("error");
      expect(r.json.error.type, route).to.equal("invalid_request_error");
      expect(r.json.error.message, route).to.match(/no chat template/);
    }
  });
});

describe("gemma3 over HTTP with a chat template given", function () {
  this.timeout(120_000);
  let s: TestServer;
  before(async function () {
    s = await startTestServer({ model_path: FIXTURE, model_id: "gemma3", slots: 1, ctx: 256, scripts: false, engine_options: { chat_template: TEMPLATE } });
  });
  after(async () => s?.close());

  it("chat completions answer, on the template's rendering of the conversation", async function () {
    const chat = await post(s, "/v1/chat/completions", { model: "gemma3", messages: user, max_tokens: 3, temperature: 0 });
    expect(chat.status).to.equal(200);
    expect(chat.json.choices[0].message.role).to.equal("assistant");
    // the same text written out through /v1/completions (BOS added there as the template's bos_token)
    const text = "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n";
    const raw = await post(s, "/v1/completions", { model: "gemma3", prompt: text, max_tokens: 1 });
    expect(raw.status).to.equal(200);
    expect(chat.json.usage.prompt_tokens).to.equal(raw.json.usage.prompt_tokens);
  });

  it("messages count_tokens renders through it too", async function () {
    const r = await post(s, "/v1/messages/count_tokens", { model: "gemma3", messages: user });
    expect(r.status).to.equal(200);
    expect(r.json.input_tokens).to.be.greaterThan(10);
  });
});

// A slot's local layers keep W + max batch positions (fixture W = 20; max batch 8 here: 28), so
// after a 60-token prompt a slot can be continued from its last ~8 positions, not from position 30.
// The scheduler asks the model (kv_reusable) and prefills again instead of reusing what is gone;
// answers are the same as on a fresh server either way. --cache-ram is on: the host prompt cache
// cannot take a ring's K/V and stays off for this model, which must not break anything.
describe("gemma3 slot reuse with sliding-window layers", function () {
  this.timeout(180_000);
  const P = "The quick brown fox jumps over the lazy dog. ".repeat(6);
  const opts = { model_path: FIXTURE, model_id: "gemma3", slots: 1, ctx: 256, scripts: false, engine_options: { max_batch: 8, cache_ram_mib: 64 } };
  const complete = async (s: TestServer, prompt: string) => {
    const r = await post(s, "/v1/completions", { model: "gemma3", prompt, max_tokens: 4, temperature: 0 });
    expect(r.status).to.equal(200);
    return { text: r.json.choices[0].text as string, cached: r.json.timings.cache_n as number, prompt_tokens: r.json.usage.prompt_tokens as number };
  };
  let fresh: Map<string, string>;
  const prompts = { shortened: P.slice(0, P.length / 2) + "Hello there.", extended: "" };

  it("reuses only a prefix whose window is still held, and answers as a fresh server does", async function () {
    const s = await startTestServer(opts);
    let first: Awaited<ReturnType<typeof complete>>;
    let shortened: Awaited<ReturnType<typeof complete>>;
    let extended: Awaited<ReturnType<typeof complete>>;
    try {
      first = await complete(s, P);
      expect(first.prompt_tokens).to.be.greaterThan(50);
      // shares ~half of P with the slot: its window there was overwritten, so nothing is reused
      shortened = await complete(s, prompts.shortened);
      expect(shortened.cached).to.equal(0);
      // the slot now holds the shortened prompt and its answer: extending that reuses all of it
      prompts.extended = prompts.shortened + shortened.text + " And then";
      extended = await complete(s, prompts.extended);
      expect(extended.cached).to.be.greaterThan(20);
      // a cut into a lost window would have thrown in the worker (kv_truncate refuses it)
      expect(s.engine.stats().worker_restarts).to.equal(0);
    } finally {
      await s.close();
    }
    fresh = new Map();
    for (const prompt of [prompts.shortened, prompts.extended]) {
      const f = await startTestServer(opts);
      try {
        const r = await complete(f, prompt);
        expect(r.cached).to.equal(0);
        fresh.set(prompt, r.text);
      } finally {
        await f.close();
      }
    }
    expect(shortened.text).to.equal(fresh.get(prompts.shortened));
    expect(extended.text).to.equal(fresh.get(prompts.extended));
  });
});

describe("mashbox run --chat-template", function () {
  it("reads the file, and refuses a missing or empty one", function () {
    const dir = mkdtempSync(path.join(os.tmpdir(), "mb-tmpl-"));
    try {
      const file = path.join(dir, "gemma.jinja");
      writeFileSync(file, TEMPLATE);
      expect(parseRunArgs(["gemma3-270m", "--chat-template", file]).chat_template).to.equal(TEMPLATE);
      expect(parseRunArgs(["gemma3-270m"]).chat_template).to.equal(undefined);
      expect(() => parseRunArgs(["--chat-template", path.join(dir, "nope.jinja")])).to.throw(/--chat-template: cannot read/);
      writeFileSync(path.join(dir, "empty.jinja"), " \n");
      expect(() => parseRunArgs(["--chat-template", path.join(dir, "empty.jinja")])).to.throw(/is empty/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
