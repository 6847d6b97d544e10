// The Engine the handlers talk to. It runs the model in a worker process (worker.ts) so a native
// fault never takes the HTTP server down, and does the text-level work around the native
// scheduler: chat template, stop strings across token boundaries, output parsing (thinking /
// tool calls), queue limits, usage and llama-server-style timings.
//
// Errors: submit() throws ApiError synchronously for "loading" (also while restarting),
// "rate_limited", "queue_full" and "engine_error" (model failed to load). Prompt problems
// ("context_length_exceeded", "invalid_request") reject the iterator's first next(), before any
// event, so a handler can still answer with an HTTP error.
import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { ApiError, type ErrorCode } from "../errors.js";
import type {
  Engine,
  EngineStats,
  GenerationEvent,
  GenerationRequest,
  ModelInfo,
  FinishReason,
} from "./types.js";
import type { FromWorker, ToWorker, WorkerReject, WorkerSubmit } from "./worker.js";
import type { NativeEvent, NativeLoadOptions, NativeModelInfo, NativeStats } from "./native.js";
import { cacheNamespace, newCachePath, removeCacheFile, statePointChars } from "./prompt-cache.js";
import { renderChatPrompt, promptOpensThinking } from "../chat/template.js";
import { OutputParser } from "../chat/parser.js";
import { forcedTools, toolCallGrammar } from "../chat/tool-grammar.js";

export interface EngineOptions {
  model_path: string;
  model_id: string;
  n_ctx: number;
  n_slots: number;
  n_threads: number;
  /** Tokens per forward() (prefill chunks + decode tokens); default 512. */
  max_batch?: number;
  /** Enables crash_worker() (tests only). */
  test_hooks?: boolean;
  /** Host prompt cache in MiB (--cache-ram); 0 or absent = off. */
  cache_ram_mib?: number;
  /**
   * File the host cache lives in (it outlives a worker). Default: a new file in /dev/shm (or the
   * OS temp dir) that close() removes; a given path is left in place.
   */
  cache_path?: string;
  /** Queue limits (defaults from the spec: 32 per tenant, 256 in all). */
  max_waiting_per_tenant?: number;
  max_waiting_total?: number;
}

export interface ManagedEngine extends Engine {
  /** Resolves when the model is loaded; rejects if the first load fails. */
  ready(): Promise<void>;
  /** Stops the worker; pending requests end with an error event. */
  close(): Promise<void>;
  /** Test hook (only with test_hooks: true): kills the worker as a native fault would. */
  crash_worker?: () => void;
}

const PER_TENANT_LIMIT = 32;
const TOTAL_LIMIT = 256;
const SHARED_TENANT = "\u0000shared";
/** Consecutive failed starts before the engine gives up ("failed"). */
const MAX_START_FAILURES = 3;

/** A tiny single-consumer async queue: the iterator a submit() returns. */
class Channel<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private waiter: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void } | null = null;
  private ended = false;
  private failure: unknown = null;
  push(item: T): void {
    if (this.ended) return;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve({ value: item, done: false });
    } else this.items.push(item);
  }
  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.waiter && this.items.length === 0) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve({ value: undefined, done: true });
    }
  }
  fail(err: unknown): void {
    if (this.ended) return;
    this.failure = err;
    this.ended = true;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w.reject(err);
    }
  }
  get closed(): boolean {
    return this.ended;
  }
  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.items.length > 0) return Promise.resolve({ value: this.items.shift()!, done: false });
        if (this.failure !== null) {
          const f = this.failure;
          this.failure = null;
          return Promise.reject(f);
        }
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
      },
      return: () => {
        this.onReturn?.();
        this.ended = true;
        this.items = [];
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
  onReturn: (() => void) | null = null;
}

/** Longest suffix of `text` that is a proper prefix of some stop string (held back). */
function partialStopSuffix(text: string, stops: string[]): number {
  let best = 0;
  for (const s of stops) {
    for (let n = Math.min(s.length - 1, text.length); n > best; n--) {
      if (text.endsWith(s.slice(0, n))) {
        best = n;
        break;
      }
    }
  }
  return best;
}

