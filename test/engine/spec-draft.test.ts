// Speculative decoding with a draft model (--spec draft, --draft MODEL) end to end on real
// models: qwen2.5-coder-1.5b drafted by qwen2.5-coder-0.5b (both from the registry, in
// ~/.cache/mashbox), or two fixture models of one vocabulary where those are not pulled. Greedy
// output is token for token that of plain decoding, in the addon (token ids) and through the
// worker (text, usage, timings); health and /v1/models name the mode and the draft model; a
// draft model of another vocabulary is refused at load, and by `mashbox run` before it serves,
// with a message naming both models.
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createEngine, type ManagedEngine } from "../../src/engine/engine.js";
import { loadAddon, type NativeEngine, type NativeEvent, type NativeLoadOptions } from "../../src/engine/native.js";
import type { GenerationRequest, SamplingParams } from "../../src/engine/types.js";
import { defaultModelPath, startTestServer } from "../helpers/server.js";
import { collect } from "../helpers/events.js";

const MODELS = `${process.env.HOME}/.cache/mashbox/models`;
const QWEN_15 = `${MODELS}/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`;
const QWEN_05 = `${MODELS}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf`;
const SMOL = `${MODELS}/SmolLM2-135M-Instruct.Q4_1.gguf`;
const REAL = existsSync(QWEN_15) && existsSync(QWEN_05);
const TARGET = REAL ? QWEN_15 : "test/fixtures/llama-q8_0.gguf";
const DRAFT = REAL ? QWEN_05 : "test/fixtures/llama-q4_0.gguf";
const IDS = REAL ? { target: "qwen2.5-coder-1.5b", draft: "qwen2.5-coder-0.5b" } : { target: "llama-q8_0", draft: "llama-q4_0" };

const GREEDY: SamplingParams = { temperature: 0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 };
const NATIVE_GREEDY = { ...GREEDY, penalty_last_n: 64 };
const MAX_TOKENS = 24;

// Code a small model continues much as a larger one does.
const PROMPTS = [
  "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
  "// Rename the variable count to total everywhere.\nfunction sum(xs) {\n  let count = 0;\n  for (const x of xs) count += x;\n  return count;\n}\n\nfunction sum(xs) {\n",
];

/** Every prompt at once (one slot each) straight on the addon: token ids and done events by prompt. */
async function runAddon(opts: Partial<NativeLoadOptions>) {
  const eng: NativeEngine = new (loadAddon().Engine)();
  const tokens = new Map<number, number[]>();
  const done = new Map<number, Extract<NativeEvent, { type: "done" }>>();
  const errors: string[] = [];
  let finished: () => void;
  const all = new Promise<void>((res) => (finished = res));
  const info = await eng.load({ model_path: TARGET, n_ctx: 256, n_slots: PROMPTS.length, n_threads: 1, ...opts }, (evs) => {
    for (const e of evs) {
      if (e.type === "token") tokens.set(e.id, [...(tokens.get(e.id) ?? []), e.token]);
      if (e.type === "done") done.set(e.id, e);
      if (e.type === "error") errors.push(e.message);
    }
    if (done.size + errors.length >= PROMPTS.length) finished();
  });
  try {
    PROMPTS.forEach((p, i) => eng.submit({ id: i + 1, prompt: eng.tokenize(p, true, true), max_tokens: MAX_TOKENS, sampling: NATIVE_GREEDY }));
    await all;
    expect(errors).to.deep.equal([]);
    return { info, tokens: PROMPTS.map((_, i) => tokens.get(i + 1) ?? []), done: PROMPTS.map((_, i) => done.get(i + 1)!), stats: eng.stats() };
  } finally {
    eng.close();
  }
}

