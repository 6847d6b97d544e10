// Forward-pass parity with llama.cpp (node-llama-cpp's bundled CPU build is the oracle), teacher-
// forced: both engines read the same token sequence (a fixed chat exchange, tokenized by
// llama.cpp) and are compared position by position on their next-token distributions.
//
// The bar is llama.cpp's own spread on this machine: the same sequence through its two attention
// paths (flash attention off, the plain path mashbox mirrors, and on), which round differently.
// Three measures, each between a run X and llama.cpp's flash-off run A:
//   max|Δ|  max |log p_X - log p_A| over the tokens sampling could pick (A gives p > 1e-3; on the
//           random-weight fixtures no token reaches that, so: within 10x of A's top token);
//   KL      mean over positions of KL(A || X) (resolution 1e-6, see KL_RESOLUTION);
//   top-1   positions where X's most likely token is A's.
// Why twice the spread: if mashbox were just a third numeric path, no farther from llama.cpp's
// flash-on run B than A is, then by the triangle inequality d(mashbox, A) <= d(mashbox, B) +
// d(B, A) <= 2 d(B, A). max|Δ| is a distance; KL between close distributions is a squared one
// (KL ~ ½ Σ p δ²), so the bound applies to √KL, i.e. 4x on KL; top-1 disagreements obey the same
// inequality (a position where mashbox and A differ differs between mashbox and B or B and A),
// except at near-ties: where A's two candidates are closer than the max|Δ| bar, an error the bar
// allows can reorder them, so only disagreements with a wider gap in A are counted.
// Greedy trajectories are not compared: one near-tie flip sends two runs down different texts,
// and llama.cpp's two paths do that to each other too.
//
// mashbox runs through mb_logits twice: the whole sequence in one forward() (prefill kernels) and
// one token at a time (decode kernels), on every kernel set: the scalar reference, AVX2 and the
// CPU's best (AVX-512 where present), or only the one MB_KERNELS names. llama.cpp runs once per
// model for all of them (its runs are the slow part). node-llama-cpp exposes probabilities, not
// logits, so both sides are compared as log-softmax, on tokens llama.cpp gives p > 1e-30 (below
// that its float32 probabilities underflow).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { agreement, barOf, widest, expectWithinSpread, llamaDists, mbDists, report, TOOL, type Agreement, type Dists } from "./teacher-forced.js";

const ROOT = process.cwd();
const DEFAULT_MODEL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const FIXTURES = path.join(ROOT, "test/fixtures");
// Gemma 3 270M (`mashbox pull gemma3-270m`), checked when present: a sequence longer than its
// 512-token sliding window, so its local layers' rings wrap.
const GEMMA3_MODEL = process.env.MB_GEMMA3_MODEL ??
  path.join(process.env.MASHBOX_HOME ? path.join(process.env.MASHBOX_HOME, "models") : `${process.env.HOME}/.cache/mashbox/models`,
    "gemma-3-270m-q4_k_m.gguf");
const GEMMA3_REPEAT = 5;   // TEXT x 5: ~540 Gemma tokens
const GEMMA3_STRIDE = 32;  // ~17 positions: node-llama-cpp's 262k-entry maps are the cost
// Every position on the default model; every 4th on the fixtures (the cost is node-llama-cpp's
// V-entry probability map per position, and their distributions are all alike).
const FIXTURE_STRIDE = 4;
// Sequences up to this long also measure llama.cpp's token-by-token path for its spread.
const SHORT_SEQ = 512;
// MB_KERNELS values to check ("" = the CPU's best). On a CPU without AVX2, "avx2" falls back to ref.
const KERNEL_SETS = process.env.MB_KERNELS !== undefined ? [process.env.MB_KERNELS] : ["ref", "avx2", ""];

// A chat exchange in the default model's ChatML. Vocabularies without these control tokens read
// them as plain text, which serves as well.
const TEXT =
  "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" +
  "<|im_start|>user\nWhat is the capital of France? Answer in one sentence.<|im_end|>\n" +
  "<|im_start|>assistant\nThe capital of France is Paris, a city on the Seine known for the Eiffel Tower, " +
  "the Louvre and its cafes. It has been the country's political and cultural centre for centuries.<|im_end|>\n";

