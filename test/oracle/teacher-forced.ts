// Teacher-forced forward-pass parity with llama.cpp, shared by the logits oracles (logits.test.ts,
// qwen2.5-coder.test.ts): both engines read the same token sequence and are compared position by
// position on their next-token distributions, against llama.cpp's own spread between its two
// attention paths (the measures and why the bar is twice that spread: logits.test.ts's header).
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import type { LlamaModel, Token } from "node-llama-cpp";

export const TOOL = process.env.MB_LOGITS ?? path.join(process.cwd(), "native/build/model/mb_logits");
export const THREADS = 2;

const LOG_P_MIN = Math.log(1e-30);
// KL is measured from float32 probabilities (relative rounding 6e-8 each, and rows that sum to 1
// only within that): values down to -2e-7 were seen between runs that agree. Below 1e-6 a KL is
// noise, so the KL bar is never set under it (llama.cpp's f16 fixture spread measures 0).
const KL_RESOLUTION = 1e-6;

/** Next-token log-probabilities at the sampled positions: [positions][V], NaN where not known. */
export type Dists = Float32Array[];

export interface Agreement {
  max_top: number;   // max |Δ log p| over the plausible tokens
  mean_kl: number;   // mean KL(A || X)
  top1: number;      // positions whose argmax agrees
  n: number;         // positions compared
  flip_gaps: number[]; // per disagreement: A's log p of its top token minus of X's top token
}