interface Job {
  req: GenerationRequest;
  tenant: string;
  chan: Channel<GenerationEvent>;
  nid: number; // native id of the current attempt
  attempts: number;
  waiting: boolean; // counts against the queue limits until the native start
  started_sent: boolean;
  output_sent: boolean;
  /** Events of this attempt held back for a `whole` request until "done". */
  deferred: GenerationEvent[];
  finished: boolean;
  cancelled: boolean;
  // Per-attempt state
  prompt_text: string;
  add_special: boolean;
  starts_in_thinking: boolean;
  /** Output grammar for a forced tool choice (src/chat/tool-grammar.ts); undefined = free. */
  grammar: string | undefined;
  /** State point in characters of prompt_text (prompt-cache.ts). */
  state_point_chars: number;
  parser: OutputParser | null;
  held: string; // generated text not yet released (possible partial stop match)
  prompt_tokens: number;
  cached_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
  queue_ms: number;
  t_start: number;
  t_first: number | null;
  t_last: number;
  detach: () => void; // removes the abort listener once the job ends
}

export function createEngine(opts: EngineOptions): ManagedEngine {
  return new WorkerEngine(opts);
}

class WorkerEngine implements ManagedEngine {
  state: Engine["state"] = "loading";
  model: ModelInfo;
  crash_worker?: () => void;

  private child: ChildProcess | null = null;
  private jobs = new Map<number, Job>();
  private resend: Job[] = [];
  private nextNid = 1;
  private nextRid = 1;
  private replies = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  private nativeStats: NativeStats | null = null;
  private restarts = 0;
  private startFailures = 0;
  private closing = false;
  private readyPromise: Promise<void>;
  private readyResolve!: () => void;
  private readyReject!: (e: Error) => void;
  private everReady = false;
  private nativeInfo: NativeModelInfo | null = null;
  /** Host cache options every (re)started worker loads with; empty when the cache is off. */
  private cacheLoad: Pick<NativeLoadOptions, "cache_ram_mib" | "cache_path" | "cache_namespace"> = {};
  /** The host cache file this engine made (removed on close); null when given or off. */
  private ownedCachePath: string | null = null;

  constructor(private opts: EngineOptions) {
    this.model = {
      id: opts.model_id,
      path: opts.model_path,
      architecture: "",
      n_ctx: opts.n_ctx,
      n_ctx_train: 0,
      slots: opts.n_slots,
      n_vocab: 0,
      file_bytes: 0,
      bpw: 0,
      chat_template: null,
      bos_token: null,
      eos_token: null,
    };
    this.readyPromise = new Promise((res, rej) => {
      this.readyResolve = res;
      this.readyReject = rej;
    });
    this.readyPromise.catch(() => {}); // observed via ready(); never an unhandled rejection
    if (opts.test_hooks) this.crash_worker = () => this.send({ t: "crash" });
    if ((opts.cache_ram_mib ?? 0) > 0) {
      this.ownedCachePath = opts.cache_path === undefined ? newCachePath() : null;
      this.cacheLoad = {
        cache_ram_mib: opts.cache_ram_mib,
        cache_path: opts.cache_path ?? this.ownedCachePath!,
        cache_namespace: cacheNamespace(opts.model_path),
      };
    }
    this.spawn();
  }

  ready(): Promise<void> {
    return this.readyPromise;
  }

  // ---- worker lifecycle ----

  private spawn(): void {
    const here = dirname(fileURLToPath(import.meta.url));
    const isTs = import.meta.url.endsWith(".ts");
    const workerPath = join(here, isTs ? "worker.ts" : "worker.js");
    const env = { ...process.env, MB_TEST_HOOKS: this.opts.test_hooks ? "1" : "0" };
    const child = fork(workerPath, [], {
      execArgv: isTs ? ["--import", "tsx"] : [],
      env,
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      serialization: "advanced",
    });
    this.child = child;
    child.on("message", (m: FromWorker) => this.onMessage(child, m));
    child.on("exit", (code, signal) => this.onExit(child, code, signal));
    child.on("error", () => {}); // exit follows
    this.send({
      t: "load",
      opts: {
        model_path: this.opts.model_path,
        n_ctx: this.opts.n_ctx,
        n_slots: this.opts.n_slots,
        n_threads: this.opts.n_threads,
        max_batch: this.opts.max_batch ?? 512,
        ...this.cacheLoad,
      },
    });
  }

