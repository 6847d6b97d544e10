// N-gram drafts from the host prompt cache (--spec ngram with --cache-ram) on a real engine: a
// request asked again (a retried or regenerated turn) finds the earlier answer nowhere in its own
// prompt, but the host cache holds it (saved when the new request took the only slot), and the
// new request drafts it from there; the output is token for token that of plain decoding.
import { expect } from "chai";
import { existsSync } from "node:fs";
import { createEngine, type ManagedEngine } from "../../src/engine/engine.js";
import type { GenerationRequest, SamplingParams } from "../../src/engine/types.js";
import { collect } from "../helpers/events.js";

const REAL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const MODEL = existsSync(REAL) ? REAL : "test/fixtures/llama-q8_0.gguf";

const GREEDY: SamplingParams = { temperature: 0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 };
let seq = 0;
function textReq(text: string, max_tokens = 64): GenerationRequest {
  const chat = { system: [], turns: [{ role: "user" as const, content: text }], tools: [], tool_choice: { type: "auto" as const } };
  return { id: `spec-cache-${++seq}`, input: { kind: "chat", chat }, sampling: GREEDY, max_tokens, stop: [] };
}

// Prose: little of the answer repeats the prompt or itself, so its own history drafts little.
const PROMPTS = [
  "Write a short story about a lighthouse keeper who finds a message in a bottle.",
  "Explain to a new colleague how the office coffee machine works, step by step.",
];

describe("speculative decoding: drafts from the host prompt cache", function () {
  this.timeout(300000);
  let off: ManagedEngine;
  let on: ManagedEngine;
  let nocache: ManagedEngine;

  before(async () => {
    const base = { model_path: MODEL, model_id: "test", n_ctx: 1024, n_slots: 1, n_threads: 1 };
    off = createEngine({ ...base, spec: "off", cache_ram_mib: 64 });
    on = createEngine({ ...base, spec: "ngram", cache_ram_mib: 64 });
    nocache = createEngine({ ...base, spec: "ngram", cache_ram_mib: 0 });
    await Promise.all([off.ready(), on.ready(), nocache.ready()]);
  });
  after(async () => Promise.all([off?.close(), on?.close(), nocache?.close()]));

  it("a turn asked again drafts the earlier answer from the host cache, output unchanged", async () => {
    for (const p of PROMPTS) {
      const ref = await collect(off.submit(textReq(p)));
      const first = await collect(on.submit(textReq(p)));
      // The same prompt again: the slot held prompt + answer, the part past the prompt went to
      // the host cache before the slot was cut back to the prompt.
      const again = await collect(on.submit(textReq(p)));
      const plain = await collect(nocache.submit(textReq(p)));
      const again2 = await collect(nocache.submit(textReq(p)));
      for (const r of [first, again, plain, again2]) {
        expect(r.text, p).to.equal(ref.text);
        expect(r.done.usage.completion_tokens).to.equal(ref.done.usage.completion_tokens);
      }
      const n = ref.done.usage.completion_tokens;
      const t = (r: typeof first) => r.done.timings;
      console.log(`      ${n} tokens: first ${t(first).draft_n_accepted}/${t(first).draft_n} accepted/drafted, again ` +
        `${t(again).draft_n_accepted}/${t(again).draft_n}; no cache again ${t(again2).draft_n_accepted}/${t(again2).draft_n}`);
      // Without the host cache, asking again drafts only what its own history holds, as the first
      // time did; with it, most of the answer (all but the first m tokens) is drafted and kept.
      expect(t(again).draft_n_accepted!, p).to.be.greaterThan(t(first).draft_n_accepted! + n / 4);
      expect(t(again).draft_n_accepted!, p).to.be.greaterThan(t(again2).draft_n_accepted! + n / 4);
      expect(t(again).draft_n_accepted!).to.be.at.most(t(again).draft_n!);
    }
  });
});
