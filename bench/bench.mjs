#!/usr/bin/env node
// `npm run bench`: mashbox against llama.cpp's own llama-bench and llama-server (built from the
// llama.cpp source node-llama-cpp ships, the oracle's commit: `npm run build:peer`), on the same
// GGUF with the same threads, in one run, alternating round by round (mashbox, llama.cpp,
// mashbox, ...). Per model it prints:
//   - prefill tok/s at each --prefill size (mashbox: the addon's prompt_ms; llama.cpp: llama-bench pp)
//     and its GOPS (2 x matmul params x tokens + attention 2 x layers x heads x head_dim x tokens^2,
//     over the prefill time) as a fraction of the CPU's int8 dot-product peak;
//   - single-stream decode tok/s: the addon, mashbox over HTTP and llama-server over HTTP on a prompt
//     every model continues at length (a counting list, plain completion), llama-bench tg; and
//     decode at the depth of the largest prefill (the addon after that prompt; llama-server after
//     the same token ids). Every run's token count is printed, and one short of the request is
//     marked and left out of the ratios;
//   - aggregate tok/s of --streams concurrent HTTP streams: mashbox --slots N vs llama-server -np N
//     with the same context per slot;
//   mashbox's servers run with --spec off, as llama-server runs without speculation: this compares
//   the engines' decode (bench/spec.mjs compares speculation, llama-server's modes included);
//   - the memory read bandwidth measured in each round (bench/membw.c, --threads threads), and
//     each decode's bytes per token (weights read per token + K/V at its depth) x tok/s as a
//     fraction of it;
//   - each ratio beside its target.
// node-llama-cpp is the correctness oracle only; it only reads the GGUF's tensor table here.
//
//   --models a,b      registry ids or .gguf paths (default smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b)
//   --rounds N        rounds per model (default 2)           --threads N  (default: all cores)
//   --prefill a,b,c   prompt sizes (default 512,2600,10000)  --decode N   single-stream tokens (default 128)
//   --depth-decode N  tokens decoded after the largest prompt (default 32; 0 skips)
//   --streams N       concurrent HTTP streams (default 8)    --stream-tokens N (default 128)
//   --archs a,b       also a line per architecture fixture (phi3, gpt-oss, gemma3: npm run fixtures),
//                     prefill 512 and decode 128 against llama-bench;  --archs-only  only those
//   --skip-llama  --skip-mashbox  --quick (one model, small sizes: a sanity check on a busy machine)
// Environment: MB_BENCH_MODELS, MB_BENCH_THREADS, MASHBOX_NATIVE_ADDON, MB_BENCH_CLOCK_MHZ,
// MB_BENCH_DOT_PER_CYCLE (int8 dot-product instructions per cycle per core; see cpuPeak).
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism, homedir, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { peerBin } from "../scripts/build-llama-peer.mjs";
import { freePort, serverStarter } from "./servers.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { values: opt } = parseArgs({
  options: {
    quick: { type: "boolean", default: process.env.MB_BENCH_QUICK === "1" },
    models: { type: "string" },
    rounds: { type: "string" },
    threads: { type: "string" },
    prefill: { type: "string" },
    decode: { type: "string" },
    "depth-decode": { type: "string" },
    streams: { type: "string" },
    "stream-tokens": { type: "string" },
    archs: { type: "string" },
    "archs-only": { type: "boolean", default: false },
    "skip-llama": { type: "boolean", default: process.env.MB_BENCH_SKIP_LLAMA === "1" },
    "skip-mashbox": { type: "boolean", default: process.env.MB_BENCH_SKIP_MASHBOX === "1" },
  },
});
const Q = opt.quick;
const ints = (s) => s.split(",").map(Number).filter((n) => n > 0);
const MODELS = (opt.models ?? process.env.MB_BENCH_MODELS ?? (Q ? "smollm2-135m" : "smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")).split(",").filter(Boolean);
const ROUNDS = Number(opt.rounds ?? (Q ? 1 : 2));
const THREADS = Number(opt.threads ?? process.env.MB_BENCH_THREADS ?? availableParallelism());
const PREFILL = ints(opt.prefill ?? (Q ? "256,1024" : "512,2600,10000"));
const DECODE = Number(opt.decode ?? (Q ? 32 : 128));
const DEPTH_DECODE = Number(opt["depth-decode"] ?? (Q ? 8 : 32));
const STREAMS = Number(opt.streams ?? 8);
const STREAM_TOKENS = Number(opt["stream-tokens"] ?? (Q ? 16 : 128));
const STREAM_CTX = 1024; // per slot, both servers
const ARCHS = (opt.archs ?? "").split(",").filter(Boolean);
const MEMBW_MIB = Q ? 256 : 1024;
// Decode at depth follows the largest prompt, or the model's training context when that is shorter
// (llama-server caps a slot's context there).
const depthFor = (facts) => Math.min(Math.max(...PREFILL), Math.floor((facts.ctxTrain - DEPTH_DECODE - 64) / 100) * 100);
const SKIP_LLAMA = opt["skip-llama"];
const SKIP_MASHBOX = opt["skip-mashbox"];
const mashboxHome = process.env.MASHBOX_HOME ?? join(homedir(), ".cache", "mashbox");
const logDir = join(tmpdir(), `mashbox-bench-${process.pid}`);
mkdirSync(logDir, { recursive: true });