  private send(m: ToWorker): void {
    const c = this.child;
    if (c && c.connected) c.send(m);
  }

  private onMessage(child: ChildProcess, m: FromWorker): void {
    if (child !== this.child) return;
    switch (m.t) {
      case "ready": {
        this.nativeInfo = m.info;
        this.model = {
          ...this.model,
          architecture: m.info.architecture,
          n_ctx_train: m.info.n_ctx_train,
          n_vocab: m.info.n_vocab,
          file_bytes: m.info.file_bytes,
          bpw: m.info.bpw,
          chat_template: m.info.chat_template,
          bos_token: m.info.bos_token,
          eos_token: m.info.eos_token,
        };
        this.state = "ready";
        this.startFailures = 0;
        this.everReady = true;
        this.readyResolve();
        const again = this.resend;
        this.resend = [];
        for (const job of again) if (!job.finished) void this.dispatch(job);
        break;
      }
      case "load_error": {
        this.state = "failed";
        this.readyReject(new Error(`model failed to load: ${m.message}`));
        this.failAll("engine_error", `The model failed to load: ${m.message}`);
        this.closing = true;
        child.kill();
        break;
      }
      case "reply": {
        const r = this.replies.get(m.rid);
        if (!r) return;
        this.replies.delete(m.rid);
        if (m.ok) r.resolve(m.value);
        else r.reject(new ApiError("invalid_request", m.message));
        break;
      }
      case "events":
        this.nativeStats = m.stats;
        for (const e of m.evs) this.onNativeEvent(e);
        break;
      case "stats":
        this.nativeStats = m.stats;
        break;
    }
  }

  private onExit(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (child !== this.child) return;
    this.child = null;
    for (const r of this.replies.values()) r.reject(new ApiError("loading", "The model's worker is restarting.", { retry_after: 2 }));
    this.replies.clear();
    if (this.closing || this.state === "failed") {
      this.failAll("engine_error", "The engine stopped.");
      return;
    }
    if (!this.everReady || this.state === "restarting") this.startFailures++;
    if (this.startFailures >= MAX_START_FAILURES) {
      this.state = "failed";
      this.readyReject(new Error("the model's worker failed to start"));
      this.failAll("engine_error", "The model's worker failed to start.");
      return;
    }
    if (this.everReady) this.restarts++;
    process.stderr.write(`mashbox: model worker exited (${signal ?? `code ${code}`}); starting it again\n`);
    this.state = this.everReady ? "restarting" : "loading";
    // A request whose client has received nothing is sent again once, from the start; any
    // other request ends with an error event (a rerun could repeat what the client has).
    for (const job of this.jobs.values()) {
      if (job.finished) continue;
      if (!job.output_sent && job.attempts < 2) this.resend.push(job);
      else this.endWithError(job, "engine_error", "The request failed on the device.");
    }
    this.jobs.clear();
    this.nativeStats = null;
    this.spawn();
  }

  private failAll(code: ErrorCode, message: string): void {
    for (const job of [...this.jobs.values(), ...this.resend]) if (!job.finished) this.endWithError(job, code, message);
    this.jobs.clear();
    this.resend = [];
  }

  async close(): Promise<void> {
    this.closing = true;
    const c = this.child;
    if (c && c.exitCode === null && c.signalCode === null) {
      await new Promise<void>((res) => {
        c.once("exit", () => res());
        c.kill("SIGTERM");
      });
    }
    if (this.ownedCachePath) removeCacheFile(this.ownedCachePath);
  }

  // ---- requests ----

  private notReady(): ApiError | null {
    if (this.state === "ready") return null;
    if (this.state === "failed") return new ApiError("engine_error", "The model failed to load.");
    return new ApiError("loading", this.state === "restarting" ? "The model's worker is restarting after a fault." : undefined, {
      retry_after: this.state === "restarting" ? 2 : 5,
    });
  }

