// The host-memory prompt cache (--cache-ram) on a real engine: a displaced conversation comes
// back cached, a new session of the same agent starts from its state point, the cap holds under
// a stream of sessions, a state never crosses a namespace, the output is the same with the cache
// off, the cache outlives a killed worker, and a prefill a client gave up on is resumed.
import { expect } from "chai";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createEngine, type EngineOptions, type ManagedEngine } from "../../src/engine/engine.js";
import type { ChatPrompt, ChatTurn, GenerationEvent, GenerationRequest, ToolSpec } from "../../src/engine/types.js";

const FIXTURE = "test/fixtures/llama-q8_0.gguf";
const OTHER_FIXTURE = "test/fixtures/llama-q4_0.gguf"; // same shapes, other weights
const DEFAULT_MODEL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const MODEL = existsSync(FIXTURE) ? FIXTURE : DEFAULT_MODEL;

const GREEDY = { temperature: 0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 };
let seq = 0;

// An agent's system prompt and tools: a few hundred tokens that every session of it starts with.
const AGENT_SYSTEM =
  "You are Lathe, a coding agent working in the user's repository. Read files before you change them, keep edits small, " +
  "run the tests after every change and report what you did in two sentences. Never invent file names; ask when unsure. " +
  "Prefer the project's own scripts over ad-hoc commands, and explain any command that deletes data before running it.";
const AGENT_TOOLS: ToolSpec[] = ["read_file", "write_file", "run_tests", "search_code", "list_directory"].map((name, i) => ({
  kind: "function",
  name,
  description: `Tool ${i}: ${name.replace("_", " ")} in the working tree. Returns text; errors come back as a message that starts with ERROR.`,
  parameters: {
    type: "object",
    properties: { path: { type: "string", description: "Path relative to the repository root." }, limit: { type: "integer", description: "Most lines to return." } },
    required: ["path"],
  },
}));

function chat(turns: ChatTurn[], system = [AGENT_SYSTEM], tools = AGENT_TOOLS): GenerationRequest {
  const c: ChatPrompt = { system, turns, tools, tool_choice: { type: "auto" } };
  return { id: `pc-${++seq}`, input: { kind: "chat", chat: c }, sampling: GREEDY, max_tokens: 8, stop: [] };
}

function text(t: string, max_tokens = 8): GenerationRequest {
  return { id: `pc-${++seq}`, input: { kind: "text", text: t }, sampling: GREEDY, max_tokens, stop: [] };
}

async function run(engine: ManagedEngine, req: GenerationRequest, signal?: AbortSignal, onEvent?: (e: GenerationEvent) => void) {
  let out = "";
  let done: Extract<GenerationEvent, { type: "done" }> | undefined;
  for await (const e of engine.submit(req, signal)) {
    onEvent?.(e);
    if (e.type === "text") out += e.text;
    if (e.type === "done") done = e;
    if (e.type === "error") throw new Error(`${e.code}: ${e.message}`);
  }
  if (!done) throw new Error("no done event");
  return { text: out, done, cached: done.usage.cached_tokens, prompt: done.usage.prompt_tokens };
}

function open(over: Partial<EngineOptions> = {}): ManagedEngine {
  return createEngine({ model_path: MODEL, model_id: "pc", n_ctx: 2048, n_slots: 1, n_threads: 1, cache_ram_mib: 64, ...over });
}

const UNRELATED = (i: number) => chat([{ role: "user", content: `Unrelated chat ${i}: list three birds that live near rivers and say why.` }], [`You are a terse birdwatching guide number ${i}.`], []);

/** The session script every engine here runs: A, someone else, A again, then a new A session. */
async function agentScript(engine: ManagedEngine) {
  const a1turns: ChatTurn[] = [{ role: "user", content: "The build fails in src/parser.ts with 'unexpected token'. Find out why." }];
  const a1 = await run(engine, chat(a1turns));
  const other = await run(engine, UNRELATED(1));
  const a2turns: ChatTurn[] = [...a1turns, { role: "assistant", content: a1.text }, { role: "user", content: "Now fix it." }];
  const a2 = await run(engine, chat(a2turns));
  await run(engine, UNRELATED(2));
  const fresh = await run(engine, chat([{ role: "user", content: "Add a --verbose flag to the CLI." }]));
  return { a1, other, a2, fresh };
}

