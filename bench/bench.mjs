#!/usr/bin/env node
// `npm run bench`: mashbox (the addon directly, no HTTP) vs node-llama-cpp (llama.cpp) on the
// same GGUF and thread count, in one run: prefill tok/s (512-token prompt), single-stream decode
// tok/s (128 tokens) and aggregate decode tok/s with 8 concurrent sequences. Also RSS after load
// against file size + KV bytes. Then long prompts (2800, 11100 and 22000 tokens by default: the
// sizes of coding agents' first requests; one sequence, context sized to the longest, 512-token
// batches on both sides), where attention, quadratic in the prompt, dominates: prefill tok/s, the
// CPU seconds each prefill took and the load average, and decode tok/s at that depth (LONG_DECODE
// tokens after the prompt), against the targets
// (prefill >= 2.5x llama.cpp at ~2.8k tokens, >= 3x at ~11k; decode at depth not below it).
//   MB_BENCH_MODEL=path  MB_BENCH_THREADS=n  MB_BENCH_SKIP_LLAMA=1  MB_BENCH_SKIP_MASHBOX=1  MB_BENCH_QUICK=1
//   MB_BENCH_LONG=2800,11100,22000 (lengths; empty or 0 skips)   --long-only (only the long prompts)
//   MB_BENCH_ARCHS=phi3,... (the per-architecture fixture lines; "" skips)   --archs-only (only those)
//   MB_BENCH_LLAMA_FA=auto|on|off  llama.cpp's flash attention for the long prefills (node-llama-cpp's
//                                  default, auto, turns it on for CPU contexts)
import { createRequire } from "node:module";
import { existsSync, statSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MODEL = process.env.MB_BENCH_MODEL ?? process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const THREADS = Number(process.env.MB_BENCH_THREADS ?? availableParallelism());
// MB_BENCH_QUICK=1: smaller sizes for a sanity check on a busy machine (not the reported numbers).
const QUICK = process.env.MB_BENCH_QUICK === "1";
const PREFILL_N = QUICK ? 128 : 512;
const DECODE_N = QUICK ? 32 : 128;
const STREAMS = 8;
const CTX = 1024; // per sequence, both engines (node-llama-cpp multiplies by sequences itself)
const LONG_ONLY = process.argv.includes("--long-only");
const ARCHS_ONLY = process.argv.includes("--archs-only"); // only the per-architecture lines
const LONG = (process.env.MB_BENCH_LONG ?? (QUICK ? "2048" : "2800,11100,22000"))
  .split(",")
  .map(Number)
  .filter((n) => n > 0);
const LONG_DECODE = QUICK ? 8 : 32; // tokens decoded after each long prompt
const LONG_CTX = Math.max(0, ...LONG) + LONG_DECODE + 64;
// prefill ratio targets against llama.cpp, by prompt length (issue: >= 2.5x at ~2.8k, >= 3x at ~11k)
const longTarget = (n) => (n >= 8000 ? 3 : n >= 2000 ? 2.5 : null);
const LLAMA_FA = { on: true, off: false }[process.env.MB_BENCH_LLAMA_FA ?? "auto"] ?? "auto";

const mib = (b) => (b / 1048576).toFixed(1);
// On a shared machine wall time depends on what else runs; the CPU seconds a prefill took (all of
// the process's threads) compare two mashbox builds whatever the load. Not the two engines: their
// thread pools' spin-waiting is counted too, and llama.cpp's spins far longer.
const cpuSeconds = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
const loadAvg = () => loadavg()[0].toFixed(2);
const rate = (n, ms) => (ms > 0 ? (n * 1000) / ms : 0);

// Prompts are plain text cut to an exact token count with each engine's own tokenizer.
const filler =
  "The quick brown fox jumps over the lazy dog while the river keeps running toward the sea, " +
  "and every town along its banks tells a different story about the summer of the long rains. ";
function promptText(i) {
  return `Story ${i}: ` + filler.repeat(60);
}
// ~40 tokens per filler; a distinct head per i, so no prefix is shared between runs
function longText(i, n) {
  return `Story ${i}: ` + filler.repeat(Math.ceil(n / 30) + 10);
}

async function benchMashbox(model = MODEL, { streams = true } = {}) {
  const addonPath = process.env.MASHBOX_NATIVE_ADDON ?? resolve(root, "native/build/binding/mashbox_native.node");
  if (!existsSync(addonPath)) throw new Error(`addon missing at ${addonPath}: run npm run build:native`);
  const addon = createRequire(import.meta.url)(addonPath);
  const rssBefore = process.memoryUsage().rss;
  const waiters = new Map();
  const results = new Map();
  const engine = new addon.Engine();
  const info = await engine.load({ model_path: model, n_ctx: CTX, n_slots: STREAMS, n_threads: THREADS, max_batch: 512 }, (evs) => {
    for (const e of evs) {
      const r = results.get(e.id);
      if (!r) continue;
      if (e.type === "token") {
        r.tokens++;
        r.t_last = performance.now();
        r.t_first ??= r.t_last;
      }
      if (e.type === "done" || e.type === "error") {
        r.done = e;
        waiters.get(e.id)?.(r);
      }
    }
  });
  const rssAfter = process.memoryUsage().rss;
  let nextId = 1;
  const run = (prompt, max_tokens) => {
    const id = nextId++;
    results.set(id, { tokens: 0, t_submit: performance.now(), t_first: null, t_last: null, done: null });
    const p = new Promise((res) => waiters.set(id, res));
    engine.submit({ id, prompt, max_tokens, sampling: { temperature: 0 } });
    return p;
  };
  const cut = (i, n) => Array.from(engine.tokenize(promptText(i), false, false)).slice(0, n);

  await run(cut(100, 64), 8); // warm-up: page in the weights
  const pf = await run(cut(1, PREFILL_N), 1);
  const prefill = rate(PREFILL_N, pf.done.prompt_ms);
  const dc = await run(cut(2, 16), DECODE_N);
  const decode = rate(dc.tokens - 1, dc.t_last - dc.t_first);
  if (!streams) {
    engine.close();
    return { prefill, decode };
  }
  const t0 = performance.now();
  const all = await Promise.all(Array.from({ length: STREAMS }, (_, i) => run(cut(10 + i, 16), DECODE_N)));
  const wall = performance.now() - t0;
  const total = all.reduce((a, r) => a + r.tokens, 0);
  const agg = rate(total, wall);
  engine.close();
  return { prefill, decode, agg, rssBefore, rssAfter, kv_bytes: info.kv_bytes, info };
}

// Long prefills: one slot with room for the longest prompt; each length a fresh prompt.
async function benchMashboxLong() {
  const addonPath = process.env.MASHBOX_NATIVE_ADDON ?? resolve(root, "native/build/binding/mashbox_native.node");
  if (!existsSync(addonPath)) throw new Error(`addon missing at ${addonPath}: run npm run build:native`);
  const addon = createRequire(import.meta.url)(addonPath);
  const waiters = new Map();
  const tokenTimes = new Map(); // id -> times of its tokens
  const firstCpu = new Map(); // id -> process CPU time when its first token arrived (prefill done)
  const engine = new addon.Engine();
  await engine.load({ model_path: MODEL, n_ctx: LONG_CTX, n_slots: 1, n_threads: THREADS, max_batch: 512 }, (evs) => {
    for (const e of evs) {
      if (e.type === "token" && !firstCpu.has(e.id)) firstCpu.set(e.id, cpuSeconds());
      if (e.type === "token") tokenTimes.get(e.id)?.push(performance.now());
      if (e.type === "done" || e.type === "error") waiters.get(e.id)?.(e);
    }
  });
  let nextId = 1;
  const run = (prompt, max_tokens = 1) => {
    const id = nextId++;
    const times = [];
    tokenTimes.set(id, times);
    const p = new Promise((res) => waiters.set(id, (done) => res({ done, times })));
    engine.submit({ id, prompt, max_tokens, sampling: { temperature: 0 } });
    return p;
  };
  await run(Array.from(engine.tokenize(promptText(100), false, false)).slice(0, 64)); // page in the weights
  const out = [];
  for (const [k, n] of LONG.entries()) {
    const prompt = Array.from(engine.tokenize(longText(200 + k, n), false, false)).slice(0, n);
    const cpu0 = cpuSeconds();
    const id = nextId;
    const { done, times } = await run(prompt, LONG_DECODE + 1);
    if (done.type === "error") throw new Error(`mashbox long prefill ${n}: ${done.message}`);
    const decode = times.length > 1 ? rate(times.length - 1, times[times.length - 1] - times[0]) : 0;
    const cpu = (firstCpu.get(id) ?? cpuSeconds()) - cpu0;
    out.push({ n, s: done.prompt_ms / 1000, rate: rate(n, done.prompt_ms), decode, cpu });
    console.log(`  mashbox   prefill ${n}: ${(done.prompt_ms / 1000).toFixed(1)} s, ${rate(n, done.prompt_ms).toFixed(1)} tok/s, ${cpu.toFixed(1)} CPU s; decode there ${decode.toFixed(1)} tok/s (load ${loadAvg()})`);
  }
  engine.close();
  return out;
}

async function benchLlamaLong() {
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never" });
  const model = await llama.loadModel({ modelPath: MODEL });
  const ctx = await model.createContext({ contextSize: LONG_CTX, sequences: 1, threads: THREADS, batchSize: 512, flashAttention: LLAMA_FA });
  const seq = ctx.getSequence();
  await seq.evaluateWithoutGeneratingNewTokens(model.tokenize(promptText(100)).slice(0, 64));
  const out = [];
  for (const [k, n] of LONG.entries()) {
    await seq.clearHistory();
    const toks = model.tokenize(longText(200 + k, n)).slice(0, n);
    const t = performance.now();
    const cpu0 = cpuSeconds();
    await seq.evaluateWithoutGeneratingNewTokens(toks);
    const ms = performance.now() - t;
    const cpu = cpuSeconds() - cpu0;
    // decode at that depth: feed the prompt's last token again and generate after it
    let got = 0;
    let tFirst = 0;
    for await (const _tok of seq.evaluate(toks.slice(-1), { temperature: 0 })) {
      if (++got === 1) tFirst = performance.now();
      if (got > LONG_DECODE) break;
    }
    const decode = got > 1 ? rate(got - 1, performance.now() - tFirst) : 0;
    out.push({ n, s: ms / 1000, rate: rate(n, ms), decode, cpu });
    console.log(`  llama.cpp prefill ${n}: ${(ms / 1000).toFixed(1)} s, ${rate(n, ms).toFixed(1)} tok/s, ${cpu.toFixed(1)} CPU s; decode there ${decode.toFixed(1)} tok/s (flash attention ${LLAMA_FA}, load ${loadAvg()})`);
  }
  await ctx.dispose();
  await model.dispose();
  await llama.dispose();
  return out;
}

async function benchLlama(modelPath = MODEL, { streams = true } = {}) {
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never" });
  const model = await llama.loadModel({ modelPath });
  const cut = (i, n) => model.tokenize(promptText(i)).slice(0, n);

  const single = await model.createContext({ contextSize: CTX, sequences: 1, threads: THREADS, batchSize: 512 });
  let seq = single.getSequence();
  await seq.evaluateWithoutGeneratingNewTokens(cut(100, 64));
  await seq.clearHistory();
  let t = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(cut(1, PREFILL_N));
  const prefill = rate(PREFILL_N, performance.now() - t);
  await seq.clearHistory();
  const decodeOne = async (s, prompt) => {
    let n = 0;
    let tFirst = 0;
    for await (const _tok of s.evaluate(prompt, { temperature: 0 })) {
      n++;
      if (n === 1) tFirst = performance.now();
      if (n >= DECODE_N) break;
    }
    return { n, tFirst, tEnd: performance.now() };
  };
  const d = await decodeOne(seq, cut(2, 16));
  const decode = rate(d.n - 1, d.tEnd - d.tFirst);
  await single.dispose();
  if (!streams) {
    await model.dispose();
    await llama.dispose();
    return { prefill, decode };
  }

  const multi = await model.createContext({ contextSize: CTX, sequences: STREAMS, threads: THREADS, batchSize: 512 });
  const seqs = Array.from({ length: STREAMS }, () => multi.getSequence());
  t = performance.now();
  const outs = await Promise.all(seqs.map((s, i) => decodeOne(s, cut(10 + i, 16))));
  const wall = performance.now() - t;
  const agg = rate(outs.reduce((a, o) => a + o.n, 0), wall);
  await multi.dispose();
  await model.dispose();
  await llama.dispose();
  return { prefill, decode, agg };
}

const fileBytes = statSync(MODEL).size;
const skipMashbox = process.env.MB_BENCH_SKIP_MASHBOX === "1";
const skipLlama = process.env.MB_BENCH_SKIP_LLAMA === "1";
if (!LONG_ONLY && !ARCHS_ONLY) {
  console.log(`model ${MODEL} (${mib(fileBytes)} MiB), threads ${THREADS}, ctx ${CTX}/seq, ${STREAMS} streams, prefill ${PREFILL_N}, decode ${DECODE_N}${QUICK ? " (QUICK)" : ""}`);
  const mb = skipMashbox ? null : await benchMashbox();
  if (mb) console.log(
    `mashbox      prefill ${mb.prefill.toFixed(1)} tok/s | decode ${mb.decode.toFixed(1)} tok/s | ${STREAMS}-stream ${mb.agg.toFixed(1)} tok/s`,
  );
  if (mb) console.log(
    `mashbox RSS  before load ${mib(mb.rssBefore)} MiB, after load ${mib(mb.rssAfter)} MiB (+${mib(mb.rssAfter - mb.rssBefore)}); ` +
      `file ${mib(fileBytes)} MiB + KV ${mib(mb.kv_bytes)} MiB = ${mib(fileBytes + mb.kv_bytes)} MiB`,
  );
  if (!skipLlama) {
    const ll = await benchLlama();
    console.log(
      `llama.cpp    prefill ${ll.prefill.toFixed(1)} tok/s | decode ${ll.decode.toFixed(1)} tok/s | ${STREAMS}-stream ${ll.agg.toFixed(1)} tok/s`,
    );
    if (mb) console.log(
      `ratio        prefill ${(mb.prefill / ll.prefill).toFixed(2)}x | decode ${(mb.decode / ll.decode).toFixed(2)}x | ${STREAMS}-stream ${(mb.agg / ll.agg).toFixed(2)}x` +
        ` (targets >= 1.0x, >= 1.0x, >= 2x llama-server's ~39 tok/s: ${(mb.agg / 39).toFixed(2)}x)`,
    );
  }
}
// One line per architecture besides the default model's: prefill and decode against llama.cpp
// on that architecture's random-weight fixture (`npm run fixtures`). MB_BENCH_ARCHS=phi3,... picks
// some ("" none).
const ARCH_FIXTURES = {
  phi3: "test/fixtures/phi3-q8_0.gguf",
  "gpt-oss": "test/fixtures/gpt-oss-mxfp4.gguf",
  // the real Gemma 3 270M when pulled (its 262k-token head and K-quants are the cost), else the fixture.
  // node-llama-cpp's sampling loop costs ~1-2 s a token over a 262k vocabulary (its own overhead:
  // llama.cpp's forward pass alone decodes ~7 tok/s on the 270M model here), so the decode ratio of
  // this line measures that loop, not llama.cpp; the prefill ratio on the real model is the fair one.
  gemma3: ((p) => (existsSync(p) ? p : "test/fixtures/gemma3-q8_0.gguf"))(
    process.env.MB_GEMMA3_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/gemma-3-270m-q4_k_m.gguf`),
};
const ARCHS = (process.env.MB_BENCH_ARCHS ?? Object.keys(ARCH_FIXTURES).join(",")).split(",").filter((a) => a in ARCH_FIXTURES);
if (!LONG_ONLY && ARCHS.length > 0) {
  console.log(`architectures (fixtures, prefill ${PREFILL_N}, decode ${DECODE_N}, threads ${THREADS}):`);
  for (const arch of ARCHS) {
    const file = resolve(root, ARCH_FIXTURES[arch]);
    if (!existsSync(file)) {
      console.log(`  ${arch.padEnd(9)} ${ARCH_FIXTURES[arch]} missing (npm run fixtures)`);
      continue;
    }
    const a = skipMashbox ? null : await benchMashbox(file, { streams: false });
    const b = skipLlama ? null : await benchLlama(file, { streams: false });
    const side = (m, k) => (m ? m[k].toFixed(1) : "-");
    const ratio = (k) => (a && b ? ` (${(a[k] / b[k]).toFixed(2)}x)` : "");
    console.log(
      `  ${arch.padEnd(9)} prefill mashbox ${side(a, "prefill")} | llama.cpp ${side(b, "prefill")} tok/s${ratio("prefill")}` +
        `  || decode mashbox ${side(a, "decode")} | llama.cpp ${side(b, "decode")} tok/s${ratio("decode")}`,
    );
  }
}
if (LONG.length > 0 && !ARCHS_ONLY) {
  console.log(`long prompts: ${LONG.join(", ")} tokens, one sequence, ctx ${LONG_CTX}, batch 512, threads ${THREADS}, then ${LONG_DECODE} decoded tokens`);
  const mbl = skipMashbox ? null : await benchMashboxLong();
  const lll = skipLlama ? null : await benchLlamaLong();
  for (const [k, n] of LONG.entries()) {
    const a = mbl?.[k];
    const b = lll?.[k];
    const target = longTarget(n);
    console.log(
      `long ${String(n).padStart(6)}  prefill mashbox ${a ? `${a.rate.toFixed(1)} tok/s (${a.s.toFixed(1)} s)` : "-"}` +
        ` | llama.cpp ${b ? `${b.rate.toFixed(1)} tok/s (${b.s.toFixed(1)} s)` : "-"}` +
        (a && b ? ` | ratio ${(a.rate / b.rate).toFixed(2)}x${target ? ` (target >= ${target}x)` : ""}` : "") +
        `  || decode at depth mashbox ${a ? a.decode.toFixed(1) : "-"} | llama.cpp ${b ? b.decode.toFixed(1) : "-"} tok/s` +
        (a && b && b.decode > 0 ? ` | ratio ${(a.decode / b.decode).toFixed(2)}x` : ""),
    );
  }
}
