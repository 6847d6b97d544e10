#!/usr/bin/env node
// Soak (not in CI): N streaming clients for M minutes, each sending chat completions back to
// back. Prints one JSON line per RSS sample while it runs, then a summary: p50/p99 time to first
// token, aggregate generated tok/s, errors and refusals, the RSS series of the server and its
// worker, and whether each stayed flat after warm-up (a leak shows as RSS that keeps climbing
// instead of levelling off). The machine's load average at start and end is part of the record:
// numbers from a busy machine are not the server's.
//
//   node bench/soak.mjs [--minutes 20] [--clients 8] [--max-tokens 128] [--sample-s 15]
//                       [--model smollm2-135m] [--slots 4] [--ctx 4096] [--threads N] [--cache-ram MiB]
//   node bench/soak.mjs --url http://127.0.0.1:8000 [--pid SERVER_PID] [--key KEY] ...
//
// Without --url it starts `mashbox run` itself on the default model (port chosen by the OS) with
// a key file that gives each client a tenant of its own, so 64 clients never meet the per-tenant
// limit of 32 waiting, and stops it at the end; the server's pid is then known. With --url it
// soaks a running server; its RSS is sampled only with --pid. The worker's pid comes from Health
// at every sample, so a restarted worker is followed (and counted in worker_restarts).
//
// bin/mashbox.js runs dist/ when it exists: `npm run build` first, so the soak runs this checkout.
// The note's runs: `--minutes 20 --clients 8` and `--clients 64` (on a quiet machine).
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values: o } = parseArgs({
  options: {
    url: { type: "string" },
    pid: { type: "string" },
    key: { type: "string", default: process.env.MASHBOX_API_KEY },
    minutes: { type: "string", default: "20" },
    clients: { type: "string", default: "8" },
    "max-tokens": { type: "string", default: "128" },
    "sample-s": { type: "string", default: "15" },
    model: { type: "string", default: "smollm2-135m" },
    slots: { type: "string", default: "4" },
    ctx: { type: "string", default: "4096" },
    threads: { type: "string" },
    "cache-ram": { type: "string" },
  },
});
const CLIENTS = Number(o.clients);
const MINUTES = Number(o.minutes);
const MAX_TOKENS = Number(o["max-tokens"]);
const SAMPLE_MS = Number(o["sample-s"]) * 1000;
if (!(CLIENTS >= 1 && MINUTES > 0 && MAX_TOKENS >= 1 && SAMPLE_MS > 0)) {
  console.error("soak: --clients, --minutes, --max-tokens and --sample-s must be positive numbers");
  process.exit(2);
}

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

const load = () => loadavg().map((x) => +x.toFixed(2));

/** `mashbox run` on a free port, keys one per client (each its own tenant); resolves once Health is ok. */
async function startServer(dir) {
  const keys = Array.from({ length: CLIENTS }, (_, i) => `sk-soak-${i}`);
  const keyFile = join(dir, "keys");
  writeFileSync(keyFile, keys.map((k, i) => `${k} client${i}`).join("\n") + "\n");
  const args = ["bin/mashbox.js", "run", o.model, "--port", "0", "--slots", o.slots, "--ctx", o.ctx, "--api-key-file", keyFile];
  if (o.threads) args.push("--threads", o.threads);
  if (o["cache-ram"]) args.push("--cache-ram", o["cache-ram"]);
  const child = spawn(process.execPath, args, { stdio: ["ignore", "ignore", "pipe"] });
  // The server logs every request; only the tail is kept (for the message if it dies).
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-65536)));
  const exited = new Promise((r) => child.once("exit", (code, sig) => r(`exited ${code ?? sig}`)));
  const deadline = Date.now() + 10 * 60_000; // a first run pulls the model
  let url = null;
  for (;;) {
    url ??= /listening on (http:\/\/\S+)/.exec(stderr)?.[1] ?? null;
    if (url) {
      const h = await fetch(`${url}/v1/health`, { headers: { authorization: `Bearer ${keys[0]}` } }).then((r) => r.json(), () => null);
      if (h?.status === "ok") break;
    }
    const gone = await Promise.race([exited, new Promise((r) => setTimeout(() => r(null), 200))]);
    if (gone || Date.now() > deadline) throw new Error(`mashbox run ${gone ?? "did not get ready in 10 minutes"}:\n${stderr}`);
  }
  return { url, pid: child.pid, keys, stop: () => child.kill("SIGTERM"), exited };
}

/** Least-squares slope of y over x. */
function slope(xs, ys) {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (ys[i] - my);
    den += (xs[i] - mx) ** 2;
  }
  return den > 0 ? num / den : 0;
}

/**
 * Whether a series levelled off: after the first quarter of the run (warm-up: allocator pools,
 * the prompt cache filling), the fitted growth over the rest stays under max(16 MiB, 3 %).
 */
