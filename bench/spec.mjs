#!/usr/bin/env node
// Speculative decoding by n-gram lookup (--spec ngram), and with --draft by a draft model (--spec
// draft), against plain decoding, through the addon, on one GGUF, greedy, alternating round by
// round (off, ngram, draft, off, ngram, draft, ...). Workloads:
//   - rename: ask the model to rename one variable in a 20-line function and return the function
//     (issue 23's code-edit turn: most of the answer repeats the prompt);
//   - tool: the same function to be saved through a declared write_file tool, so that the answer is
//     a tool call whose JSON arguments carry the function again, escaped (the prompt rendered by
//     the server's chat template code from the model's own template, as a request with tools is);
//   - prose: a short story, which the prompt cannot predict.
// Per workload it prints decode tok/s (tokens after the first over the time from the first to
// the last), the tokens produced, drafted and accepted, and checks both modes produced the same
// tokens (greedy speculation is exact). Then aggregate tok/s of --streams concurrent prose
// streams (one slot each), where drafts compete with the other streams' rows for the step.
// The load average is printed, since the box is shared.
// Then, unless --no-llama, llama.cpp's llama-server (the peer build, scripts/build-llama-peer.mjs)
// on the same GGUF and prompt tokens, one slot, greedy: without speculation, with --spec-type
// ngram-mod and ngram-simple, and with --draft its draft-simple mode (-md). Its rate is its own
// timings.predicted_per_second, with its draft_n / draft_n_accepted.
//
//   --model PATH   (default ~/.cache/mashbox/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)
//   --rounds N     (default 3)   --threads N (default: all cores)   --tokens N (default 256)
//   --draft-max N  (default 8)    --streams N (default 4; 0 skips)
//   --draft PATH   a draft model GGUF of the same vocabulary: adds the draft column
//   --workloads a,b  (default rename,tool,prose)
//   --no-llama     skip llama-server
//   --cache-mb N   give every engine a host prompt cache of N MiB (default 0: none), so that a
//                  round's request drafts from the earlier rounds' answers where its own history
//                  has no match (the cache saves a slot's answer when the next round reuses it)
import { existsSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism, homedir, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { peerBin } from "../scripts/build-llama-peer.mjs";
import { freePort, serverStarter } from "./servers.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { values: a } = parseArgs({
  options: {
    model: { type: "string" },
    rounds: { type: "string" },
    threads: { type: "string" },
    tokens: { type: "string" },
    "draft-max": { type: "string" },
    streams: { type: "string" },
    draft: { type: "string" },
    workloads: { type: "string" },
    "no-llama": { type: "boolean" },
    "cache-mb": { type: "string" },
  },
});
const MODEL = a.model ?? join(homedir(), ".cache/mashbox/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
const ROUNDS = Number(a.rounds ?? 3);
const THREADS = Number(a.threads ?? availableParallelism());
const TOKENS = Number(a.tokens ?? 256);
const DRAFT_MAX = Number(a["draft-max"] ?? 8);
const STREAMS = Number(a.streams ?? 4);
const DRAFT = a.draft;
const CACHE_MB = Number(a["cache-mb"] ?? 0);
const MODES = DRAFT ? ["off", "ngram", "draft"] : ["off", "ngram"];
const SPEC = MODES.slice(1);

const FUNCTION = `function summarize(orders) {
  let total = 0;
  let count = 0;
  const byCustomer = new Map();
  for (const order of orders) {
    if (order.status !== "paid") continue;
    total += order.amount;
    count += 1;
    const prev = byCustomer.get(order.customer) ?? 0;
    byCustomer.set(order.customer, prev + order.amount);
  }
  let best = null;
  for (const [customer, amount] of byCustomer) {
    if (best === null || amount > best.amount) best = { customer, amount };
  }
  const average = count > 0 ? total / count : 0;
  const rounded = Math.round(average * 100) / 100;
  return { total, count, average: rounded, best };
}`;
const chatml = (user) =>
  `<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n<|im_start|>user\n${user}<|im_end|>\n<|im_start|>assistant\n`;
const WORKLOADS = {
  rename: chatml(`Rename the variable \`total\` to \`revenue\` in this function and return the whole function, nothing else.\n\n\`\`\`js\n${FUNCTION}\n\`\`\``),
  // rendered by the server's own chat template code once the model's template is known (below)
  tool: {
    system: ["You are a helpful coding assistant."],
    turns: [{ role: "user", content: `Save this function to summarize.js with the variable \`total\` renamed to \`revenue\`.\n\n\`\`\`js\n${FUNCTION}\n\`\`\`` }],
    tools: [{
      kind: "function", name: "write_file", description: "Write a file to disk",
      parameters: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path", "content"] },
    }],
    tool_choice: { type: "auto" },
  },
  prose: chatml("Write a short story about a lighthouse keeper who finds a message in a bottle."),
};
for (const w of Object.keys(WORKLOADS)) if (a.workloads && !a.workloads.split(",").includes(w)) delete WORKLOADS[w];

const addonPath = process.env.MASHBOX_NATIVE_ADDON ?? resolve(root, "native/build/binding/mashbox_native.node");
if (!existsSync(addonPath)) throw new Error(`addon missing at ${addonPath}: run npm run build:native`);
if (!existsSync(MODEL)) throw new Error(`model missing at ${MODEL}`);
if (DRAFT && !existsSync(DRAFT)) throw new Error(`draft model missing at ${DRAFT}`);
const addon = createRequire(import.meta.url)(addonPath);
const templatePath = resolve(root, "dist/src/chat/template.js");
if (WORKLOADS.tool && !existsSync(templatePath)) throw new Error(`${templatePath} missing: run npm run build`);
const { renderChatPromptParts } = WORKLOADS.tool ? await import(templatePath) : {};

async function open(spec) {
  const engine = new addon.Engine();
  const runs = new Map();
  const draft = spec === "draft" ? { draft_model_path: DRAFT } : {};
  const info = await engine.load({ model_path: MODEL, n_ctx: 2048, n_slots: Math.max(1, STREAMS), n_threads: THREADS, max_batch: 512, spec, spec_draft_max: DRAFT_MAX, cache_ram_mib: CACHE_MB, ...draft }, (evs) => {
    for (const e of evs) {
      const r = runs.get(e.id);
      if (!r) continue;
      if (e.type === "token") {
        r.times.push(performance.now());
        r.tokens.push(e.token);
      }
      if (e.type === "done" || e.type === "error") r.resolve({ done: e, times: r.times, tokens: r.tokens });
    }
  });
  let next = 1;
  return {
    engine,
    info,
    tok: (text) => Array.from(engine.tokenize(text, false, true)),
    run: (prompt, max_tokens) =>
      new Promise((res) => {
        const id = next++;
        runs.set(id, { times: [], tokens: [], resolve: res });
        engine.submit({ id, prompt, max_tokens, sampling: { temperature: 0 } });
      }),
  };
}

const rate = (times) => (times.length > 1 ? ((times.length - 1) * 1000) / (times[times.length - 1] - times[0]) : NaN);
const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "-");
const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];