  private async promptOf(
    input: GenerationRequest["input"],
  ): Promise<{ text: string; add_special: boolean; starts_in_thinking: boolean; grammar?: string; state_point_chars?: number }> {
    if (input.kind === "text") return { text: input.text, add_special: true, starts_in_thinking: false };
    // A forced tool choice (required / any / a named tool) constrains decoding to one well-formed
    // call (src/chat/tool-grammar.ts); the prompt still asks for it (src/chat/template.ts).
    // Thinking is switched off for that turn rather than allowed as a free <think> prefix: an
    // unconstrained think block has no end but max_tokens, and a small model may never close
    // it, so the call would never come (Anthropic likewise refuses thinking with forced tools).
    const forced = forcedTools(input.chat);
    const chat = forced ? { ...input.chat, enable_thinking: false } : input.chat;
    const text = renderChatPrompt(chat, this.model, { add_generation_prompt: true });
    // Templates that open the think block themselves start the answer inside it.
    const starts_in_thinking = promptOpensThinking(text);
    return {
      text,
      add_special: true,
      starts_in_thinking,
      state_point_chars: statePointChars(chat, this.model, text),
      ...(forced ? { grammar: toolCallGrammar(forced, { starts_in_thinking }) } : {}),
    };
  }

  async countTokens(input: GenerationRequest["input"]): Promise<number> {
    const err = this.notReady();
    if (err) throw err;
    const p = await this.promptOf(input);
    const rid = this.nextRid++;
    const n = await new Promise<unknown>((resolve, reject) => {
      this.replies.set(rid, { resolve, reject });
      this.send({ t: "tokenize", rid, text: p.text, add_special: p.add_special, parse_special: true });
    });
    return n as number;
  }

  private waitingCounts(tenant: string): { tenant: number; total: number } {
    let t = 0;
    let total = 0;
    const count = (j: Job) => {
      if (j.finished || !j.waiting) return;
      total++;
      if (j.tenant === tenant) t++;
    };
    for (const j of this.jobs.values()) count(j);
    for (const j of this.resend) count(j);
    for (const j of this.preparing) count(j);
    return { tenant: t, total };
  }
  private preparing = new Set<Job>();

  submit(req: GenerationRequest, signal?: AbortSignal): AsyncIterable<GenerationEvent> {
    const err = this.notReady();
    if (err) throw err;
    const tenant = req.tenant ?? SHARED_TENANT;
    const counts = this.waitingCounts(tenant);
    const perTenant = this.opts.max_waiting_per_tenant ?? PER_TENANT_LIMIT;
    const total = this.opts.max_waiting_total ?? TOTAL_LIMIT;
    // Retry-After grows with the backlog: about one slot-turn per slots' worth of waiters.
    const retry_after = Math.min(30, 1 + Math.ceil(counts.total / Math.max(1, this.opts.n_slots)));
    if (counts.total >= total) throw new ApiError("queue_full", undefined, { retry_after });
    if (counts.tenant >= perTenant) throw new ApiError("rate_limited", undefined, { retry_after });

    const job: Job = {
      req,
      tenant,
      chan: new Channel<GenerationEvent>(),
      nid: 0,
      attempts: 0,
      waiting: true,
      started_sent: false,
      output_sent: false,
      deferred: [],
      finished: false,
      cancelled: false,
      prompt_text: "",
      add_special: true,
      starts_in_thinking: false,
      grammar: undefined,
      state_point_chars: 0,
      parser: null,
      held: "",
      prompt_tokens: 0,
      cached_tokens: 0,
      completion_tokens: 0,
      reasoning_tokens: 0,
      queue_ms: 0,
      t_start: 0,
      t_first: null,
      t_last: 0,
      detach: () => {},
    };
    const cancel = () => this.cancelJob(job);
    job.chan.onReturn = cancel; // the consumer stopped iterating early
    if (signal) {
      if (signal.aborted) queueMicrotask(cancel);
      else {
        signal.addEventListener("abort", cancel, { once: true });
        job.detach = () => signal.removeEventListener("abort", cancel);
      }
    }
    this.preparing.add(job);
    void this.prepare(job);
    return job.chan;
  }

  private async prepare(job: Job): Promise<void> {
    try {
      const p = await this.promptOf(job.req.input);
      job.prompt_text = p.text;
      job.add_special = p.add_special;
      job.starts_in_thinking = p.starts_in_thinking;
      job.grammar = p.grammar;
      job.state_point_chars = p.state_point_chars ?? 0;
    } catch (e) {
      this.preparing.delete(job);
      job.finished = true;
      job.detach();
      job.chan.fail(e instanceof ApiError ? e : new ApiError("invalid_request", (e as Error).message));
      return;
    }
    this.preparing.delete(job);
    if (job.finished) return;
    if (this.state !== "ready") {
      this.resend.push(job);
      return;
    }
    await this.dispatch(job);
  }