const median = (xs) => {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};
const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "-");
const f2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : "-");
const pct = (x) => (Number.isFinite(x) ? `${(100 * x).toFixed(0)}%` : "-");
const mib = (b) => (b / 1048576).toFixed(1);
const load = () => loadavg()[0].toFixed(1);
const live = new Set(); // servers and llama-bench runs this process started, ended if it is stopped

// ---------------------------------------------------------------------------------------------
// Models and what a token costs
function resolveModel(idOrPath) {
  if (idOrPath.endsWith(".gguf")) return { id: idOrPath.split("/").pop(), path: resolve(idOrPath) };
  const reg = JSON.parse(readFileSync(join(root, "models.json"), "utf8")).models;
  const m = reg[idOrPath];
  if (!m) throw new Error(`${idOrPath}: not in models.json (ids: ${Object.keys(reg).join(", ")})`);
  const path = join(mashboxHome, "models", m.file);
  if (!existsSync(path)) throw new Error(`${idOrPath}: ${path} missing (node bin/mashbox.js pull ${idOrPath})`);
  return { id: idOrPath, path };
}

// ggml type -> [bytes per block, values per block]
const GGML_BLOCK = {
  0: [4, 1], 1: [2, 1], 2: [18, 32], 3: [20, 32], 6: [22, 32], 7: [24, 32], 8: [34, 32], 9: [36, 32],
  10: [84, 256], 11: [110, 256], 12: [144, 256], 13: [176, 256], 14: [210, 256], 15: [292, 256], 30: [2, 1], 39: [17, 32],
};
async function ggufFacts(path) {
  const { readGgufFileInfo } = await import("node-llama-cpp");
  const info = await readGgufFileInfo(path, { readTensorInfo: true });
  const arch = info.metadata.general.architecture;
  const a = info.metadata[arch];
  const bytesOf = (t) => {
    const b = GGML_BLOCK[t.ggmlType];
    if (!b) throw new Error(`${path}: tensor ${t.name} has ggml type ${t.ggmlType}, not in the benchmark's size table`);
    const n = t.dimensions.reduce((x, y) => x * Number(y), 1);
    return (n / b[1]) * b[0];
  };
  let total = 0, matmulParams = 0, embd = null, hasOutput = false;
  for (const t of info.tensorInfo) {
    total += bytesOf(t);
    if (t.name === "token_embd.weight") embd = t;
    if (t.name === "output.weight") hasOutput = true;
    if (t.name.startsWith("blk.") && t.name.endsWith(".weight") && t.dimensions.length >= 2)
      matmulParams += t.dimensions.reduce((x, y) => x * Number(y), 1);
  }
  const layers = a.block_count, heads = a.attention.head_count, kvHeads = a.attention.head_count_kv ?? heads;
  const headDim = a.attention.key_length ?? a.embedding_length / heads;
  const embdBytes = embd ? bytesOf(embd) : 0;
  const embdRow = embd ? embdBytes / Number(embd.dimensions[1]) : 0;
  // A decode step reads every weight once, except the token embedding table, of which it reads
  // one row, unless the output head is tied to it (no output.weight): then all of it is read.
  const weightsPerToken = hasOutput ? total - embdBytes + embdRow : total;
  const kvPerToken = layers * 2 * kvHeads * headDim * 2; // K and V, f16, both engines' default
  return { arch, layers, heads, kvHeads, headDim, matmulParams, weightsPerToken, kvPerToken, tied: !hasOutput, ctxTrain: a.context_length };
}
const bytesPerToken = (f, depth) => f.weightsPerToken + f.kvPerToken * depth;
const prefillOps = (f, n) => 2 * f.matmulParams * n + 2 * f.layers * f.heads * f.headDim * n * n;