describe("speculative decoding with a draft model", function () {
  this.timeout(600000);

  it("greedy: the same token ids as plain decoding, with drafts counted (addon)", async () => {
    const plain = await runAddon({ spec: "off" });
    const drafted = await runAddon({ spec: "draft", draft_model_path: DRAFT, model_id: IDS.target, draft_model_id: IDS.draft });
    expect(plain.info.spec).to.equal("off");
    expect(drafted.info.spec).to.equal("draft");
    expect(drafted.info.draft?.architecture).to.be.a("string");
    expect(drafted.tokens).to.deep.equal(plain.tokens);
    for (let i = 0; i < PROMPTS.length; i++) {
      expect(plain.tokens[i].length, `prompt ${i} generated`).to.be.greaterThan(0);
      expect(drafted.done[i].finish).to.equal(plain.done[i].finish);
      expect(drafted.done[i].completion_tokens).to.equal(plain.done[i].completion_tokens);
      expect(plain.done[i].draft_n).to.equal(0);
    }
    const n = drafted.done.reduce((a, d) => a + d.draft_n, 0);
    const kept = drafted.done.reduce((a, d) => a + d.draft_n_accepted, 0);
    expect(n).to.be.greaterThan(0);
    expect(kept).to.be.at.most(n);
    expect(drafted.stats.spec_draft_tokens).to.equal(n);
    expect(drafted.stats.spec_accepted_tokens).to.equal(kept);
    if (REAL) expect(kept, "a 0.5B coder guesses some of a 1.5B coder's code").to.be.greaterThan(0);
  });

  describe("through the worker", () => {
    let off: ManagedEngine;
    let on: ManagedEngine;
    // The drafting engine has a host cache: the draft model's goes beside it.
    const tmp = mkdtempSync(join(tmpdir(), "mb-spec-draft-"));
    const cache_path = join(tmp, "cache");
    before(async () => {
      off = createEngine({ model_path: TARGET, model_id: IDS.target, n_ctx: 256, n_slots: 1, n_threads: 1, spec: "off" });
      on = createEngine({ model_path: TARGET, model_id: IDS.target, n_ctx: 256, n_slots: 1, n_threads: 1, spec: "draft", draft_model_path: DRAFT, draft_model_id: IDS.draft, cache_ram_mib: 16, cache_path });
      await Promise.all([off.ready(), on.ready()]);
    });
    after(async () => {
      await Promise.all([off?.close(), on?.close()]);
      rmSync(tmp, { recursive: true, force: true });
    });

    it("greedy text, usage and finish as without speculation; draft_n in the timings; the model says which mode runs", async () => {
      expect(on.model.spec).to.equal("draft");
      expect(on.model.draft_model).to.equal(IDS.draft);
      expect(off.model.spec).to.equal("off");
      const req = (i: number): GenerationRequest => ({ id: `draft-${i}`, input: { kind: "text", text: PROMPTS[1] }, sampling: GREEDY, max_tokens: MAX_TOKENS, stop: [] });
      const a = await collect(off.submit(req(1)));
      const b = await collect(on.submit(req(2)));
      expect(b.text).to.equal(a.text);
      expect(b.done.usage).to.deep.equal(a.done.usage);
      expect(b.done.finish_reason).to.equal(a.done.finish_reason);
      expect(a.done.timings.draft_n).to.equal(0);
      expect(b.done.timings.draft_n!).to.be.greaterThan(0);
      expect(b.done.timings.draft_n_accepted!).to.be.at.most(b.done.timings.draft_n!);
      expect(on.stats().spec_draft_tokens).to.equal(b.done.timings.draft_n);
      // The draft model's host cache has a file of its own and a share of --cache-ram.
      expect(existsSync(`${cache_path}.draft`)).to.equal(true);
      expect(on.stats().host_cache_cap_bytes!).to.be.greaterThan(0).and.lessThan(16 << 20);
    });
  });

  it("health and /v1/models say which speculation runs and the draft model's id (HTTP)", async () => {
    const model = defaultModelPath();
    const get = async (url: string) => (await (await fetch(url)).json()) as Record<string, any>;
    const drafted = await startTestServer({ model_path: model, slots: 1, ctx: 128, engine_options: { spec: "draft", draft_model_path: model, draft_model_id: "self-draft" } });
    const plain = await startTestServer({ model_path: model, slots: 1, ctx: 128 });
    try {
      const h = await get(`${drafted.url}/v1/health`);
      expect(h).to.include({ status: "ok", spec: "draft", draft_model: "self-draft" });
      expect((await get(`${drafted.url}/v1/models`)).data[0]).to.include({ spec: "draft", draft_model: "self-draft" });
      expect(await get(`${plain.url}/v1/health`)).to.include({ status: "ok", spec: "off", draft_model: null });
      expect((await get(`${plain.url}/v1/models`)).data[0]).to.include({ spec: "off", draft_model: null });
    } finally {
      await Promise.all([drafted.close(), plain.close()]);
    }
  });

  it("a draft model of another vocabulary is refused at load, naming both models", async function () {
    const target = existsSync(QWEN_05) ? QWEN_05 : "test/fixtures/qwen2-q8_0.gguf";
    const draft = existsSync(SMOL) ? SMOL : "test/fixtures/llama-q8_0.gguf";
    if (!existsSync(target) || !existsSync(draft)) this.skip();
    const eng = createEngine({ model_path: target, model_id: "qwen2.5-coder-0.5b", n_ctx: 256, n_slots: 1, n_threads: 1, spec: "draft", draft_model_path: draft, draft_model_id: "smollm2-135m" });
    let message = "";
    try {
      await eng.ready();
    } catch (e) {
      message = (e as Error).message;
    } finally {
      await eng.close();
    }
    expect(message).to.match(/--draft smollm2-135m cannot draft for qwen2\.5-coder-0\.5b: their vocabularies differ in size \(49152 tokens in smollm2-135m, \d+ in qwen2\.5-coder-0\.5b\)/);
  });

  it("mashbox run refuses such a pair before it serves: exit 2, both models named", function () {
    if (!existsSync(QWEN_05) || !existsSync(SMOL)) this.skip();
    const r = spawnSync(process.execPath, ["bin/mashbox.js", "run", QWEN_05, "--draft", SMOL, "--port", "0", "--ctx", "256", "--slots", "1", "--threads", "1"], { encoding: "utf8", timeout: 60000 });
    expect(r.status).to.equal(2);
    expect(r.stderr).to.match(/--draft SmolLM2-135M-Instruct\.Q4_1 cannot draft for qwen2\.5-coder-0\.5b-instruct-q4_k_m: their vocabularies differ in size \(49152 tokens in SmolLM2-135M-Instruct\.Q4_1, 151936 in qwen2\.5-coder-0\.5b-instruct-q4_k_m\)/);
    expect(r.stderr).to.not.match(/listening/);
  });
});