  private async dispatch(job: Job): Promise<void> {
    job.attempts++;
    job.nid = this.nextNid++;
    job.held = "";
    job.deferred = [];
    job.completion_tokens = 0;
    job.reasoning_tokens = 0;
    job.t_first = null;
    job.parser = null;
    if (job.req.input.kind === "chat") {
      let n = 0;
      const base = job.req.id.replace(/[^A-Za-z0-9]/g, "").slice(-12) || "call";
      job.parser = new OutputParser({
        tools: job.req.input.chat.tools,
        starts_in_thinking: job.starts_in_thinking,
        new_call_id: () => `call_${base}_${n++}`,
      });
    }
    this.jobs.set(job.nid, job);
    const s = job.req.sampling;
    const sub: WorkerSubmit = {
      id: job.nid,
      text: job.prompt_text,
      add_special: job.add_special,
      parse_special: true,
      max_tokens: job.req.max_tokens ?? -1,
      sampling: {
        temperature: s.temperature,
        top_k: s.top_k,
        top_p: s.top_p,
        min_p: s.min_p,
        repetition_penalty: s.repetition_penalty,
        frequency_penalty: s.frequency_penalty,
        presence_penalty: s.presence_penalty,
        // A random seed is drawn here so a resend after a crash would be as random as a first try.
        seed: s.seed ?? Math.floor(Math.random() * 0xffffffff),
      },
      ...(job.grammar !== undefined ? { grammar: job.grammar } : {}),
      script_text: job.req.scripted_text,
      ...(job.state_point_chars > 0 ? { state_point_chars: job.state_point_chars } : {}),
    };
    this.send({ t: "submit", req: sub });
  }

  private cancelJob(job: Job): void {
    if (job.finished) return;
    job.cancelled = true;
    if (this.jobs.get(job.nid) === job) this.send({ t: "cancel", id: job.nid });
    // A job still in the resend queue or being prepared never reaches the worker.
    this.resend = this.resend.filter((j) => j !== job);
    this.finishJob(job, "cancelled", null, null);
  }

  private emit(job: Job, ev: GenerationEvent): void {
    if (ev.type !== "start" && job.req.whole) {
      job.deferred.push(ev);
      return;
    }
    if (ev.type !== "start") job.output_sent = true;
    job.chan.push(ev);
  }

  private endWithError(job: Job, code: string, message: string): void {
    if (job.finished) return;
    job.finished = true;
    job.waiting = false;
    job.detach();
    job.chan.push({ type: "error", code, message });
    job.chan.end();
  }

  /** Releases generated text: through the stop matcher, then the output parser for chat. */
  private release(job: Job, text: string, final: boolean): boolean {
    let pending = job.held + text;
    const stops = job.req.stop.filter((s) => s.length > 0);
    let matched: string | null = null;
    if (stops.length > 0) {
      let at = -1;
      for (const s of stops) {
        const i = pending.indexOf(s);
        if (i >= 0 && (at < 0 || i < at || (i === at && s.length > (matched?.length ?? 0)))) {
          at = i;
          matched = s;
        }
      }
      if (matched !== null) {
        pending = pending.slice(0, at);
        job.held = "";
      } else if (!final) {
        const keep = partialStopSuffix(pending, stops);
        job.held = pending.slice(pending.length - keep);
        pending = pending.slice(0, pending.length - keep);
      } else job.held = "";
    }
    if (pending.length > 0) {
      if (job.parser) {
        const evs = job.parser.push(pending);
        if (evs.some((e) => e.type === "thinking")) job.reasoning_tokens++;
        for (const e of evs) this.emit(job, e);
      } else this.emit(job, { type: "text", text: pending });
    }
    if (matched !== null) {
      this.send({ t: "cancel", id: job.nid });
      this.finishJob(job, "stop_sequence", matched, null);
      return true;
    }
    return false;
  }

