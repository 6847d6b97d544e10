// The engine end to end on a real model in a real worker process: determinism, seeded sampling,
// continuous batching, prefix reuse, cancel, stop strings, max_tokens, queue limits, restart.
// Exact output is scripted with a one-literal grammar (the real constrained decoder); a crash is
// the worker killed by its pid, as Health reports it.
import { expect } from "chai";
import { existsSync } from "node:fs";
import { setMaxListeners } from "node:events";
import { createEngine, type EngineOptions, type ManagedEngine } from "../../src/engine/engine.js";
import type { GenerationEvent, GenerationRequest } from "../../src/engine/types.js";
import { ApiError } from "../../src/errors.js";
import { literalGrammar } from "../helpers/script.js";

const FIXTURE = "test/fixtures/llama-q8_0.gguf";
const DEFAULT_MODEL = (process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`);
const MODEL = existsSync(FIXTURE) ? FIXTURE : DEFAULT_MODEL;

let seq = 0;
function textReq(text: string, over: Partial<GenerationRequest> = {}): GenerationRequest {
  return {
    id: `req-${++seq}`,
    input: { kind: "text", text },
    sampling: { temperature: 0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 },
    max_tokens: 16,
    stop: [],
    ...over,
  };
}

async function collect(it: AsyncIterable<GenerationEvent>, onEvent?: (e: GenerationEvent) => void) {
  const events: GenerationEvent[] = [];
  for await (const e of it) {
    events.push(e);
    onEvent?.(e);
  }
  const text = events.map((e) => (e.type === "text" ? e.text : "")).join("");
  const done = events.find((e) => e.type === "done") as Extract<GenerationEvent, { type: "done" }> | undefined;
  const error = events.find((e) => e.type === "error") as Extract<GenerationEvent, { type: "error" }> | undefined;
  return { events, text, done, error };
}

/** An engine on the test model with one slot and one thread, in a worker of its own. */
function oneSlotEngine(over: Partial<EngineOptions> = {}): ManagedEngine {
  return createEngine({ model_path: MODEL, model_id: "test", n_ctx: 4096, n_slots: 1, n_threads: 1, ...over });
}

async function until(cond: () => boolean, ms = 20000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error("timed out waiting for condition");
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("engine (worker + native scheduler)", function () {
  this.timeout(120000);
  let engine: ManagedEngine;

  before(async () => {
    engine = createEngine({ model_path: MODEL, model_id: "test", n_ctx: 256, n_slots: 4, n_threads: 1 });
    expect(engine.state).to.equal("loading");
    expect(() => engine.submit(textReq("hi"))).to.throw(ApiError).with.property("code", "loading");
    await engine.ready();
    expect(engine.state).to.equal("ready");
  });
  after(async () => engine?.close());

  it("reports the model", () => {
    expect(engine.model.architecture).to.equal("llama");
    expect(engine.model.n_vocab).to.equal(49152);
    expect(engine.model.chat_template).to.be.a("string");
    expect(engine.model.bpw).to.be.greaterThan(1);
    expect(engine.stats().worker_pid).to.be.a("number");
  });

  it("greedy decoding is deterministic and counts usage", async () => {
    const a = await collect(engine.submit(textReq("The capital of France is", { max_tokens: 12 })));
    const b = await collect(engine.submit(textReq("The capital of France is", { max_tokens: 12 })));
    expect(a.done!.finish_reason).to.equal("length");
    expect(a.done!.usage.completion_tokens).to.equal(12);
    expect(a.text.length).to.be.greaterThan(0);
    expect(b.text).to.equal(a.text);
    const n = await engine.countTokens({ kind: "text", text: "The capital of France is" });
    expect(a.done!.usage.prompt_tokens).to.equal(n);
    expect(a.events[0]).to.deep.include({ type: "start", prompt_tokens: n });
    expect(a.done!.timings.predicted_n).to.equal(12);
    expect(a.done!.timings.prompt_n + a.done!.timings.cache_n).to.equal(n);
  });

  it("seeded sampling reproduces; another seed differs", async () => {
    const req = (seed: number) =>
      textReq("Once upon a time", { max_tokens: 24, sampling: { temperature: 1.0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0, seed } });
    const a = await collect(engine.submit(req(1234)));
    const b = await collect(engine.submit(req(1234)));
    const c = await collect(engine.submit(req(999)));
    expect(b.text).to.equal(a.text);
    expect(c.text).to.not.equal(a.text);
  });

  it("concurrent requests give the same greedy output as alone", async () => {
    const prompts = ["alpha beta gamma", "Hello, my name is", "1 2 3 4 5 6 7", "The weather today is very", "A B C"];
    const alone: string[] = [];
    for (const p of prompts) alone.push((await collect(engine.submit(textReq(p + " x", { max_tokens: 20 })))).text);
    // 5 requests on 4 slots: batching, queueing and a slot handover all happen.
    const together = await Promise.all(prompts.map((p) => collect(engine.submit(textReq(p + " x", { max_tokens: 20 })))));
    expect(together.map((r) => r.text)).to.deep.equal(alone);
  });

  it("reuses a cached prompt prefix", async () => {
    const base = "In a hole in the ground there lived a hobbit. Not a nasty, dirty, wet hole.";
    const before = engine.stats();
    await collect(engine.submit(textReq(base, { max_tokens: 2 })));
    const r = await collect(engine.submit(textReq(base + " Nor yet a dry, bare, sandy hole", { max_tokens: 2 })));
    const start = r.events[0] as Extract<GenerationEvent, { type: "start" }>;
    const nBase = await engine.countTokens({ kind: "text", text: base });
    expect(start.cached_tokens).to.be.at.least(nBase - 1);
    expect(r.done!.usage.cached_tokens).to.equal(start.cached_tokens);
    expect(r.done!.timings.prompt_n).to.equal(r.done!.usage.prompt_tokens - start.cached_tokens);
    const after = engine.stats();
    expect(after.prefix_lookups).to.be.greaterThan(before.prefix_lookups);
    expect(after.prefix_hit_tokens - before.prefix_hit_tokens).to.be.at.least(nBase - 1);
  });

  it("copies a shared prefix from a running request's slot", async () => {
    // text no earlier test used, so no idle slot holds it: only the running request can lend it
    const sys = "You are a careful lighthouse keeper. Answer in one short sentence and never use lists. ".repeat(3);
    const q = sys + "Question: what colour is the sky?";
    const ac = new AbortController();
    let texts = 0;
    let release!: () => void;
    const running = new Promise<void>((r) => (release = r));
    const other = collect(engine.submit(textReq(sys + "Tell me a long story", { max_tokens: 200 }), ac.signal), (e) => {
      if (e.type === "text" && ++texts === 1) release();
    });
    await running;
    const r = await collect(engine.submit(textReq(q, { max_tokens: 8 })));
    ac.abort();
    await other;
    const nSys = await engine.countTokens({ kind: "text", text: sys });
    expect((r.events[0] as Extract<GenerationEvent, { type: "start" }>).cached_tokens).to.be.at.least(nSys - 1);
    // the copied K/V gives the same answer as computing the prompt from scratch
    const fresh = createEngine({ model_path: MODEL, model_id: "fresh", n_ctx: 256, n_slots: 1, n_threads: 1 });
    await fresh.ready();
    const alone = await collect(fresh.submit(textReq(q, { max_tokens: 8 })));
    await fresh.close();
    expect(alone.done!.usage.cached_tokens).to.equal(0);
    expect(r.text).to.equal(alone.text);
  });

  it("abort cancels in native and frees the slot", async () => {
    const ac = new AbortController();
    let texts = 0;
    const r = await collect(engine.submit(textReq("Count with me:", { max_tokens: null }), ac.signal), (e) => {
      if (e.type === "text" && ++texts === 3) ac.abort();
    });
    expect(r.done!.finish_reason).to.equal("cancelled");
    await until(() => engine.stats().slots_in_use === 0);
    expect(engine.stats().waiting).to.equal(0);
  });

  it("matches stop strings across token boundaries and never emits past them", async () => {
    const script = "Hello there, general Kenobi. You are a bold one.";
    const r = await collect(engine.submit(textReq("x", { grammar: literalGrammar(script), stop: ["ral Ken", "zzz"], max_tokens: 100 })));
    expect(r.text).to.equal("Hello there, gene");
    expect(r.done!.finish_reason).to.equal("stop_sequence");
    expect(r.done!.stop_sequence).to.equal("ral Ken");
    // without a stop the whole script comes back through the real detokenizer
    const full = await collect(engine.submit(textReq("x", { grammar: literalGrammar(script), max_tokens: 100 })));
    expect(full.text).to.equal(script);
    expect(full.done!.finish_reason).to.equal("stop");
    // a held-back partial match is released when the generation ends without matching
    const tail = await collect(engine.submit(textReq("x", { grammar: literalGrammar("ends with ral K"), stop: ["ral Ken"], max_tokens: 100 })));
    expect(tail.text).to.equal("ends with ral K");
  });

  it("stops at max_tokens with finish length", async () => {
    const script = "one two three four five six";
    const r = await collect(engine.submit(textReq("x", { grammar: literalGrammar(script), max_tokens: 3 })));
    expect(r.done!.finish_reason).to.equal("length");
    expect(r.done!.usage.completion_tokens).to.equal(3);
    expect(r.text.length).to.be.greaterThan(0);
    expect(script.startsWith(r.text)).to.equal(true);
  });

  it("chat: template, thinking and tool calls through the output parser", async () => {
    const chat = {
      system: ["Be brief."],
      turns: [{ role: "user" as const, content: "Weather in Paris?" }],
      tools: [{ name: "get_weather", kind: "function" as const, parameters: { type: "object", properties: { city: { type: "string" } } } }],
      tool_choice: { type: "auto" as const },
    };
    const base = textReq("", { max_tokens: 200 });
    const think = await collect(engine.submit({ ...base, input: { kind: "chat", chat }, grammar: literalGrammar("<think>let me see</think>Sunny.") }));
    expect(think.events.filter((e) => e.type === "thinking").map((e) => (e as { text: string }).text).join("")).to.equal("let me see");
    expect(think.text).to.equal("Sunny.");
    expect(think.done!.finish_reason).to.equal("stop");
    expect(think.done!.usage.reasoning_tokens).to.be.greaterThan(0);
    expect(think.done!.usage.prompt_tokens).to.equal(await engine.countTokens({ kind: "chat", chat }));
    const call = await collect(
      engine.submit({ ...base, id: "req-call", input: { kind: "chat", chat }, grammar: literalGrammar('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>') }),
    );
    const startEv = call.events.find((e) => e.type === "tool_call_start") as Extract<GenerationEvent, { type: "tool_call_start" }>;
    expect(startEv.name).to.equal("get_weather");
    const end = call.events.find((e) => e.type === "tool_call_end") as Extract<GenerationEvent, { type: "tool_call_end" }>;
    expect(JSON.parse(end.arguments)).to.deep.equal({ city: "Paris" });
    expect(call.done!.finish_reason).to.equal("tool_calls");
  });

  it("rejects a prompt longer than the context before any event", async () => {
    const it = engine.submit(textReq("word ".repeat(400)))[Symbol.asyncIterator]();
    let err: unknown;
    try {
      await it.next();
    } catch (e) {
      err = e;
    }
    expect(err).to.be.instanceOf(ApiError);
    expect((err as ApiError).code).to.equal("context_length_exceeded");
  });

  it("limits waiting requests per tenant (32) and in all (256)", async () => {
    const ac = new AbortController();
    setMaxListeners(0, ac.signal); // one listener per queued request
    const started: AsyncIterable<GenerationEvent>[] = [];
    const sub = (tenant: string | undefined) => started.push(engine.submit(textReq("queue", { tenant, max_tokens: 1 }), ac.signal));
    for (let i = 0; i < 32; i++) sub("a");
    expect(() => sub("a")).to.throw(ApiError).that.satisfies((e: ApiError) => e.code === "rate_limited" && (e.retry_after ?? 0) >= 1);
    for (const t of ["b", "c", "d", "e", "f"]) for (let i = 0; i < 32; i++) sub(t);
    for (let i = 0; i < 32; i++) sub(undefined); // no tenant: one shared tenant
    expect(() => sub(undefined)).to.throw(ApiError).with.property("code", "rate_limited");
    for (let i = 0; i < 32; i++) sub("g");
    expect(engine.stats().waiting).to.equal(256);
    expect(() => sub("h")).to.throw(ApiError).with.property("code", "queue_full");
    ac.abort();
    const ends = await Promise.all(started.map((s) => collect(s)));
    expect(ends.every((r) => r.done !== undefined)).to.equal(true);
    await until(() => engine.stats().waiting === 0 && engine.stats().slots_in_use === 0);
  });
});

describe("engine worker crash", function () {
  this.timeout(120000);
  let engine: ManagedEngine;
  // A fresh engine per test: each counts its own restarts.
  beforeEach(async () => {
    engine = oneSlotEngine();
    await engine.ready();
  });
  afterEach(async () => engine?.close());

  it("restarts the worker, retries a request that sent nothing, fails one that did", async () => {
    const pid = engine.stats().worker_pid!;
    expect(pid).to.be.a("number");
    let sawText = false;
    const running = collect(engine.submit(textReq("Tell me a long story", { max_tokens: 3000 })), (e) => {
      if (e.type === "text") sawText = true;
    });
    // one slot: this one waits, so its client has received nothing when the worker dies
    const queued = collect(engine.submit(textReq("The capital of France is", { max_tokens: 8 })));
    await until(() => sawText);
    process.kill(pid, "SIGKILL");
    await until(() => engine.state === "restarting");
    expect(() => engine.submit(textReq("hi"))).to.throw(ApiError).that.satisfies((e: ApiError) => e.code === "loading" && e.retry_after !== null);
    const r1 = await running;
    expect(r1.error?.code).to.equal("engine_error");
    const r2 = await queued;
    expect(r2.error).to.equal(undefined);
    expect(r2.done!.usage.completion_tokens).to.equal(8);
    expect(r2.events.filter((e) => e.type === "start")).to.have.length(1);
    await until(() => engine.state === "ready");
    const st = engine.stats();
    expect(st.worker_restarts).to.equal(1);
    expect(st.worker_pid).to.not.equal(pid);
    const again = await collect(engine.submit(textReq("The capital of France is", { max_tokens: 8 })));
    expect(again.text).to.equal(r2.text);
  });

  it("reruns a whole (non-streamed) request that was mid-generation, and its caller sees one clean answer", async () => {
    const req = textReq("Tell me a long story", { max_tokens: 300, whole: true });
    let events = 0;
    const running = collect(engine.submit(req), () => events++);
    // generating: the worker's KV holds more than the prompt, yet nothing reached the caller but "start"
    await until(() => engine.stats().kv_tokens_used > 40);
    expect(events).to.be.at.most(1);
    process.kill(engine.stats().worker_pid!, "SIGKILL");
    const r = await running;
    expect(r.error).to.equal(undefined);
    expect(r.done!.usage.completion_tokens).to.equal(300);
    expect(r.events.filter((e) => e.type === "start")).to.have.length(1);
    expect(engine.stats().worker_restarts).to.equal(1);
    const again = await collect(engine.submit(textReq("Tell me a long story", { max_tokens: 300 })));
    expect(r.text).to.equal(again.text);
  });
});

describe("engine load failure", function () {
  this.timeout(60000);
  it("rejects ready(), reports failed, refuses requests", async () => {
    const engine = createEngine({ model_path: "test/fixtures/does-not-exist.gguf", model_id: "x", n_ctx: 64, n_slots: 1, n_threads: 1 });
    let err: unknown;
    await engine.ready().catch((e) => (err = e));
    expect(String(err)).to.match(/failed to load/);
    expect(engine.state).to.equal("failed");
    expect(() => engine.submit(textReq("hi"))).to.throw(ApiError).with.property("code", "engine_error");
    await engine.close();
  });
});

describe("engine worker that keeps dying", function () {
  this.timeout(120000);
  it("gives up after three deaths in a row: state failed, on_fatal told the cause", async () => {
    let fatal: string | null = null;
    const engine = oneSlotEngine({ n_ctx: 256, on_fatal: (cause) => (fatal = cause) });
    try {
      await engine.ready();
      for (let i = 0; i < 3; i++) {
        await until(() => engine.state === "ready");
        process.kill(engine.stats().worker_pid!, "SIGKILL");
        await until(() => engine.state !== "ready");
      }
      await until(() => fatal !== null);
      expect(engine.state).to.equal("failed");
      expect(fatal).to.match(/SIGKILL/).and.match(/3 times in a row/);
      expect(() => engine.submit(textReq("hi"))).to.throw(ApiError).with.property("code", "engine_error");
    } finally {
      await engine.close();
    }
  });
});

describe("engine: forced tool schemas it cannot use", function () {
  this.timeout(120000);
  let engine: ManagedEngine;
  before(async () => {
    engine = oneSlotEngine();
    await engine.ready();
  });
  after(async () => engine?.close());

  const forced = (name: string, parameters: Record<string, unknown>) => ({
    kind: "chat" as const,
    chat: { system: [], turns: [{ role: "user" as const, content: "go" }], tools: [{ name, kind: "function" as const, parameters }], tool_choice: { type: "required" as const } },
  });
  async function firstError(it: AsyncIterable<GenerationEvent>): Promise<ApiError> {
    try {
      await it[Symbol.asyncIterator]().next();
    } catch (e) {
      return e as ApiError;
    }
    throw new Error("expected the request to be refused");
  }

  it("refuses a schema that refers to itself before any value, on submit and countTokens, naming the tool", async () => {
    const input = forced("loop", { $ref: "#" });
    const e1 = await firstError(engine.submit({ ...textReq(""), input }));
    expect(e1).to.be.instanceOf(ApiError);
    expect(e1.code).to.equal("invalid_request");
    expect(e1.param).to.equal("tools");
    expect(e1.message).to.include("'loop'").and.include("refers to itself");
    const e2 = await engine.countTokens(input).then(() => null, (e) => e as ApiError);
    expect(e2?.code).to.equal("invalid_request");
    expect(e2?.message).to.include("'loop'");
  });

  it("refuses a schema nested thousands deep, and one whose $ref/allOf expansion explodes", async () => {
    let deep: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 5000; i++) deep = { type: "object", properties: { a: deep } };
    const e1 = await firstError(engine.submit({ ...textReq(""), input: forced("deep", deep) }));
    expect(e1.code).to.equal("invalid_request");
    expect(e1.message).to.include("'deep'");
    // Each level merges two copies of the next: 2^24 nodes once expanded, a few hundred bytes as JSON.
    const $defs: Record<string, unknown> = { d24: { type: "object", properties: { x: { type: "string" } } } };
    for (let i = 23; i >= 0; i--) $defs[`d${i}`] = { anyOf: [{ allOf: [{ $ref: `#/$defs/d${i + 1}` }] }, { allOf: [{ $ref: `#/$defs/d${i + 1}` }, { required: [] }] }] };
    const e2 = await firstError(engine.submit({ ...textReq(""), input: forced("wide", { $defs, $ref: "#/$defs/d0" }) }));
    expect(e2.code).to.equal("invalid_request");
    expect(e2.message).to.include("'wide'");
    // The engine still serves.
    const ok = await collect(engine.submit(textReq("hi", { max_tokens: 2 })));
    expect(ok.done!.finish_reason).to.equal("length");
  });

  it("refuses a grammar the native compiler cannot take before it is queued (a 400, not an engine error)", async () => {
    const e = await firstError(engine.submit(textReq("x", { grammar: "root ::= root \"x\"" })));
    expect(e.code).to.equal("invalid_request");
    expect(e.message).to.match(/invalid grammar: .*left-recursive/);
  });

  it("answers a schema of 10,000 properties with a 400 over the grammar size budget (no stack overflow)", async () => {
    const properties: Record<string, unknown> = {};
    for (let i = 0; i < 10000; i++) properties[`p${i}`] = { type: "integer" };
    const e = await firstError(engine.submit({ ...textReq("", { max_tokens: 4 }), input: forced("many", { type: "object", properties }) }));
    expect(e.code).to.equal("invalid_request");
    expect(e.message).to.include("'many'").and.include("bytes");
    // 100 properties are an ordinary tool: a grammar, and a call.
    const few = Object.fromEntries(Object.entries(properties).slice(0, 100));
    const r = await collect(engine.submit({ ...textReq("", { max_tokens: 8 }), input: forced("few", { type: "object", properties: few }) }));
    expect(r.done!.usage.completion_tokens).to.be.greaterThan(0);
  });
});
