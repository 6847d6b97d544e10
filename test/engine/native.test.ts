// The addon on its own (no worker): load, tokenizer round trip, grammar-forced emission, batched
// event delivery through the one shared callback, cancel, stats, close.
import { expect } from "chai";
import { existsSync } from "node:fs";
import { loadAddon, type NativeEngine, type NativeEvent } from "../../src/engine/native.js";
import { literalGrammar } from "../helpers/script.js";

const FIXTURE = "test/fixtures/llama-q8_0.gguf";
const MODEL = existsSync(FIXTURE) ? FIXTURE : (process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`);

describe("native addon", function () {
  this.timeout(60000);
  let eng: NativeEngine;
  const calls: NativeEvent[][] = [];
  const waiters = new Map<number, (evs: NativeEvent[]) => void>();
  const byId = new Map<number, NativeEvent[]>();

  before(async () => {
    eng = new (loadAddon().Engine)();
    const info = await eng.load({ model_path: MODEL, n_ctx: 2048, n_slots: 3, n_threads: 1 }, (evs) => {
      calls.push(evs);
      for (const e of evs) {
        const list = byId.get(e.id) ?? [];
        list.push(e);
        byId.set(e.id, list);
        if (e.type === "done" || e.type === "error") waiters.get(e.id)?.(list);
      }
    });
    expect(info.n_ctx).to.equal(2048);
    expect(info.slots).to.equal(3);
    expect(info.kv_bytes).to.be.greaterThan(0);
  });
  after(() => eng?.close());

  const run = (id: number, req: Partial<Parameters<NativeEngine["submit"]>[0]>) =>
    new Promise<NativeEvent[]>((res) => {
      waiters.set(id, res);
      eng.submit({ id, prompt: eng.tokenize("Hello", false, false), max_tokens: 8, sampling: { temperature: 0, top_k: 0, top_p: 1, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 }, ...req });
    });

  it("tokenizes and detokenizes", () => {
    const text = "Hello world, ünïcödé 日本語!";
    const ids = eng.tokenize(text, false, false);
    expect(ids.length).to.be.greaterThan(3);
    expect(eng.detokenize(ids)).to.equal(text);
    const special = eng.tokenize("<|im_start|>user", false, true);
    expect(special[0]).to.equal(1); // <|im_start|> is control token 1 in the SmolLM vocab
    expect(eng.tokenize("<|im_start|>user", false, false).length).to.be.greaterThan(special.length);
  });

  it("emits the text a one-literal grammar forces, in UTF-8-safe pieces", async () => {
    const text = "naïve 日本語 ok";
    const evs = await run(1, { grammar: literalGrammar(text), max_tokens: 100 });
    const toks = evs.filter((e) => e.type === "token") as Extract<NativeEvent, { type: "token" }>[];
    const done = evs.at(-1) as Extract<NativeEvent, { type: "done" }>;
    expect(toks.map((t) => t.text).join("") + done.text).to.equal(text);
    for (const t of toks) expect(t.text).to.not.include("\uFFFD");
    expect(done.finish).to.equal("stop");
    expect(evs[0].type).to.equal("start");
    expect(toks[0].first).to.equal(true);
    expect(toks[0].prompt_ms).to.be.a("number").that.is.at.least(0);
    expect(toks.slice(1).some((t) => t.first)).to.equal(false);
  });

  it("delivers events of concurrent requests together and cancels", async () => {
    calls.length = 0;
    const ps = [run(10, {}), run(11, {}), run(12, {})];
    const long = run(13, { max_tokens: -1 });
    await Promise.all(ps);
    expect(calls.some((c) => new Set(c.map((e) => e.id)).size > 1)).to.equal(true);
    // 13 waited for a slot; it runs once a step after the others finished admits it
    const t0 = Date.now();
    while (!(byId.get(13) ?? []).some((e) => e.type === "token") && Date.now() - t0 < 10000) await new Promise((r) => setTimeout(r, 5));
    expect(eng.stats().slots_in_use).to.equal(1);
    eng.cancel(13);
    const evs = await long;
    expect((evs.at(-1) as { finish: string }).finish).to.equal("cancelled");
    const st = eng.stats();
    expect(st.slots_in_use).to.equal(0);
    expect(st.prefix_lookups).to.be.at.least(5);
    expect(st.kv_tokens_total).to.equal(3 * 2048);
  });

  it("constrains decoding to a grammar; a malformed one is refused at submit (compiled there), not a crash", async () => {
    const grammar = String.raw`root ::= "{\"ok\": " ( "true" | "false" ) ", \"n\": " [1-9] [0-9]{0,2} "}"`;
    const shape = /^\{"ok": (true|false), "n": [1-9][0-9]{0,2}\}$/;
    for (const [i, temperature] of [0, 1, 1.5].entries()) {
      const evs = await run(30 + i, { grammar, max_tokens: 64, sampling: { temperature, top_k: 0, top_p: 1, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0, seed: i } });
      const done = evs.at(-1) as Extract<NativeEvent, { type: "done" }>;
      const text = evs.map((e) => (e.type === "token" || e.type === "done" ? e.text : "")).join("");
      expect(text).to.match(shape);
      // Complete with nothing left to add: it stops there, without sampling an EOG token.
      expect(done.finish).to.equal("stop");
      expect(done.completion_tokens).to.equal(evs.filter((e) => e.type === "token").length);
    }
    const sampling = { temperature: 0, top_k: 0, top_p: 1, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 };
    const submit = (grammar: string) => () => eng.submit({ id: 40, prompt: eng.tokenize("Hello", false, false), max_tokens: 8, sampling, grammar });
    expect(submit('root ::= "unterminated')).to.throw(/^invalid grammar: grammar: line 1 col 10: unterminated string literal/);
    expect(submit("root ::= missing")).to.throw(/undefined rule 'missing'/);
    expect(submit("root ::= root \"x\"")).to.throw(/left-recursive/);
    // The engine goes on serving, constrained or not.
    const after = await run(42, {});
    expect((after.at(-1) as { finish: string }).finish).to.equal("length");
    const empty = await run(43, { grammar: "" });
    expect((empty.at(-1) as { finish: string }).finish).to.equal("length");
  });

  it("rejects bad token ids", () => {
    expect(() => eng.submit({ id: 99, prompt: [1e9], max_tokens: 1, sampling: { temperature: 0, top_k: 0, top_p: 1, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 } })).to.throw(RangeError);
  });
});