console.log(`spec bench: ${MODEL}${DRAFT ? ` drafted by ${DRAFT}` : ""}, ${THREADS} threads, ${TOKENS} tokens max, draft max ${DRAFT_MAX}, ${ROUNDS} rounds` +
  (CACHE_MB > 0 ? `, host cache ${CACHE_MB} MiB` : ""));
const engines = {};
for (const m of MODES) engines[m] = await open(m);
for (const e of Object.values(engines)) await e.run(e.tok("Hello"), 4); // page the weights in
if (WORKLOADS.tool) {
  const { info } = engines.off;
  const model = { chat_template: info.chat_template, bos_token: info.bos_token, eos_token: info.eos_token, add_bos: info.add_bos, control_tokens: info.control_tokens };
  WORKLOADS.tool = renderChatPromptParts(WORKLOADS.tool, model).text;
}
const results = {};
for (const [name, text] of Object.entries(WORKLOADS)) {
  results[name] = { off: [], ngram: [], draft: [], drafted: { ngram: 0, draft: 0 }, accepted: { ngram: 0, draft: 0 }, same: true, n: 0 };
  let ref = null;
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of MODES) {
      const e = engines[mode];
      const { done, times, tokens } = await e.run(e.tok(text), TOKENS);
      if (done.type === "error") throw new Error(`${name} ${mode}: ${done.message}`);
      const r = rate(times);
      results[name][mode].push(r);
      if (mode !== "off") {
        results[name].drafted[mode] += done.draft_n;
        results[name].accepted[mode] += done.draft_n_accepted;
      }
      if (ref === null) ref = tokens.join(",");
      else if (tokens.join(",") !== ref) results[name].same = false;
      results[name].n = tokens.length;
      console.log(`  [${round}] ${name.padEnd(6)} ${mode.padEnd(5)} ${f1(r)} tok/s, ${tokens.length} tokens` +
        (mode !== "off" ? `, ${done.draft_n} drafted, ${done.draft_n_accepted} accepted` : "") + `  (load ${loadavg()[0].toFixed(1)})`);
    }
  }
}
console.log(`\nworkload  tokens  off tok/s  ${SPEC.map((m) => `${m} tok/s  speedup  acceptance`).join("  ")}  identical`);
for (const [name, r] of Object.entries(results)) {
  const off = median(r.off);
  const cols = SPEC.map((m) => {
    const on = median(r[m]), d = r.drafted[m], k = r.accepted[m];
    return `${f1(on).padStart(5 + m.length)}  ${(on / off).toFixed(2).padStart(6)}x  ` + `${d ? ((100 * k) / d).toFixed(0) : "-"}% of ${d}`.padEnd(10);
  });
  console.log(`${name.padEnd(9)} ${String(r.n).padStart(6)}  ${f1(off).padStart(9)}  ${cols.join("  ")}  ${r.same ? "yes" : "NO"}`);
}
if (STREAMS > 0) {
  const topics = ["a lighthouse keeper", "a lost robot", "a baker in Paris", "a mountain village", "a time traveller", "a river"];
  const agg = { off: [], ngram: [], draft: [] };
  let same = true;
  for (let round = 0; round < ROUNDS; round++) {
    const texts = {};
    for (const mode of MODES) {
      const e = engines[mode];
      const prompts = Array.from({ length: STREAMS }, (_, i) => e.tok(chatml(`Write a short story about ${topics[i % topics.length]}.`)));
      const t0 = performance.now();
      const outs = await Promise.all(prompts.map((p) => e.run(p, TOKENS / 2)));
      const firsts = outs.map((o) => o.times[0]);
      const t1 = Math.max(...outs.map((o) => o.times.at(-1)));
      const n = outs.reduce((k, o) => k + o.tokens.length - 1, 0);
      const r = (n * 1000) / (t1 - Math.min(...firsts));
      agg[mode].push(r);
      texts[mode] = outs.map((o) => o.tokens.join(",")).join("|");
      const d = outs.reduce((k, o) => k + o.done.draft_n, 0), acc = outs.reduce((k, o) => k + o.done.draft_n_accepted, 0);
      console.log(`  [${round}] ${STREAMS} streams ${mode.padEnd(5)} ${f1(r)} tok/s aggregate (${f1(performance.now() - t0)} ms)` +
        (mode !== "off" ? `, ${d} drafted, ${acc} accepted` : "") + `  (load ${loadavg()[0].toFixed(1)})`);
    }
    if (SPEC.some((m) => texts[m] !== texts.off)) same = false;
  }
  const off = median(agg.off);
  const cols = SPEC.map((m) => `${m} ${f1(median(agg[m]))} tok/s (${(median(agg[m]) / off).toFixed(2)}x)`);
  console.log(`${STREAMS} streams: off ${f1(off)} tok/s, ${cols.join(", ")} aggregate, identical ${same ? "yes" : "NO"}`);
  if (!same) results.streams = { same: false };
}
console.log(`(medians over ${ROUNDS} rounds; load average now ${loadavg().map((x) => x.toFixed(1)).join(" ")})`);
const prompts = Object.fromEntries(Object.entries(WORKLOADS).map(([name, text]) => [name, engines.off.tok(text)]));
for (const e of Object.values(engines)) await e.engine.close();

