#!/usr/bin/env node
// Soak: N streaming clients for M minutes against a running server (not in CI). Each client sends
// chat completions back to back; at the end it prints p50/p99 time to first token, aggregate
// generated tok/s, errors, and the RSS samples of the server and its worker, so a leak shows as
// RSS that keeps climbing instead of levelling off.
//   node bench/soak.mjs [--url http://127.0.0.1:8000] [--clients 8] [--minutes 2]
//                       [--max-tokens 128] [--pid SERVER_PID] [--key API_KEY] [--sample-s 10]
// The worker's pid comes from /v1/health; the server's (for its RSS) from --pid, when given.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const { values: o } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8000" },
    clients: { type: "string", default: "8" },
    minutes: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "128" },
    pid: { type: "string" },
    key: { type: "string", default: process.env.MASHBOX_API_KEY },
    "sample-s": { type: "string", default: "10" },
  },
});
const CLIENTS = Number(o.clients);
const END = Date.now() + Number(o.minutes) * 60_000;
const MAX_TOKENS = Number(o["max-tokens"]);
const auth = o.key ? { authorization: `Bearer ${o.key}` } : {};

const TOPICS = ["a lighthouse keeper", "the history of bread", "a robot learning to paint", "rivers", "a chess game", "the moon", "a small town bakery", "winter in the mountains"];

/** MiB of a process's resident memory: all, anonymous, and shared (the prompt cache's /dev/shm file). */
function rss(pid) {
  let st = "";
  try {
    st = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return null;
  }
  const mib = (field) => +(Number(new RegExp(`${field}:\\s+(\\d+)`).exec(st)?.[1] ?? NaN) / 1024).toFixed(1);
  return { rss: mib("VmRSS"), anon: mib("RssAnon"), shmem: mib("RssShmem") };
}

async function health() {
  const r = await fetch(`${o.url}/v1/health`, { headers: auth });
  return r.json();
}

const ttfts = [];
let tokens = 0;
let requests = 0;
let errors = 0;

async function oneRequest(client, n) {
  const t0 = performance.now();
  const res = await fetch(`${o.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...auth },
    body: JSON.stringify({
      messages: [{ role: "user", content: `Tell me a story about ${TOPICS[(client + n) % TOPICS.length]} (${client}.${n}).` }],
      stream: true,
      max_tokens: MAX_TOKENS,
      temperature: 0.8,
      seed: client * 100_000 + n,
    }),
  });
  if (res.status !== 200) {
    errors++;
    await res.text();
    return;
  }
  const dec = new TextDecoder();
  let buf = "";
  let first = true;
  let predicted = 0;
  let deltas = 0;
  let failed = false;
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const line = buf.slice(0, i).split("\n").find((l) => l.startsWith("data: "));
      buf = buf.slice(i + 2);
      if (!line || line === "data: [DONE]") continue;
      const j = JSON.parse(line.slice(6));
      if (j.error) failed = true;
      const c = j.choices?.[0];
      if (c?.delta?.content) {
        deltas++;
        if (first) {
          ttfts.push(performance.now() - t0);
          first = false;
        }
      }
      if (j.timings?.predicted_n) predicted = j.timings.predicted_n;
    }
  }
  if (failed) errors++;
  tokens += predicted || deltas;
  requests++;
}

async function client(i) {
  for (let n = 0; Date.now() < END; n++) {
    try {
      await oneRequest(i, n);
    } catch (e) {
      errors++;
      console.error(`client ${i}: ${e.message}`);
    }
  }
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

async function main() {
  const h = await health();
  const workerPid = h.worker_pid;
  const serverPid = o.pid ? Number(o.pid) : null;
  const samples = [];
  // The worker's RSS includes the prompt cache's shared pages, which grow (by design) up to
  // --cache-ram; the cache's own size comes from Health so the two can be told apart.
  const sample = async () => {
    const cache_mib = +(((await health().catch(() => ({}))).cache_bytes ?? NaN) / 2 ** 20).toFixed(1);
    const s = { t_s: Math.round((Date.now() - start) / 1000), server: serverPid ? rss(serverPid) : null, worker: workerPid ? rss(workerPid) : null, cache_mib, requests, tokens };
    samples.push(s);
    console.log(JSON.stringify(s));
  };
  const start = Date.now();
  await sample();
  const timer = setInterval(sample, Number(o["sample-s"]) * 1000);
  await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)));
  clearInterval(timer);
  await sample();
  const secs = (Date.now() - start) / 1000;
  console.log(
    JSON.stringify({
      clients: CLIENTS,
      seconds: +secs.toFixed(1),
      requests,
      errors,
      ttft_p50_ms: +pct(ttfts, 50).toFixed(1),
      ttft_p99_ms: +pct(ttfts, 99).toFixed(1),
      generated_tokens: tokens,
      aggregate_tok_s: +(tokens / secs).toFixed(1),
      server_rss_mib: samples.map((s) => s.server?.rss ?? null),
      worker_rss_mib: samples.map((s) => s.worker?.rss ?? null),
      worker_anon_mib: samples.map((s) => s.worker?.anon ?? null),
      cache_mib: samples.map((s) => s.cache_mib),
      worker_restarts: (await health()).worker_restarts,
    }),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