const models: string[] = [];
if (existsSync(DEFAULT_MODEL)) models.push(DEFAULT_MODEL);
if (existsSync(GEMMA3_MODEL)) models.push(GEMMA3_MODEL);
if (existsSync(FIXTURES))
  for (const f of readdirSync(FIXTURES).sort()) if (f.endsWith(".gguf")) models.push(path.join(FIXTURES, f));

describe("forward pass vs llama.cpp, teacher-forced (logits oracle)", function () {
  this.timeout(600_000);
  let llama: Llama;
  let dir: string;
  const sets = KERNEL_SETS.map((k) => k || "best").join(", ");

  before(async function () {
    if (!existsSync(TOOL)) throw new Error(`${TOOL} not built (npm run build:native)`);
    if (models.length === 0) throw new Error("no models: neither the default model nor fixtures exist");
    llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    dir = mkdtempSync(path.join(os.tmpdir(), "mb-logits-"));
  });
  after(async function () {
    if (dir) rmSync(dir, { recursive: true, force: true });
    await llama?.dispose();
  });

  for (const modelPath of models) {
    const name = path.basename(modelPath);
    // The scalar reference is checked on the fixtures; over the real Gemma 3's 540 tokens it would take minutes.
    const modelSets = KERNEL_SETS.filter((set) => !(modelPath === GEMMA3_MODEL && set === "ref"));
    const setNames = modelPath === GEMMA3_MODEL ? modelSets.map((k) => k || "best").join(", ") : sets;
    it(`${name}: within twice llama.cpp's own spread (flash on/off, and decode vs prefill on short sequences; kernels: ${setNames})`, async function () {
      const info = spawnSync(TOOL, [modelPath, "--info"], { encoding: "utf8" });
      if (info.status !== 0) throw new Error(`mb_logits --info failed: ${info.stderr}`);
      const V = (JSON.parse(info.stdout) as { n_vocab: number }).n_vocab;

      // the real Gemma 3 reads and writes 262k-entry rows for ~540 positions per run
      if (modelPath === GEMMA3_MODEL) this.timeout(1_800_000);
      const model = await llama.loadModel({ modelPath });
      let a: Dists, b: Dists, c: Dists | null = null, seq: number[], positions: number[];
      try {
        const gemma3 = modelPath === GEMMA3_MODEL;
        seq = [...model.tokenize(gemma3 ? TEXT.repeat(GEMMA3_REPEAT) : TEXT, true)].map(Number);
        const stride = modelPath === DEFAULT_MODEL ? 1 : gemma3 ? GEMMA3_STRIDE : FIXTURE_STRIDE;
        // Gemma 3: every 4th position past its 512-token window too, where only its global layers see everything
        positions = seq.map((_, i) => i).filter((i) => i % stride === stride - 1 || (gemma3 && i >= 512 && i % 4 === 3) || i === seq.length - 1);
        a = await llamaDists(model, seq, positions, V, false);
        b = await llamaDists(model, seq, positions, V, true);
        // llama.cpp's decode path too (one token per batch: its matrix-vector kernels and
        // single-query attention), on the short fixture sequences where that costs seconds. Which
        // of its two pairs of paths differs more depends on the CPU build it picks: on a Sapphire
        // Rapids build the f16 fixture's flash on/off spread is 0.0015, its decode-vs-prefill
        // spread 0.0047.
        if (seq.length <= SHORT_SEQ) c = await llamaDists(model, seq, positions, V, true, 1);
      } finally {
        await model.dispose();
      }
      const spread = c ? widest(agreement(b, a), agreement(c, a)) : agreement(b, a);
      const bar = barOf(spread);
      const runs: Record<string, Agreement> = {};
      for (const k of modelSets) {
        // Gemma 3 in chunks of 16: its local layers keep 512 + 16 positions, so the rings wrap within the sequence
        const extra = modelPath === GEMMA3_MODEL ? ["--batch", "16"] : [];
        runs[`${k || "best"} prefill`] = agreement(mbDists(modelPath, seq, positions, V, dir, undefined, k, extra), a);
        runs[`${k || "best"} decode`] = agreement(mbDists(modelPath, seq, positions, V, dir, 0, k, extra), a);
      }
      console.log(report(name, seq.length, spread, runs, bar));
      expectWithinSpread(spread, runs, bar);
    });
  }
});