function logSoftmax(row: Float32Array): Float32Array {
  let max = -Infinity;
  for (const v of row) max = Math.max(max, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  return row.map((v) => v - lse);
}

function argmax(row: Float32Array): number {
  let best = -1;
  for (let i = 0; i < row.length; i++) if (!Number.isNaN(row[i]!) && (best < 0 || row[i]! > row[best]!)) best = i;
  return best;
}

/** X against the reference A (llama.cpp, flash attention off). */
export function agreement(x: Dists, a: Dists): Agreement {
  let max_top = 0;
  let kl = 0;
  let top1 = 0;
  const flip_gaps: number[] = [];
  for (let p = 0; p < a.length; p++) {
    const xa = x[p]!;
    const ra = a[p]!;
    const top = argmax(ra);
    const plausible = Math.min(Math.log(1e-3), ra[top]! - Math.log(10));
    let k = 0;
    for (let i = 0; i < ra.length; i++) {
      const r = ra[i]!;
      if (Number.isNaN(r)) continue;
      const v = Number.isNaN(xa[i]!) ? LOG_P_MIN : Math.max(xa[i]!, LOG_P_MIN);
      k += Math.exp(r) * (r - v);
      if (r > plausible) max_top = Math.max(max_top, Math.abs(v - r));
    }
    kl += k;
    const mine = argmax(xa);
    if (mine === top) top1++;
    else flip_gaps.push(ra[top]! - (Number.isNaN(ra[mine]!) ? LOG_P_MIN : ra[mine]!));
  }
  // float32 probabilities that do not sum to exactly 1 can leave a tiny negative KL
  return { max_top, mean_kl: Math.max(0, kl / a.length), top1, n: a.length, flip_gaps };
}

export function fmt(g: Agreement): string {
  const gaps = g.flip_gaps.length ? ` (gaps ${g.flip_gaps.map((x) => x.toFixed(4)).join(", ")})` : "";
  return `max|Δ| ${g.max_top.toFixed(4)}, KL ${g.mean_kl.toExponential(2)}, top-1 ${g.top1}/${g.n}${gaps}`;
}

export async function llamaDists(model: LlamaModel, seq: number[], positions: number[], V: number, flashAttention: boolean, batchSize = 256): Promise<Dists> {
  const contextSize = Math.max(256, Math.ceil(seq.length / 256) * 256);
  const ctx = await model.createContext({ contextSize, batchSize, sequences: 1, threads: THREADS, flashAttention });
  try {
    const want = new Set(positions);
    const options = { temperature: 0, topK: 0, topP: 1, minP: 0 };
    const input = seq.map((t, i) =>
      want.has(i) ? ([t as Token, { generateNext: { probabilities: true, options } }] as const) : (t as Token));
    const res = await ctx.getSequence().controlledEvaluate(input as Parameters<ReturnType<typeof ctx.getSequence>["controlledEvaluate"]>[0]);
    return positions.map((i) => {
      const probs = res[i]?.next.probabilities;
      if (!probs) throw new Error(`llama.cpp gave no probabilities at position ${i}`);
      const lp = new Float32Array(V).fill(NaN);
      for (const [tok, p] of probs) if (p > 1e-30) lp[tok] = Math.log(p);
      return lp;
    });
  } finally {
    await ctx.dispose();
  }
}

/**
 * mashbox's distributions at `positions` (ascending): the whole sequence in one forward()
 * (decodeFrom undefined), or the sequence up to decodeFrom in one forward() and every token after
 * it one at a time (decodeFrom 0: all of it token by token; then positions >= decodeFrom).
 */
export function mbDists(model: string, seq: number[], positions: number[], V: number, dir: string, decodeFrom: number | undefined, kernels: string, extra: string[] = []): Dists {
  const out = path.join(dir, "logits.f32");
  // --greedy N --force IDS decodes N tokens one by one, feeding IDS (teacher forcing); row s is
  // the distribution after token decodeFrom + s of the sequence.
  const all = positions.length === seq.length;
  const args = decodeFrom !== undefined
    ? [model, "--tokens", seq.slice(0, decodeFrom + 1).join(","), "--greedy", String(seq.length - decodeFrom), "--force", [...seq.slice(decodeFrom + 1), 0].join(",")]
    : [model, "--tokens", seq.join(","), "--positions", all ? "all" : positions.join(",")];
  const env = { ...process.env };
  if (kernels) env.MB_KERNELS = kernels;
  else delete env.MB_KERNELS;
  const r = spawnSync(TOOL, [...args, ...extra, "--threads", String(THREADS), "--out", out], { encoding: "utf8", env, maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`mb_logits failed (${r.status}): ${r.stderr}`);
  const buf = readFileSync(out);
  const rows = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  if (decodeFrom !== undefined) {
    expect(rows.length).to.equal((seq.length - decodeFrom) * V);
    return positions.map((i) => logSoftmax(rows.slice((i - decodeFrom) * V, (i - decodeFrom + 1) * V)));
  }
  expect(rows.length).to.equal(positions.length * V);
  return positions.map((_, r) => logSoftmax(rows.slice(r * V, (r + 1) * V)));
}

export interface Bar {
  max_top: number;
  mean_kl: number;
  flips: number;
}

/** The wider of two spreads, metric by metric (each path pair bounds what llama.cpp itself varies by). */
export function widest(x: Agreement, y: Agreement): Agreement {
  return {
    max_top: Math.max(x.max_top, y.max_top),
    mean_kl: Math.max(x.mean_kl, y.mean_kl),
    top1: Math.min(x.top1, y.top1),
    n: x.n,
    flip_gaps: x.flip_gaps.length >= y.flip_gaps.length ? x.flip_gaps : y.flip_gaps,
  };
}

/** Twice llama.cpp's spread (4x on KL, never under its resolution). */
export function barOf(spread: Agreement): Bar {
  return {
    max_top: 2 * spread.max_top,
    mean_kl: Math.max(4 * spread.mean_kl, KL_RESOLUTION),
    flips: 2 * (spread.n - spread.top1),
  };
}

export function report(name: string, tokens: number, spread: Agreement, runs: Record<string, Agreement>, bar: Bar): string {
  return (
    `    ${name} (${tokens} tokens, ${spread.n} positions):\n` +
    `      llama.cpp own spread:      ${fmt(spread)}\n` +
    Object.entries(runs).map(([k, g]) => `      mashbox ${k.padEnd(18)} ${fmt(g)}\n`).join("") +
    `      bar (2x spread, KL 4x):    max|Δ| ${bar.max_top.toFixed(4)}, KL ${bar.mean_kl.toExponential(2)}, ` +
    `top-1 >= ${spread.n - bar.flips}/${spread.n}`
  );
}

/** Every run within the bar; a spread of exactly 0 would make the bar impossible and say nothing. */
export function expectWithinSpread(spread: Agreement, runs: Record<string, Agreement>, bar: Bar): void {
  expect(spread.max_top, "llama.cpp's two attention paths agree exactly: no spread to measure against").to.be.greaterThan(0);
  for (const [path_, g] of Object.entries(runs)) {
    expect(g.max_top, `${path_}: max |Δ log p| over plausible tokens`).to.be.at.most(bar.max_top);
    expect(g.mean_kl, `${path_}: mean KL(llama.cpp || mashbox)`).to.be.at.most(bar.mean_kl);
    const decisive = g.flip_gaps.filter((gap) => gap >= bar.max_top).length;
    expect(decisive, `${path_}: top-1 disagreements beyond a near-tie`).to.be.at.most(bar.flips);
  }
}
