// Speculative decoding by n-gram lookup (--spec ngram) end to end on a real model in a worker:
// the output is exactly that of plain decoding (greedy token for token; seeded sampling the same
// text per seed, so the distribution is unchanged too), alone and with other streams in the
// same steps, under max_tokens, stop strings and a grammar; drafts are counted in the timings
// and the engine's stats (the Prometheus counters read those).
import { expect } from "chai";
import { existsSync } from "node:fs";
import { createEngine, type ManagedEngine } from "../../src/engine/engine.js";
import type { GenerationRequest, SamplingParams } from "../../src/engine/types.js";
import { literalGrammar } from "../helpers/script.js";
import { collect } from "../helpers/events.js";

const REAL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const MODEL = existsSync(REAL) ? REAL : "test/fixtures/llama-q8_0.gguf";

const GREEDY: SamplingParams = { temperature: 0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 };
let seq = 0;
function textReq(text: string, over: Partial<GenerationRequest> = {}): GenerationRequest {
  return { id: `spec-${++seq}`, input: { kind: "text", text }, sampling: GREEDY, max_tokens: 48, stop: [], ...over };
}

// Prompts whose continuation repeats what they hold: code, a list, a refrain.
const REPEATS = [
  "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n",
  "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,",
  "Row, row, row your boat. Row, row, row your boat. Row, row, row your boat. Row,",
  "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the",
];

describe("speculative decoding (n-gram lookup)", function () {
  this.timeout(300000);
  let off: ManagedEngine;
  let on: ManagedEngine;

  before(async () => {
    off = createEngine({ model_path: MODEL, model_id: "test", n_ctx: 512, n_slots: 4, n_threads: 1, spec: "off" });
    on = createEngine({ model_path: MODEL, model_id: "test", n_ctx: 512, n_slots: 4, n_threads: 1, spec: "ngram" });
    await Promise.all([off.ready(), on.ready()]);
  });
  after(async () => Promise.all([off?.close(), on?.close()]));

  it("greedy: token for token the output of plain decoding, and the drafts are counted", async () => {
    const before = on.stats();
    let drafted = 0;
    let accepted = 0;
    for (const p of REPEATS) {
      const a = await collect(off.submit(textReq(p)));
      const b = await collect(on.submit(textReq(p)));
      expect(b.text, p).to.equal(a.text);
      expect(b.done.usage).to.deep.equal(a.done.usage);
      expect(b.done.finish_reason).to.equal(a.done.finish_reason);
      expect(a.done.timings.draft_n).to.equal(0);
      expect(b.done.timings.draft_n_accepted!).to.be.at.most(b.done.timings.draft_n!);
      drafted += b.done.timings.draft_n!;
      accepted += b.done.timings.draft_n_accepted!;
    }
    expect(drafted).to.be.greaterThan(0);
    expect(accepted).to.be.greaterThan(0);
    const after = on.stats();
    expect(after.spec_draft_tokens! - before.spec_draft_tokens!).to.equal(drafted);
    expect(after.spec_accepted_tokens! - before.spec_accepted_tokens!).to.equal(accepted);
    expect(off.stats().spec_draft_tokens).to.equal(0);
  });

  it("verification rows share steps with other streams: concurrent output equals plain decoding alone", async () => {
    const alone: string[] = [];
    for (const p of REPEATS) alone.push((await collect(off.submit(textReq(p, { max_tokens: 40 })))).text);
    // Five requests on four slots: drafts beside prefill, other decodes and a slot handover.
    const prompts = [...REPEATS, REPEATS[0]];
    const together = await Promise.all(prompts.map((p) => collect(on.submit(textReq(p, { max_tokens: 40 })))));
    expect(together.map((r) => r.text)).to.deep.equal([...alone, alone[0]]);
  });

  it("seeded sampling: the same text per seed as plain sampling (the acceptance rule keeps the distribution)", async () => {
    const sampling = (seed: number): SamplingParams => ({ ...GREEDY, temperature: 0.8, top_k: 40, seed });
    let drafted = 0;
    for (let seed = 1; seed <= 12; seed++) {
      const p = REPEATS[seed % REPEATS.length];
      const a = await collect(off.submit(textReq(p, { sampling: sampling(seed), max_tokens: 32 })));
      const b = await collect(on.submit(textReq(p, { sampling: sampling(seed), max_tokens: 32 })));
      expect(b.text, `seed ${seed}`).to.equal(a.text);
      drafted += b.done.timings.draft_n!;
    }
    expect(drafted).to.be.greaterThan(0);
  });

  it("max_tokens, stop strings and a grammar behave as without speculation", async () => {
    for (const max_tokens of [1, 2, 7]) {
      const a = await collect(off.submit(textReq(REPEATS[1], { max_tokens })));
      const b = await collect(on.submit(textReq(REPEATS[1], { max_tokens })));
      expect(b.text).to.equal(a.text);
      expect(b.done.usage.completion_tokens).to.equal(max_tokens);
    }
    const a = await collect(off.submit(textReq(REPEATS[1], { stop: [" 27,"], max_tokens: 64 })));
    const b = await collect(on.submit(textReq(REPEATS[1], { stop: [" 27,"], max_tokens: 64 })));
    expect(b.text).to.equal(a.text);
    expect(b.done.finish_reason).to.equal(a.done.finish_reason);
    expect(b.done.usage).to.deep.equal(a.done.usage);
    // Under a grammar every row is sampled under it, so a draft it forbids is simply not kept.
    const script = "abc abc abc abc abc abc abc abc abc abc";
    const g = await collect(on.submit(textReq("abc abc abc", { grammar: literalGrammar(script), max_tokens: 100 })));
    expect(g.text).to.equal(script);
    expect(g.done.finish_reason).to.equal("stop");
  });
});