// ---------------------------------------------------------------------------------------------
// The machine: memory read bandwidth (measured) and int8 dot-product peak (from the ISA)
function membwBinary() {
  const src = join(root, "bench", "membw.c");
  const key = createHash("sha256").update(readFileSync(src)).digest("hex").slice(0, 12);
  const bin = join(mashboxHome, "bench", `membw-${key}`);
  if (existsSync(bin)) return bin;
  mkdirSync(dirname(bin), { recursive: true });
  const r = spawnSync("cc", ["-O3", "-march=x86-64-v3", "-pthread", src, "-o", bin], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cc bench/membw.c: ${r.stderr}`);
  return bin;
}
function measureBandwidth() {
  const r = spawnSync(membwBinary(), [String(THREADS), String(MEMBW_MIB), "5"], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`membw exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout).gb_per_s * 1e9;
}

// int8 peak = cores x clock x ops per cycle, ops per cycle = 2 (multiply + add) x the int8 products
// one dot-product instruction makes x how many issue per cycle. AVX-512 VNNI: vpdpbusd zmm, 64
// products; 1 per cycle assumed (Zen 4 runs zmm as two 256-bit halves on its 2 integer-multiply
// pipes; Ice Lake/Sapphire Rapids issue it on port 0 only). AVX-VNNI: ymm, 32 products, 2 per
// cycle. AVX2: vpmaddubsw + vpmaddwd per 32 products, ~1 pair per cycle. The clock is /proc/cpuinfo's
// "cpu MHz" (MB_BENCH_CLOCK_MHZ overrides; a turbo clock would raise the peak).
function cpuPeak() {
  const info = readFileSync("/proc/cpuinfo", "utf8");
  const flags = new Set((info.match(/^flags\s*:(.*)$/m)?.[1] ?? "").trim().split(/\s+/));
  const mhz = Number(process.env.MB_BENCH_CLOCK_MHZ ?? info.match(/^cpu MHz\s*:\s*([\d.]+)/m)?.[1] ?? NaN);
  let isa, products, perCycle;
  if (flags.has("avx512_vnni")) [isa, products, perCycle] = ["AVX-512 VNNI vpdpbusd zmm", 64, 1];
  else if (flags.has("avx_vnni")) [isa, products, perCycle] = ["AVX-VNNI vpdpbusd ymm", 32, 2];
  else [isa, products, perCycle] = ["AVX2 vpmaddubsw+vpmaddwd ymm", 32, 1];
  perCycle = Number(process.env.MB_BENCH_DOT_PER_CYCLE ?? perCycle);
  const cores = Math.min(THREADS, availableParallelism());
  const ops = cores * mhz * 1e6 * 2 * products * perCycle;
  return { ops, text: `${cores} cores x ${mhz} MHz x 2 x ${products} products x ${perCycle}/cycle (${isa}) = ${f1(ops / 1e9)} GOPS` };
}

// ---------------------------------------------------------------------------------------------
// Prompts. Prefill: plain text cut to an exact token count with mashbox's tokenizer (the same ids go
// to llama-server; llama-bench makes its own). Decode: a counting list as a plain completion,
// which every model continues for as long as it is asked. It counts from 1000 up: from 1,
// Qwen2.5-Coder-1.5B ends its list with a note on running the code after 114 tokens.
const filler =
  "The quick brown fox jumps over the lazy dog while the river keeps running toward the sea, " +
  "and every town along its banks tells a different story about the summer of the long rains. ";
