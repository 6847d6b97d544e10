// The host prompt cache over real HTTP: Health, /v1/models and /metrics report it, the usage
// fields of each API say what came from it, it outlives a worker killed by its pid, and a
// streamed request whose client hung up during prefill is resumed by the client's retry.
import { expect } from "chai";
import { existsSync } from "node:fs";
import type { EngineOptions } from "../../src/engine/engine.js";
import { startLiveServer, type LiveServer } from "../helpers/live.js";
import { postJson } from "../helpers/server.js";

const DEFAULT_MODEL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const CACHE_MIB = 64;

function serve(over: Partial<EngineOptions> = {}): Promise<LiveServer> {
  return startLiveServer({ ctx: 2048, model_id: "cache-model", engine_options: { cache_ram_mib: CACHE_MIB, ...over }, app: { cache_ram_mib: CACHE_MIB } });
}

const SYSTEM =
  "You are Keel, an agent that maintains a Rust workspace. Read the crate's Cargo.toml before touching it, run cargo test " +
  "after each edit, keep commits small, and answer with what you changed and why in at most three sentences.";
const TOOLS = ["cargo_test", "read_file", "apply_patch", "grep"].map((name) => ({
  type: "function",
  function: {
    name,
    description: `${name}: runs in the workspace root and returns its output as text.`,
    parameters: { type: "object", properties: { arg: { type: "string", description: "The argument, as the command line takes it." } }, required: ["arg"] },
  },
}));

const SAILING =
  "You are a terse sailing coach for dinghy and keelboat crews. Answer with the order of actions, name the lines and " +
  "fittings involved, warn about the one mistake beginners make, and never exceed four short sentences in total. " +
  "The crews you coach sail on a tidal estuary with strong gusts off the hills, shallow banks on the north shore and a " +
  "busy ferry lane in the middle; assume they wear buoyancy aids, carry a handheld VHF and know the basic knots already. " +
  "When a question is about racing, give the rule number from the Racing Rules of Sailing; when it is about weather, " +
  "say which forecast to check and the wind strength at which the crew should stay ashore instead of going out at all.";

type ChatBody = { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } }; timings: { cache_n: number; prompt_n: number }; choices: { message: { content: string | null } }[] };

async function chatTurn(url: string, messages: unknown[]): Promise<ChatBody> {
  const r = await postJson(`${url}/v1/chat/completions`, { model: "cache-model", messages, tools: TOOLS, max_tokens: 6, temperature: 0 });
  expect(r.status).to.equal(200);
  return (await r.json()) as ChatBody;
}

async function messagesTurn(url: string, system: string, messages: unknown[]) {
  const r = await postJson(`${url}/v1/messages`, { model: "cache-model", system, messages, max_tokens: 6, temperature: 0 });
  expect(r.status).to.equal(200);
  return (await r.json()) as { usage: { input_tokens: number; cache_read_input_tokens: number }; content: { type: string; text?: string }[] };
}

async function health(url: string) {
  const r = await fetch(`${url}/v1/health`);
  return (await r.json()) as Record<string, unknown> & {
    status: string;
    cache_bytes: number;
    host_cache_bytes: number;
    snapshot_bytes: number;
    host_cache_cap_bytes: number;
    host_cache_evictions: number;
    cache_namespace: string | null;
    worker_pid?: number;
    worker_restarts: number;
  };
}