  private finishJob(job: Job, reason: FinishReason, stop_sequence: string | null, native: Extract<NativeEvent, { type: "done" }> | null): void {
    if (job.finished) return;
    if (job.parser && reason !== "cancelled") for (const e of job.parser.finish()) this.emit(job, e);
    if (job.parser && job.parser.tool_calls > 0 && (reason === "stop" || reason === "stop_sequence")) reason = "tool_calls";
    job.finished = true;
    job.waiting = false;
    job.detach();
    for (const e of job.deferred) job.chan.push(e);
    job.deferred = [];
    const now = performance.now();
    const prompt_n = job.prompt_tokens - job.cached_tokens;
    const prompt_ms = native ? native.prompt_ms : job.t_first !== null ? job.t_first - job.t_start : now - job.t_start;
    const predicted_ms = native ? native.predicted_ms : job.t_first !== null ? job.t_last - job.t_first : 0;
    const predicted_n = job.completion_tokens;
    job.chan.push({
      type: "done",
      finish_reason: reason,
      stop_sequence,
      usage: {
        prompt_tokens: job.prompt_tokens,
        cached_tokens: job.cached_tokens,
        completion_tokens: job.completion_tokens,
        reasoning_tokens: job.reasoning_tokens,
      },
      timings: {
        prompt_n,
        prompt_ms,
        prompt_per_second: prompt_ms > 0 && prompt_n > 0 ? (prompt_n * 1000) / prompt_ms : null,
        predicted_n,
        predicted_ms,
        predicted_per_second: predicted_ms > 0 && predicted_n > 0 ? (predicted_n * 1000) / predicted_ms : null,
        cache_n: job.cached_tokens,
        queue_ms: job.queue_ms,
      },
    });
    job.chan.end();
  }

  private onNativeEvent(e: NativeEvent | WorkerReject): void {
    const job = this.jobs.get(e.id);
    if (!job) return;
    if (e.type === "done" || e.type === "error" || e.type === "reject") this.jobs.delete(e.id);
    if (job.finished) return;
    switch (e.type) {
      case "reject":
        job.finished = true;
        job.waiting = false;
        job.detach();
        job.chan.fail(new ApiError(e.code, e.message, { param: e.code === "context_length_exceeded" ? (job.req.input.kind === "chat" ? "messages" : "prompt") : undefined }));
        return;
      case "start":
        job.waiting = false;
        job.prompt_tokens = e.prompt_tokens;
        job.cached_tokens = e.cached_tokens;
        job.queue_ms = e.queue_ms;
        job.t_start = performance.now();
        if (!job.started_sent) {
          job.started_sent = true;
          this.emit(job, { type: "start", prompt_tokens: e.prompt_tokens, cached_tokens: e.cached_tokens });
        }
        return;
      case "token": {
        const now = performance.now();
        if (job.t_first === null) job.t_first = now;
        job.t_last = now;
        job.completion_tokens++;
        if (e.text.length > 0) this.release(job, e.text, false);
        return;
      }
      case "done": {
        if (this.release(job, e.text, true)) return;
        this.finishJob(job, e.finish === "cancelled" ? "cancelled" : e.finish, null, e);
        return;
      }
      case "error":
        this.endWithError(job, "engine_error", e.message);
        return;
    }
  }

  stats(): EngineStats {
    const n = this.nativeStats;
    const waiting = this.waitingCounts(SHARED_TENANT).total;
    return {
      slots_total: this.opts.n_slots,
      slots_in_use: n?.slots_in_use ?? 0,
      waiting,
      kv_tokens_used: n?.kv_tokens_used ?? 0,
      kv_tokens_total: this.opts.n_slots * this.opts.n_ctx,
      prefix_lookups: n?.prefix_lookups ?? 0,
      prefix_hit_tokens: n?.prefix_hit_tokens ?? 0,
      prefix_lookup_tokens: n?.prefix_lookup_tokens ?? 0,
      // Absent while no worker runs (loading, restarting): unknown, not zero.
      ...(n
        ? {
            host_cache_bytes: n.host_cache_bytes,
            host_cache_cap_bytes: n.host_cache_cap_bytes,
            host_cache_evictions: n.host_cache_evictions,
            host_cache_restored_tokens: n.host_cache_restored_tokens,
            cache_namespace: n.cache_namespace,
          }
        : {}),
      worker_pid: this.state === "ready" ? (this.child?.pid ?? null) : null,
      worker_restarts: this.restarts,
    };
  }
}
