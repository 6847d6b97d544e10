#!/usr/bin/env node
// Host prompt cache: what restoring a long prompt from host memory costs against prefilling it,
// on one slot (the addon directly, no HTTP). For each length: a cold prefill of prompt P, an
// unrelated prompt that takes the slot (P's K/V goes to the host cache), then P again, which
// restores all but its last token and prefills that one.
//   MB_BENCH_MODEL=path  MB_BENCH_THREADS=n  MB_BENCH_LENGTHS=2048,8192 (prompt tokens)
import { createRequire } from "node:module";
import { existsSync, unlinkSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { dirname, join, resolve } from "node:path";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MODEL = process.env.MB_BENCH_MODEL ?? process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const THREADS = Number(process.env.MB_BENCH_THREADS ?? availableParallelism());
const LENGTHS = (process.env.MB_BENCH_LENGTHS ?? "2048,8192").split(",").map(Number).filter((n) => n > 0);
const ADDON = process.env.MASHBOX_NATIVE_ADDON ?? join(root, "native/build/binding/mashbox_native.node");

if (!existsSync(MODEL)) throw new Error(`model not found: ${MODEL} (node bin/mashbox.js pull smollm2-135m)`);
const { Engine } = createRequire(import.meta.url)(ADDON);
const GREEDY = { temperature: 0, top_k: 0, top_p: 1, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 };

async function main() {
  const ctx = Math.max(...LENGTHS) + 64;
  const cache_path = join(tmpdir(), `mashbox-bench-cache-${process.pid}`);
  const waiters = new Map();
  const e = new Engine();
  await e.load({ model_path: MODEL, n_ctx: ctx, n_slots: 1, n_threads: THREADS, max_batch: 512, cache_ram_mib: 4096, cache_path, cache_namespace: "bench" }, (evs) => {
    for (const ev of evs) if (ev.type === "done" || ev.type === "error") waiters.get(ev.id)?.(ev);
  });
  let nextId = 1;
  const run = (prompt) =>
    new Promise((res, rej) => {
      const id = nextId++;
      waiters.set(id, (ev) => (ev.type === "done" ? res(ev) : rej(new Error(ev.message))));
      e.submit({ id, prompt, max_tokens: 1, sampling: GREEDY });
    });
  const words = "the river bends past the mill where the old stones keep the water cold in summer and loud in spring".split(" ");
  const tokens = (n, salt) => {
    let text = `Document ${salt}.`;
    let ids = e.tokenize(text, true, false);
    for (let i = 0; ids.length < n; i++) {
      text += ` ${words[(i * 7 + salt) % words.length]}`;
      if (i % 64 === 0) ids = e.tokenize(text, true, false);
    }
    return Array.from(e.tokenize(text, true, false)).slice(0, n);
  };
  console.log(`model ${MODEL}, ${THREADS} threads, K/V ${e.info().kv_token_bytes} bytes per token`);
  console.log("| prompt tokens | prefill ms | restore ms (restored + 1 token) | speed-up | cached |");
  console.log("|---|---|---|---|---|");
  for (const n of LENGTHS) {
    const p = tokens(n, n);
    const cold = await run(p);
    await run(tokens(64, n + 1)); // takes the slot: p's K/V moves to the host cache
    const warm = await run(p);
    console.log(`| ${n} | ${cold.prompt_ms.toFixed(0)} | ${warm.prompt_ms.toFixed(1)} | ${(cold.prompt_ms / warm.prompt_ms).toFixed(0)}x | ${warm.cached_tokens}/${warm.prompt_tokens} (${((100 * warm.cached_tokens) / warm.prompt_tokens).toFixed(1)}%) |`);
  }
  const st = e.stats();
  console.log(`host cache: ${(st.host_cache_bytes / 2 ** 20).toFixed(1)} MiB in ${st.host_cache_tokens} tokens, ${st.host_cache_evictions} evictions`);
  e.close();
  unlinkSync(cache_path);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