function trend(samples, pick) {
  const pts = samples.map((s) => [s.t_s / 60, pick(s)]).filter(([, v]) => Number.isFinite(v));
  if (pts.length < 2) return null;
  const t_end = pts.at(-1)[0];
  const tail = pts.filter(([t]) => t >= t_end / 4);
  const use = tail.length >= 2 ? tail : pts;
  const per_min = slope(use.map(([t]) => t), use.map(([, v]) => v));
  const growth = per_min * (use.at(-1)[0] - use[0][0]);
  const level = use.reduce((a, [, v]) => a + v, 0) / use.length;
  const mib = (x) => +x.toFixed(1);
  return {
    first_mib: mib(pts[0][1]),
    after_warmup_mib: mib(use[0][1]),
    last_mib: mib(pts.at(-1)[1]),
    max_mib: mib(Math.max(...pts.map(([, v]) => v))),
    slope_mib_per_min: +per_min.toFixed(2),
    flat: growth <= Math.max(16, 0.03 * level),
  };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

async function main() {
  const dir = mkdtempSync(join(tmpdir(), "mb-soak-"));
  let server = null;
  try {
    let url = o.url;
    let serverPid = o.pid ? Number(o.pid) : null;
    let keyOf = () => o.key;
    if (!url) {
      server = await startServer(dir);
      url = server.url;
      serverPid = server.pid;
      keyOf = (i) => server.keys[i];
    }
    const auth = (i) => (keyOf(i) ? { authorization: `Bearer ${keyOf(i)}` } : {});
    const health = () => fetch(`${url}/v1/health`, { headers: auth(0) }).then((r) => r.json());

    const ttfts = [];
    let tokens = 0;
    let requests = 0;
    let errors = 0;
    let refused = 0;
    const load_start = load();
    const start = Date.now();
    const END = start + MINUTES * 60_000;

    async function oneRequest(client, n) {
      const t0 = performance.now();
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...auth(client) },
        body: JSON.stringify({
          messages: [{ role: "user", content: `Tell me a story about ${TOPICS[(client + n) % TOPICS.length]} (${client}.${n}).` }],
          stream: true,
          max_tokens: MAX_TOKENS,
          temperature: 0.8,
          seed: client * 100_000 + n,
        }),
      });
      if (res.status !== 200) {
        if (res.status === 429) refused++;
        else errors++;
        await res.text();
        if (res.status === 429) await new Promise((r) => setTimeout(r, 1000 * Number(res.headers.get("retry-after") ?? 1)));
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

    const samples = [];
    // The worker's RSS includes the prompt cache's shared pages, which grow (by design) up to
    // --cache-ram; its anonymous memory and the cache's own size (Health) tell the two apart.
    const sample = async () => {
      const h = await health().catch(() => ({}));
      const s = {
        t_s: Math.round((Date.now() - start) / 1000),
        server: serverPid ? rss(serverPid) : null,
        worker: h.worker_pid ? rss(h.worker_pid) : null,
        cache_mib: +((h.cache_bytes ?? NaN) / 2 ** 20).toFixed(1),
        requests,
        tokens,
        load1: load()[0],
      };
      samples.push(s);
      console.log(JSON.stringify(s));
    };
    await sample();
    const timer = setInterval(sample, SAMPLE_MS);
    await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)));
    clearInterval(timer);
    await sample();
    const secs = (Date.now() - start) / 1000;
    const h = await health().catch(() => ({}));
    console.log(
      JSON.stringify({
        clients: CLIENTS,
        minutes: MINUTES,
        max_tokens: MAX_TOKENS,
        model: o.url ? null : o.model,
        slots: o.url ? null : Number(o.slots),
        seconds: +secs.toFixed(1),
        requests,
        errors,
        refused_429: refused,
        ttft_p50_ms: +pct(ttfts, 50).toFixed(1),
        ttft_p99_ms: +pct(ttfts, 99).toFixed(1),
        generated_tokens: tokens,
        aggregate_tok_s: +(tokens / secs).toFixed(1),
        loadavg_start: load_start,
        loadavg_end: load(),
        server_rss: trend(samples, (s) => s.server?.rss),
        // The prompt cache's pages (shmem) grow by design up to --cache-ram: the leak check is
        // the worker without them.
        worker_rss: trend(samples, (s) => s.worker?.rss),
        worker_rss_without_cache: trend(samples, (s) => (s.worker ? s.worker.rss - s.worker.shmem : NaN)),
        server_rss_mib: samples.map((s) => s.server?.rss ?? null),
        worker_rss_mib: samples.map((s) => s.worker?.rss ?? null),
        worker_anon_mib: samples.map((s) => s.worker?.anon ?? null),
        worker_shmem_mib: samples.map((s) => s.worker?.shmem ?? null),
        cache_mib: samples.map((s) => s.cache_mib),
        worker_restarts: h.worker_restarts ?? null,
      }),
    );
  } finally {
    if (server) {
      server.stop();
      await server.exited;
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