describe("host prompt cache (engine)", function () {
  // The cancelled-prefill case runs the default model, whose prefill steps crawl on a busy machine.
  this.timeout(400000);
  const tmp = mkdtempSync(join(tmpdir(), "mb-pc-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  let cachedRun: Awaited<ReturnType<typeof agentScript>>;

  it("one slot: a displaced conversation comes back >= 90% cached; a new session of the same agent >= 85%", async () => {
    const engine = open();
    try {
      await engine.ready();
      cachedRun = await agentScript(engine);
      const { a1, other, a2, fresh } = cachedRun;
      expect(a1.cached).to.equal(0);
      expect(other.cached).to.be.lessThan(other.prompt * 0.2);
      expect(a2.cached / a2.prompt, `A's next turn: ${a2.cached}/${a2.prompt}`).to.be.at.least(0.9);
      expect(fresh.cached / fresh.prompt, `new session: ${fresh.cached}/${fresh.prompt}`).to.be.at.least(0.85);
      // usage and timings agree on what was served from the cache
      expect(a2.done.timings.cache_n).to.equal(a2.cached);
      expect(a2.done.timings.prompt_n).to.equal(a2.prompt - a2.cached);
      const s = engine.stats();
      expect(s.host_cache_bytes).to.be.greaterThan(0);
      expect(s.host_cache_bytes).to.be.at.most(s.host_cache_cap_bytes!);
      expect(s.host_cache_cap_bytes).to.equal(64 * 1024 * 1024);
      expect(s.host_cache_restored_tokens).to.be.at.least(a2.cached);
      expect(s.cache_namespace).to.match(/^[0-9a-f]{32}$/);
    } finally {
      await engine.close();
    }
  });

  it("greedy output is identical with the cache on and off", async function () {
    if (!cachedRun) this.skip();
    const engine = open({ cache_ram_mib: 0 });
    try {
      await engine.ready();
      const plain = await agentScript(engine);
      expect(plain.a2.cached, "without the cache one slot cannot keep A").to.be.lessThan(plain.a2.prompt * 0.5);
      expect(plain.fresh.cached).to.be.lessThan(plain.fresh.prompt * 0.5);
      expect(engine.stats().host_cache_bytes).to.equal(0);
      expect(engine.stats().cache_namespace).to.equal(null);
      for (const k of ["a1", "other", "a2", "fresh"] as const) expect(cachedRun[k].text, k).to.equal(plain[k].text);
    } finally {
      await engine.close();
    }
  });

  it("stays under its cap through a stream of distinct sessions, counting evictions", async () => {
    // 1 MiB holds ~15 blocks of 64 tokens of this model's K/V: a few sessions' worth.
    const engine = open({ cache_ram_mib: 1 });
    try {
      await engine.ready();
      const cap = 1024 * 1024;
      let last: Awaited<ReturnType<typeof run>> | null = null;
      const sessions: GenerationRequest[] = [];
      for (let i = 0; i < 10; i++) {
        const req = chat([{ role: "user", content: `Session ${i}: summarise chapter ${i} of the design notes in a sentence.` }], [`Session ${i} guide. ${"Context line for this session only. ".repeat(12)}`], []);
        sessions.push(req);
        last = await run(engine, req);
        const s = engine.stats();
        expect(s.host_cache_bytes).to.be.at.most(cap);
      }
      expect(last!.cached).to.be.lessThan(last!.prompt * 0.2);
      const s = engine.stats();
      expect(s.host_cache_evictions).to.be.greaterThan(0);
      expect(s.host_cache_bytes).to.be.greaterThan(cap / 2);
      // The most recent displaced session is still there; the first one lost blocks (its tail
      // goes first: a block is evicted only after the blocks below it).
      await run(engine, UNRELATED(3));
      const recent = await run(engine, { ...sessions[9], id: `pc-${++seq}` });
      expect(recent.cached / recent.prompt).to.be.at.least(0.9);
      const oldest = await run(engine, { ...sessions[0], id: `pc-${++seq}` });
      expect(oldest.cached / oldest.prompt).to.be.lessThan(0.9);
    } finally {
      await engine.close();
    }
  });

  it("never restores a state under another chat template or model (namespace)", async function () {
    if (!existsSync(FIXTURE) || !existsSync(OTHER_FIXTURE)) this.skip();
    const cache_path = join(tmp, "shared-cache");
    const model = join(tmp, "model.gguf");
    copyFileSync(FIXTURE, model);
    const { mtime } = statSync(model);
    const original = readFileSync(model);
    // The same file with one character of its chat template changed (same length, same mtime):
    // only the template differs.
    const at = original.indexOf(Buffer.from("<|im_start|>"));
    expect(at).to.be.greaterThan(0);
    const edited = Buffer.from(original);
    edited[at + 2] = "M".charCodeAt(0);
    const req = () => chat([{ role: "user", content: "Check the namespace." }]);
    const once = async (path: string, bytes?: Buffer) => {
      if (bytes) {
        writeFileSync(model, bytes);
        utimesSync(model, mtime, mtime);
      }
      const engine = open({ model_path: path, cache_path });
      try {
        await engine.ready();
        const r = await run(engine, req());
        await run(engine, UNRELATED(4)); // displaces r into the host cache
        return { r, ns: engine.stats().cache_namespace };
      } finally {
        await engine.close();
      }
    };
    const first = await once(model);
    expect(first.r.cached).to.equal(0);
    const again = await once(model); // a new engine, same namespace: the file's states are used
    expect(again.ns).to.equal(first.ns);
    expect(again.r.cached / again.r.prompt).to.be.at.least(0.9);
    const template = await once(model, edited);
    expect(template.ns).to.not.equal(first.ns);
    expect(template.r.cached).to.equal(0);
    const other = await once(OTHER_FIXTURE);
    expect(other.ns).to.not.equal(first.ns);
    expect(other.r.cached).to.equal(0);
  });

  it("comes back with its host cache after the worker is killed mid-run", async () => {
    const engine = open();
    try {
      await engine.ready();
      const a1turns: ChatTurn[] = [{ role: "user", content: "Why does the release script skip the changelog?" }];
      const a1 = await run(engine, chat(a1turns));
      await run(engine, UNRELATED(5)); // A goes to the host cache
      const before = engine.stats();
      expect(before.host_cache_bytes).to.be.greaterThan(0);
      const pid = before.worker_pid!;
      // kill it while a request runs: that request (whole: its caller has seen nothing) is sent
      // again on the new worker
      let killed = false;
      const midRun = run(engine, { ...text("Count slowly from one to a hundred: one, two, three,", 200), whole: true }, undefined, (e) => {
        if (e.type === "start" && !killed) {
          killed = true;
          process.kill(pid, "SIGKILL");
        }
      });
      await midRun;
      expect(killed).to.equal(true);
      expect(engine.stats().worker_restarts).to.equal(before.worker_restarts + 1);
      expect(engine.stats().worker_pid).to.not.equal(pid);
      expect(engine.stats().host_cache_bytes).to.be.greaterThan(0);
      expect(engine.stats().cache_namespace).to.equal(before.cache_namespace);
      const a2 = await run(engine, chat([...a1turns, { role: "assistant", content: a1.text }, { role: "user", content: "Fix it." }]));
      expect(a2.cached / a2.prompt, `${a2.cached}/${a2.prompt}`).to.be.at.least(0.9);
    } finally {
      await engine.close();
    }
  });

  it("a prefill cancelled halfway resumes where it stopped when the same prompt comes again", async function () {
    // The default model with small prefill chunks: a prefill long enough to leave it halfway.
    if (!existsSync(DEFAULT_MODEL)) this.skip();
    const engine = open({ model_path: DEFAULT_MODEL, max_batch: 64 });
    try {
      await engine.ready();
      const prompt = Array.from({ length: 70 }, (_, i) => `Line ${i}: the quick brown fox jumps over the lazy dog.`).join("\n");
      const ac = new AbortController();
      const first = run(engine, text(prompt, 4), ac.signal);
      const t0 = Date.now();
      while (engine.stats().kv_tokens_used < 256) {
        if (Date.now() - t0 > 150000) throw new Error("prefill never got going");
        await new Promise((r) => setTimeout(r, 2));
      }
      ac.abort();
      const cancelled = await first;
      expect(cancelled.done.finish_reason).to.equal("cancelled");
      // someone else takes the only slot meanwhile: the work survives in the host cache
      await run(engine, UNRELATED(6));
      const retry = await run(engine, text(prompt, 4));
      expect(retry.cached).to.be.at.least(256);
      expect(retry.cached).to.be.lessThan(retry.prompt - 1);
      expect(retry.done.timings.prompt_n).to.equal(retry.prompt - retry.cached);
    } finally {
      await engine.close();
    }
  });
});