const fillerText = (i, n) => `Story ${i}: ` + filler.repeat(Math.ceil(n / 20) + 4);
const countText = (start) => {
  let s = `Count from ${start} to ${start + 4999}, one number per line:\n`;
  for (let k = 0; k < 5; k++) s += `${start + k}\n`;
  return s;
};

// ---------------------------------------------------------------------------------------------
// mashbox through the addon: prefill at each size (prompt_ms), decode at the largest's depth, and
// single-stream decode.
async function mashboxAddon(modelPath, { sizes = PREFILL, decode = DECODE, depth = Math.max(...sizes), depthDecode = DEPTH_DECODE } = {}) {
  const addonPath = process.env.MASHBOX_NATIVE_ADDON ?? resolve(root, "native/build/binding/mashbox_native.node");
  if (!existsSync(addonPath)) throw new Error(`addon missing at ${addonPath}: run npm run build:native`);
  const addon = createRequire(import.meta.url)(addonPath);
  const runs = new Map();
  const engine = new addon.Engine();
  const nCtx = Math.max(1024, Math.max(...sizes) + depthDecode + 64);
  const info = await engine.load({ model_path: modelPath, n_ctx: nCtx, n_slots: 1, n_threads: THREADS, max_batch: 512 }, (evs) => {
    for (const e of evs) {
      const r = runs.get(e.id);
      if (!r) continue;
      if (e.type === "token") r.times.push(performance.now());
      if (e.type === "done" || e.type === "error") r.resolve({ done: e, times: r.times });
    }
  });
  let nextId = 1;
  const run = (prompt, max_tokens) =>
    new Promise((res) => {
      const id = nextId++;
      runs.set(id, { times: [], resolve: res });
      engine.submit({ id, prompt, max_tokens, sampling: { temperature: 0 } });
    });
  const tok = (text) => Array.from(engine.tokenize(text, false, false));
  const rateOf = (times) => (times.length > 1 ? ((times.length - 1) * 1000) / (times[times.length - 1] - times[0]) : NaN);
  const out = { kernels: info.kernels, prefill: {}, depth: null, decode: null };
  try {
    await run(tok(countText(900)).slice(0, 64), 4); // page the weights in
    // the depth run rides on the prefill of its size, or is one more prompt when no size matches
    const runs = sizes.includes(depth) || depthDecode <= 0 ? sizes : [...sizes, depth];
    for (const [k, n] of runs.entries()) {
      const prompt = tok(fillerText(200 + k, n)).slice(0, n);
      if (prompt.length < n) throw new Error(`filler too short for ${n} tokens`);
      const withDepth = n === depth && depthDecode > 0;
      const { done, times } = await run(prompt, withDepth ? depthDecode + 1 : 1);
      if (done.type === "error") throw new Error(`mashbox prefill ${n}: ${done.message}`);
      if (k < sizes.length) out.prefill[n] = (n * 1000) / done.prompt_ms;
      if (withDepth) out.depth = { n, tokens: times.length - 1, want: depthDecode, rate: rateOf(times), prompt };
    }
    if (decode > 0) {
      const { times } = await run(tok(countText(1000)), decode);
      out.decode = { tokens: times.length, want: decode, rate: rateOf(times) };
    }
  } finally {
    engine.close();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Servers over HTTP
const startServer = serverStarter(logDir, live);
const mashboxServer = async (modelPath, slots, ctx) => {
  const port = await freePort();
  return startServer("mashbox", process.execPath, [join(root, "bin", "mashbox.js"), "run", modelPath, "--port", String(port),
    "--slots", String(slots), "--ctx", String(ctx), "--threads", String(THREADS), "--spec", "off"], port);
};
const llamaServer = async (bin, modelPath, slots, ctxPerSlot) => {
  const port = await freePort();
  return startServer("llama-server", join(bin, "llama-server"), ["-m", modelPath, "--host", "127.0.0.1", "--port", String(port),
    "-t", String(THREADS), "-tb", String(THREADS), "-np", String(slots), "-c", String(slots * ctxPerSlot), "--no-webui"], port);
};

// One streamed completion; resolves with the content pieces' arrival times (one per token: the
// counting list is ASCII and no stop string holds anything back) and, from llama-server, its
// own count.
async function streamCompletion(url, body) {
  const t0 = performance.now();
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  const times = [];
  let predicted = null, buf = "";
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") continue;
      const ev = JSON.parse(data);
      const text = ev.choices?.[0]?.text ?? ev.content ?? "";
      if (text !== "") times.push(performance.now());
      if (ev.timings?.predicted_n != null) predicted = ev.timings.predicted_n;
    }
  }
  return { t0, times, tEnd: performance.now(), predicted };
}
const mashboxStream = (base, prompt, n) =>
  streamCompletion(`${base}/v1/completions`, { prompt, max_tokens: n, temperature: 0, stream: true });