describe("host prompt cache over HTTP", function () {
  this.timeout(180000);
  let s: LiveServer;
  before(async () => (s = await serve()));
  after(async () => s?.close());

  const a1: unknown[] = [{ role: "system", content: SYSTEM }, { role: "user", content: "cargo test fails in crates/io with a borrow error; why?" }];
  let a1Answer = "";

  it("Health and /v1/models describe the cache", async () => {
    const h = await health(s.url);
    expect(h.host_cache_cap_bytes).to.equal(CACHE_MIB * 1024 * 1024);
    expect(h.cache_namespace).to.match(/^[0-9a-f]{32}$/);
    expect(h.snapshot_bytes).to.equal(0);
    expect(h.cache_bytes).to.equal(h.host_cache_bytes + h.snapshot_bytes);
    const models = (await (await fetch(`${s.url}/v1/models`)).json()) as { data: { cache_ram_mib: number; prefix_cache: boolean }[] };
    expect(models.data[0].cache_ram_mib).to.equal(CACHE_MIB);
    expect(models.data[0].prefix_cache).to.equal(true);
  });

  it("usage says what a displaced conversation and a new session got from the cache (Chat Completions, Messages)", async () => {
    const first = await chatTurn(s.url, a1);
    a1Answer = first.choices[0].message.content ?? "";
    expect(first.usage.prompt_tokens_details.cached_tokens).to.equal(0);
    const other1 = await messagesTurn(s.url, SAILING, [{ role: "user", content: "How do I reef a mainsail in a gust?" }]);
    const otherText = other1.content.map((c) => c.text ?? "").join("");

    const a2 = await chatTurn(s.url, [...a1, { role: "assistant", content: a1Answer }, { role: "user", content: "Fix it." }]);
    const cached = a2.usage.prompt_tokens_details.cached_tokens;
    expect(cached / a2.usage.prompt_tokens, `${cached}/${a2.usage.prompt_tokens}`).to.be.at.least(0.9);
    expect(a2.timings.cache_n).to.equal(cached);
    expect(a2.timings.prompt_n).to.equal(a2.usage.prompt_tokens - cached);

    // the sailing conversation was displaced by A: it comes back from host memory
    const other2 = await messagesTurn(s.url, SAILING, [
      { role: "user", content: "How do I reef a mainsail in a gust?" },
      { role: "assistant", content: otherText.length > 0 ? otherText : "Ease the sheet." },
      { role: "user", content: "And the jib?" },
    ]);
    const total = other2.usage.input_tokens + other2.usage.cache_read_input_tokens;
    expect(other2.usage.cache_read_input_tokens / total, `${other2.usage.cache_read_input_tokens}/${total}`).to.be.at.least(0.9);

    // a new session of agent A restores A's system prompt and tools from its state point
    const fresh = await chatTurn(s.url, [{ role: "system", content: SYSTEM }, { role: "user", content: "Bump the MSRV to 1.80." }]);
    const fc = fresh.usage.prompt_tokens_details.cached_tokens;
    expect(fc / fresh.usage.prompt_tokens, `${fc}/${fresh.usage.prompt_tokens}`).to.be.at.least(0.85);

    const h = await health(s.url);
    expect(h.host_cache_bytes).to.be.greaterThan(0);
    expect(h.host_cache_bytes).to.be.at.most(h.host_cache_cap_bytes);
    expect(h.cache_bytes).to.equal(h.host_cache_bytes);
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    const metric = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(metrics)?.[1]);
    expect(metric("mashbox:host_cache_bytes")).to.equal(h.host_cache_bytes);
    expect(metric("mashbox:host_cache_cap_bytes")).to.equal(CACHE_MIB * 1024 * 1024);
    expect(metric("mashbox:host_cache_hits_total")).to.be.at.least(cached);
    expect(metric("mashbox:host_cache_evictions_total")).to.equal(0);
  });

  it("keeps its host cache when the worker is killed (Health worker_pid)", async () => {
    const before = await health(s.url);
    expect(before.worker_pid).to.be.a("number");
    expect(before.host_cache_bytes).to.be.greaterThan(0);
    process.kill(before.worker_pid!, "SIGKILL");
    const t0 = Date.now();
    let h = await health(s.url);
    while (!(h.status === "ok" && h.worker_pid !== before.worker_pid && h.host_cache_bytes > 0)) {
      if (Date.now() - t0 > 60000) throw new Error(`worker did not come back: ${JSON.stringify(h)}`);
      await new Promise((r) => setTimeout(r, 50));
      h = await health(s.url);
    }
    expect(h.worker_restarts).to.equal(before.worker_restarts + 1);
    expect(h.cache_namespace).to.equal(before.cache_namespace);
    expect(h.host_cache_bytes).to.equal(before.host_cache_bytes);
    // the new worker's empty slot is filled from the file the old one left
    const a2 = await chatTurn(s.url, [...a1, { role: "assistant", content: a1Answer }, { role: "user", content: "Fix it." }]);
    const cached = a2.usage.prompt_tokens_details.cached_tokens;
    expect(cached / a2.usage.prompt_tokens, `${cached}/${a2.usage.prompt_tokens}`).to.be.at.least(0.9);
  });
});

describe("a streamed request whose client hangs up during prefill", function () {
  // A prefill step of the default model can take many seconds on a busy 2-core machine.
  this.timeout(400000);

  it("is resumed by the client's retry: only the rest is prefilled", async function () {
    // The default model with small prefill chunks makes a prefill slow enough to hang up in.
    if (!existsSync(DEFAULT_MODEL)) this.skip();
    const s = await serve({ model_path: DEFAULT_MODEL, max_batch: 64 });
    try {
      const doc = Array.from({ length: 60 }, (_, i) => `Step ${i}: open the valve, wait for the gauge to settle, write down the pressure.`).join("\n");
      const body = { model: "cache-model", messages: [{ role: "user", content: `${doc}\nWhich step comes after step 3?` }], max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true } };
      const ac = new AbortController();
      const first = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: ac.signal });
      expect(first.status).to.equal(200);
      const t0 = Date.now();
      while (s.engine.stats().kv_tokens_used < 256) {
        if (Date.now() - t0 > 150000) throw new Error("prefill never got going");
        await new Promise((r) => setTimeout(r, 5));
      }
      ac.abort();
      await first.body?.cancel().catch(() => {});
      // the server notices the hang-up and cancels; the slot keeps what was computed
      const t1 = Date.now();
      while (s.engine.stats().slots_in_use > 0) {
        // the cancel takes effect when the prefill step under way ends
        if (Date.now() - t1 > 150000) throw new Error("the abandoned request kept running");
        await new Promise((r) => setTimeout(r, 5));
      }
      const retry = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      const text = await retry.text();
      const usageLine = text.split("\n").filter((l) => l.startsWith("data: {") && l.includes('"usage"') && l.includes('"prompt_tokens"')).pop();
      expect(usageLine, text).to.be.a("string");
      const chunk = JSON.parse(usageLine!.slice(6)) as { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } }; timings: { prompt_n: number; cache_n: number } };
      const cached = chunk.usage.prompt_tokens_details.cached_tokens;
      expect(cached).to.be.at.least(256);
      expect(chunk.timings.cache_n).to.equal(cached);
      expect(chunk.timings.prompt_n).to.equal(chunk.usage.prompt_tokens - cached);
      expect(chunk.timings.prompt_n).to.be.greaterThan(0); // it had really stopped halfway
    } finally {
      await s.close();
    }
  });
});