const bin = a["no-llama"] ? null : peerBin();
if (!a["no-llama"] && !bin) console.log("\nllama-server: no peer build (npm run build:peer); its rows are skipped");
if (bin) {
  const logDir = join(tmpdir(), `mashbox-spec-${process.pid}`);
  mkdirSync(logDir, { recursive: true });
  const live = new Set();
  process.on("exit", () => {
    for (const c of live) c.kill("SIGKILL");
  });
  const start = serverStarter(logDir, live);
  const modes = [
    ["none", []],
    ["ngram-mod", ["--spec-type", "ngram-mod"]],
    ["ngram-simple", ["--spec-type", "ngram-simple"]],
    ...(DRAFT ? [["draft-simple", ["--spec-type", "draft-simple", "-md", DRAFT]]] : []),
  ];
  const rows = [];
  for (const [mode, extra] of modes) {
    const port = await freePort();
    const srv = await start(`llama-server-${mode}`, join(bin, "llama-server"), ["-m", MODEL, "--host", "127.0.0.1", "--port", String(port),
      "-t", String(THREADS), "-tb", String(THREADS), "-np", "1", "-c", "2048", "--no-webui", ...extra], port);
    try {
      for (const [name, prompt] of Object.entries(prompts)) {
        const rates = [];
        let drafted = 0, accepted = 0, n = 0;
        for (let round = 0; round < ROUNDS; round++) {
          const r = await fetch(`${srv.base}/completion`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ prompt, n_predict: TOKENS, temperature: 0, top_k: 1, cache_prompt: false, stream: false }),
          });
          if (r.status !== 200) throw new Error(`llama-server ${mode} ${name}: ${r.status} ${await r.text()}`);
          const t = (await r.json()).timings ?? {};
          rates.push(t.predicted_per_second);
          drafted += t.draft_n ?? 0;
          accepted += t.draft_n_accepted ?? 0;
          n = t.predicted_n;
          console.log(`  [${round}] llama-server ${mode.padEnd(12)} ${name.padEnd(6)} ${f1(t.predicted_per_second)} tok/s, ${n} tokens` +
            (mode !== "none" ? `, ${t.draft_n ?? 0} drafted, ${t.draft_n_accepted ?? 0} accepted` : "") + `  (load ${loadavg()[0].toFixed(1)})`);
        }
        rows.push({ mode, name, rate: median(rates), drafted, accepted, n });
      }
    } finally {
      await srv.stop();
    }
  }
  console.log(`\nllama-server (same GGUF and prompt tokens, -np 1)  workload  tokens  tok/s  vs mashbox off  vs mashbox ngram  acceptance`);
  for (const r of rows) {
    const off = median(results[r.name].off), ng = median(results[r.name].ngram);
    console.log(`  ${r.mode.padEnd(13)} ${r.name.padEnd(9)} ${String(r.n).padStart(6)}  ${f1(r.rate).padStart(5)}  ${(off / r.rate).toFixed(2)}x  ${(ng / r.rate).toFixed(2)}x` +
      `  ${r.drafted ? `${((100 * r.accepted) / r.drafted).toFixed(0)}% of ${r.drafted}` : "-"}`);
  }
  console.log("(\"vs\": mashbox's median tok/s over llama-server's)");
}
if (Object.values(results).some((r) => !r.same)) process.exit(1);