const llamaStream = (base, prompt, n) =>
  streamCompletion(`${base}/completion`, { prompt, n_predict: n, temperature: 0, top_k: 1, stream: true });
const streamRate = (s) => (s.times.length > 1 ? ((s.times.length - 1) * 1000) / (s.times[s.times.length - 1] - s.times[0]) : NaN);

// N concurrent streams, each its own counting list; aggregate = all tokens / wall time.
async function manyStreams(send, n, tokens) {
  const t0 = performance.now();
  const all = await Promise.all(Array.from({ length: n }, (_, i) => send(countText(1000 * (i + 1)), tokens)));
  const wall = performance.now() - t0;
  const counts = all.map((s) => s.times.length);
  return { counts, want: tokens, rate: (counts.reduce((a, b) => a + b, 0) * 1000) / wall };
}

// ---------------------------------------------------------------------------------------------
// llama.cpp: llama-bench (pp at each size, tg), llama-server (one stream, depth, N streams)
async function llamaBench(bin, modelPath, sizes, tg) {
  const argv = ["-m", modelPath, "-t", String(THREADS), "-p", sizes.join(","), "-n", String(tg), "-r", "1", "-o", "json"];
  const child = spawn(join(bin, "llama-bench"), argv, { stdio: ["ignore", "pipe", "pipe"] });
  live.add(child);
  let stdout = "", stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
  const status = await new Promise((res) => child.once("exit", (code, sig) => res(code ?? sig)));
  live.delete(child);
  if (status !== 0) throw new Error(`llama-bench exited ${status}: ${stderr.slice(-2000)}`);
  const rows = JSON.parse(stdout);
  const out = { prefill: {}, tg: null };
  for (const row of rows) {
    if (row.n_gen === 0) out.prefill[row.n_prompt] = row.avg_ts;
    else if (row.n_prompt === 0) out.tg = row.avg_ts;
  }
  return out;
}
async function llamaDepth(base, prompt, n) {
  const r = await fetch(`${base}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, n_predict: n, temperature: 0, top_k: 1, cache_prompt: false }),
  });
  if (r.status !== 200) throw new Error(`llama-server depth: ${r.status} ${await r.text()}`);
  const j = await r.json();
  return { tokens: j.timings.predicted_n, want: n, rate: j.timings.predicted_per_second, prefill: j.timings.prompt_per_second };
}

// ---------------------------------------------------------------------------------------------
const checked = (what, got, want) => (got === want ? `${got} tokens` : `${got} of ${want} tokens: SHORT, left out`);
const okRate = (r) => (r && r.tokens === r.want ? r.rate : NaN);

async function mashboxRound(model, round, rec) {
  const a = await mashboxAddon(model.path, { depth: rec.depth });
  for (const n of PREFILL) rec.mb.prefill[n].push(a.prefill[n]);
  rec.mb.decode.push(okRate(a.decode));
  if (a.depth) rec.mb.depth.push(okRate(a.depth));
  rec.depthPrompt ??= a.depth?.prompt;
  rec.kernels = a.kernels;
  console.log(`  [${round}] mashbox   addon: prefill ${PREFILL.map((n) => `${n}: ${f1(a.prefill[n])}`).join(", ")} tok/s | decode ${f1(a.decode.rate)} tok/s (${checked("decode", a.decode.tokens, a.decode.want)})` +
    (a.depth ? ` | at depth ${a.depth.n} ${f1(a.depth.rate)} tok/s (${checked("depth", a.depth.tokens, a.depth.want)})` : "") + ` (load ${load()})`);
  let s = await mashboxServer(model.path, 1, 1024);
  try {
    await mashboxStream(s.base, countText(7), 4);
    const one = await mashboxStream(s.base, countText(1000), DECODE);
    rec.mb.http.push(one.times.length === DECODE ? streamRate(one) : NaN);
    console.log(`  [${round}] mashbox   HTTP one stream: ${f1(streamRate(one))} tok/s (${checked("http", one.times.length, DECODE)})`);
  } finally {
    await s.stop();
  }
  if (STREAMS > 1) {
    s = await mashboxServer(model.path, STREAMS, STREAM_CTX);
    try {
      await mashboxStream(s.base, countText(7), 4);
      const m = await manyStreams((p, n) => mashboxStream(s.base, p, n), STREAMS, STREAM_TOKENS);
      rec.mb.streams.push(m.counts.every((c) => c === m.want) ? m.rate : NaN);
      console.log(`  [${round}] mashbox   HTTP ${STREAMS} streams (--slots ${STREAMS}): ${f1(m.rate)} tok/s (tokens ${m.counts.join(",")} of ${m.want} each)`);
    } finally {
      await s.stop();
    }
  }
}

async function llamaRound(bin, model, round, rec) {
  const b = await llamaBench(bin, model.path, PREFILL, DECODE);
  for (const n of PREFILL) rec.ll.prefill[n].push(b.prefill[n]);
  rec.ll.tg.push(b.tg);
  console.log(`  [${round}] llama.cpp llama-bench: pp ${PREFILL.map((n) => `${n}: ${f1(b.prefill[n])}`).join(", ")} tok/s | tg${DECODE} ${f1(b.tg)} tok/s (load ${load()})`);
  let s = await llamaServer(bin, model.path, 1, Math.max(1024, rec.depth + DEPTH_DECODE + 64));
  try {
    await llamaStream(s.base, countText(7), 4);
    const one = await llamaStream(s.base, countText(1000), DECODE);
    const n = one.times.length;
    const ok = n === DECODE && one.predicted === DECODE;
    rec.ll.http.push(ok ? streamRate(one) : NaN);
    let line = `  [${round}] llama.cpp llama-server one stream: ${f1(streamRate(one))} tok/s (${checked("http", ok ? n : Math.min(n, one.predicted ?? n), DECODE)})`;
    if (DEPTH_DECODE > 0 && rec.depthPrompt) {
      try {
        const d = await llamaDepth(s.base, rec.depthPrompt, DEPTH_DECODE);
        rec.ll.depth.push(okRate(d));
        rec.ll.serverPrefill.push(d.prefill);
        line += ` | at depth ${rec.depth} ${f1(d.rate)} tok/s (${checked("depth", d.tokens, d.want)}; its prefill ${f1(d.prefill)} tok/s)`;
      } catch (e) {
        line += ` | at depth ${rec.depth}: ${e.message}`;
      }
    }
    console.log(line);
  } finally {
    await s.stop();
  }
  if (STREAMS > 1) {
    s = await llamaServer(bin, model.path, STREAMS, STREAM_CTX);
    try {
      await llamaStream(s.base, countText(7), 4);
      const m = await manyStreams((p, n) => llamaStream(s.base, p, n), STREAMS, STREAM_TOKENS);
      rec.ll.streams.push(m.counts.every((c) => c === m.want) ? m.rate : NaN);
      console.log(`  [${round}] llama.cpp llama-server ${STREAMS} streams (-np ${STREAMS}): ${f1(m.rate)} tok/s (tokens ${m.counts.join(",")} of ${m.want} each)`);
    } finally {
      await s.stop();
    }
  }
}

// Targets, same run against llama.cpp: prefill, decode (also against the bandwidth wall) and N streams.
const TARGETS = {
  "qwen2.5-coder-0.5b": { prefill: () => 3, decodeBench: 1.0, bw: 0.9, streams: 3 },
  "qwen2.5-coder-1.5b": { prefill: (n) => (n <= 512 ? 3 : null), decodeBench: 1.0, bw: 0.9 },
  "smollm2-135m": { prefill: (n) => (n <= 512 ? 3 : null), decodeServer: 1.3, streams: 3 },
};
const vs = (a, b, target) => {
  const r = a / b;
  const t = target ? ` (target >= ${target}x${Number.isFinite(r) ? (r >= target ? ": met" : ": NOT met") : ""})` : "";
  return `${f2(r)}x${t}`;
};

async function benchModel(model, bin, peak, bwAll) {
  const facts = await ggufFacts(model.path);
  const size = statSync(model.path).size;
  console.log(`\n== ${model.id}: ${model.path} (${mib(size)} MiB, ${facts.arch}, ${facts.layers} layers, ${facts.heads}/${facts.kvHeads} heads x ${facts.headDim}, ` +
    `${(facts.matmulParams / 1e6).toFixed(0)}M matmul params${facts.tied ? ", output tied to the embedding" : ""}; training context ${facts.ctxTrain})`);
  const series = () => ({ prefill: Object.fromEntries(PREFILL.map((n) => [n, []])), decode: [], depth: [], http: [], streams: [], tg: [], serverPrefill: [] });
  const rec = { mb: series(), ll: series(), depthPrompt: null, kernels: null, depth: depthFor(facts) };
  console.log(`   threads ${THREADS}, prefill ${PREFILL.join("/")}, decode ${DECODE}, depth ${rec.depth} + ${DEPTH_DECODE}, ${STREAMS} streams x ${STREAM_TOKENS} (ctx ${STREAM_CTX}/slot), rounds ${ROUNDS}`);
  if (Math.max(...PREFILL) > facts.ctxTrain)
    console.log(`   note: prefill ${Math.max(...PREFILL)} is past the model's training context ${facts.ctxTrain} (speed only); decode at depth runs at ${rec.depth}`);
  const bw = [];
  let done = 0;
  // A run stopped early (Ctrl-C, a timeout's SIGTERM) still prints what its finished parts measured.
  interrupted = () => summary(model, facts, rec, bw, peak, `${done} finished round(s), stopped early`);
  for (let round = 1; round <= ROUNDS; round++) {
    bw.push(measureBandwidth());
    bwAll.push(bw[bw.length - 1]);
    console.log(`  [${round}] memory read bandwidth (${THREADS} threads, ${MEMBW_MIB} MiB): ${f1(bw[bw.length - 1] / 1e9)} GB/s`);
    if (!SKIP_MASHBOX) await mashboxRound(model, round, rec);
    if (!SKIP_LLAMA) await llamaRound(bin, model, round, rec);
    done = round;
  }
  interrupted = null;
  summary(model, facts, rec, bw, peak, `medians of ${ROUNDS} round(s)`);
}

// Summary: medians over rounds
function summary(model, facts, rec, bw, peak, what) {
  const B = median(bw);
  const T = TARGETS[model.id] ?? {};
  const m = (xs) => median(xs);
  const shortDepth = 20 + DECODE / 2; // the counting prompt plus half the answer
  const bwFrac = (rate, depth) => (bytesPerToken(facts, depth) * rate) / B;
  console.log(`-- ${model.id} summary (${what}; bandwidth ${f1(B / 1e9)} GB/s; kernels ${rec.kernels ?? "-"}; int8 peak ${f1(peak.ops / 1e9)} GOPS)`);
  for (const n of PREFILL) {
    const a = m(rec.mb.prefill[n]), b = m(rec.ll.prefill[n]);
    const g = (r) => (prefillOps(facts, n) * r) / n;
    console.log(`   prefill ${String(n).padStart(6)}: mashbox ${f1(a)} tok/s (${f1(g(a) / 1e9)} GOPS, ${pct(g(a) / peak.ops)} of peak) | llama-bench pp${n} ${f1(b)} tok/s (${f1(g(b) / 1e9)} GOPS, ${pct(g(b) / peak.ops)}) | ${vs(a, b, T.prefill?.(n))}`);
  }
  const bpt = bytesPerToken(facts, shortDepth);
  const d = m(rec.mb.decode), h = m(rec.mb.http), tg = m(rec.ll.tg), lh = m(rec.ll.http);
  console.log(`   decode (${(bpt / 1e6).toFixed(1)} MB/token): mashbox addon ${f1(d)} tok/s (${pct(bwFrac(d, shortDepth))} of bandwidth), HTTP ${f1(h)} (${pct(bwFrac(h, shortDepth))})` +
    ` | llama-bench tg${DECODE} ${f1(tg)} (${pct(bwFrac(tg, 0))}), llama-server ${f1(lh)} (${pct(bwFrac(lh, shortDepth))})`);
  console.log(`     addon vs llama-bench ${vs(d, tg, T.decodeBench)}; HTTP vs llama-server ${vs(h, lh, T.decodeServer)}` +
    (T.bw ? `; mashbox at ${pct(bwFrac(d, shortDepth))} of the bandwidth limit (target >= ${pct(T.bw)}${bwFrac(d, shortDepth) >= T.bw ? ": met" : ": NOT met"})` : ""));
  if (DEPTH_DECODE > 0) {
    const a = m(rec.mb.depth), b = m(rec.ll.depth), dd = rec.depth + DEPTH_DECODE / 2;
    console.log(`   decode at depth ${rec.depth} (${(bytesPerToken(facts, dd) / 1e6).toFixed(1)} MB/token): mashbox ${f1(a)} tok/s (${pct(bwFrac(a, dd))}) | llama-server ${f1(b)} (${pct(bwFrac(b, dd))}; its prefill ${f1(m(rec.ll.serverPrefill))} tok/s) | ${vs(a, b)}`);
  }
  if (STREAMS > 1) {
    const a = m(rec.mb.streams), b = m(rec.ll.streams);
    console.log(`   ${STREAMS} streams HTTP: mashbox --slots ${STREAMS} ${f1(a)} tok/s | llama-server -np ${STREAMS} ${f1(b)} tok/s | ${vs(a, b, T.streams)}`);
  }
}

// One line per architecture fixture: the addon's prefill 512 / decode 128 against llama-bench.
const ARCH_FIXTURES = { phi3: "test/fixtures/phi3-q8_0.gguf", "gpt-oss": "test/fixtures/gpt-oss-mxfp4.gguf", gemma3: "test/fixtures/gemma3-q8_0.gguf" };
async function benchArchs(bin) {
  console.log(`\narchitectures (fixtures, random weights): prefill 512, decode 128, threads ${THREADS}`);
  for (const arch of ARCHS) {
    const rel = ARCH_FIXTURES[arch];
    const file = rel && resolve(root, rel);
    if (!file || !existsSync(file)) {
      console.log(`  ${arch.padEnd(8)} ${rel ?? "no fixture"} missing (npm run fixtures)`);
      continue;
    }
    // random weights stop nowhere in particular: the count is printed, not required
    const a = SKIP_MASHBOX ? null : await mashboxAddon(file, { sizes: [512], decode: 128, depthDecode: 0 });
    const b = SKIP_LLAMA ? null : await llamaBench(bin, file, [512], 128);
    console.log(`  ${arch.padEnd(8)} prefill mashbox ${f1(a?.prefill[512])} | llama-bench ${f1(b?.prefill[512])} tok/s (${f2(a?.prefill[512] / b?.prefill[512])}x)` +
      `  || decode mashbox ${f1(a?.decode.rate)} (${a?.decode.tokens ?? "-"} tokens) | llama-bench tg128 ${f1(b?.tg)} tok/s (${f2(a?.decode.rate / b?.tg)}x)`);
  }
}

let interrupted = null;
for (const sig of ["SIGINT", "SIGTERM"])
  process.once(sig, () => {
    for (const c of live) c.kill("SIGKILL");
    interrupted?.();
    process.exit(130);
  });
const bin = SKIP_LLAMA ? null : peerBin();
if (!SKIP_LLAMA && !bin) {
  console.error("llama.cpp's binaries are not built for this node-llama-cpp and CPU: run `npm run build:peer` (about 15 min on 2 cores), or --skip-llama");
  process.exit(1);
}
const peak = cpuPeak();
console.log(`mashbox vs llama.cpp (${bin ?? "skipped"})${Q ? " QUICK: a sanity check, not the reported numbers" : ""}`);
console.log(`int8 dot-product peak: ${peak.text}; logs in ${logDir}`);
const bwAll = [];
if (!opt["archs-only"]) for (const id of MODELS) await benchModel(resolveModel(id), bin, peak, bwAll);
if (ARCHS.length > 0) await benchArchs(bin);
if (bwAll.length > 1) console.log(`\nmemory read bandwidth over the run: ${bwAll.map((b) => f1(b / 1e9)).join(", ")} GB/s`);
