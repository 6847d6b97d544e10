// The Engine the handlers talk to: admission (queue limits), dispatch to the worker, and retry
// (one job per request, retried once on a fresh worker when its client has received nothing).
// What becomes of the generated text (stop strings, the model family's output parser, the
// thinking budget, usage and timings) is each attempt's output stage (output.ts). The model
// runs in a worker process (worker-client.ts, worker.ts) so a native fault never takes the HTTP
// server down; prompts and grammars come from prompt.ts.
//
// Errors: submit() throws ApiError synchronously for "loading" (also while restarting),
// "rate_limited", "queue_full" and "engine_error" (model failed to load). Prompt problems
// ("context_length_exceeded", "invalid_request", a tool schema that cannot constrain a forced
// call) reject the iterator's first next(), before any event, so a handler can still answer
// with an HTTP error.
import { ApiError, type ErrorCode } from "../errors.js";
import type { Engine, EngineStats, GenerationEvent, GenerationRequest, ModelInfo, FinishReason } from "./types.js";
import type { WorkerReject, WorkerSubmit } from "./worker.js";
import type { NativeEvent, NativeLoadOptions, NativeStats } from "./native.js";
import { mkdirSync } from "node:fs";
import { cacheNamespace, draftCachePath, newCachePath, removeCacheFile } from "./prompt-cache.js";
import { Channel } from "./channel.js";
import { OutputStage, requestParser, type StageStep } from "./output.js";
import { WorkerClient } from "./worker-client.js";
import { deadEndReason, GrammarPool, toolSchemaError } from "./grammar-pool.js";
import { autoTools, forcedTools } from "../chat/tool-grammar.js";
import { preparePrompt, type PreparedPrompt } from "./prompt.js";
import { notReadyError, unloadedModel } from "./readiness.js";

export interface EngineOptions {
  model_path: string;
  model_id: string;
  n_ctx: number;
  n_slots: number;
  n_threads: number;
  /** Where the model runs (default cpu); checked at start-up by the CLI (device.ts checkDevice). */
  device?: "cpu" | "cuda";
  /** Tokens per forward() (prefill chunks + decode tokens); default 512. */
  max_batch?: number;
  /** Queue limits (defaults from the spec: 32 per tenant, 256 in all). */
  max_waiting_per_tenant?: number;
  max_waiting_total?: number;
  /**
   * The worker failed to come back after repeated restarts; the engine is "failed" for good.
   * The CLI exits non-zero with `cause` so that a supervisor replaces the process.
   */
  on_fatal?: (cause: string) => void;
  /** Host prompt cache in MiB (--cache-ram); 0 or absent = off. */
  cache_ram_mib?: number;
  /**
   * File the host cache lives in (it outlives a worker). Default: a new file in /dev/shm (or the
   * OS temp dir) that close() removes; a given path is left in place.
   */
  cache_path?: string;
  /**
   * The host cache's disk tier: a directory (made if missing) and its cap in MiB; absent or 0 =
   * none. Blocks are written behind and read back by the next engine of the same namespace.
   */
  cache_dir?: string;
  cache_disk_mib?: number;
  /** Jinja chat template (--chat-template FILE's text) used instead of the GGUF's own, or for a model that has none. */
  chat_template?: string;
  /** Speculative decoding (--spec): "ngram", "draft" (with draft_model_path) or "off" (absent = off). */
  spec?: "ngram" | "draft" | "off";
  /** --draft: the draft model's file and id (spec "draft"). */
  draft_model_path?: string;
  draft_model_id?: string;
}

export interface ManagedEngine extends Engine {
  /** Resolves when the model is loaded; rejects if the first load fails. */
  ready(): Promise<void>;
  /** Stops the worker; pending requests end with an error event. */
  close(): Promise<void>;
}

const PER_TENANT_LIMIT = 32;
const TOTAL_LIMIT = 256;
const SHARED_TENANT = "\u0000shared";

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
  /** The prompt text, its grammar and where it may be cached (prompt.ts); set before dispatch. */
  prompt: PreparedPrompt;
  /** The current attempt's output stage (output.ts). */
  out: OutputStage;
  detach: () => void; // removes the abort listener once the job ends
}

/** A job's prompt before prepare() has built it. */
const NO_PROMPT: PreparedPrompt = { text: "", literal: [], add_special: true, starts_in_thinking: false, grammar: undefined, state_point_chars: 0, family: null };

/** The scheduler's words for a grammar that allows no token where the generation got to. */
const GRAMMAR_DEAD_END = /^grammar: generation cannot continue: (.*)$/s;

/** The speculation the options ask for, as ModelInfo says it. */
function specOf(opts: EngineOptions): Pick<ModelInfo, "spec" | "draft_model"> {
  if (opts.spec === "draft") return opts.draft_model_id !== undefined ? { spec: "draft", draft_model: opts.draft_model_id } : { spec: "draft" };
  return { spec: opts.spec ?? "off" };
}

export function createEngine(opts: EngineOptions): ManagedEngine {
  return new WorkerEngine(opts);
}

class WorkerEngine implements ManagedEngine {
  state: Engine["state"] = "loading";
  model: ModelInfo;

  private worker: WorkerClient;
  private grammars = new GrammarPool();
  private jobs = new Map<number, Job>();
  /** Jobs waiting for a (re)started worker: prepared, not yet sent. */
  private resend: Job[] = [];
  /** Jobs whose prompt and grammar are still being built. */
  private preparing = new Set<Job>();
  private nextNid = 1;
  private nativeStats: NativeStats | null = null;
  /** The running worker's graph_captures when it became ready: later ones are compiles after ready. */
  private capturesAtReady = 0;
  /** Compiles after ready of the workers that came before the running one. */
  private compilesOfPastWorkers = 0;
  /** What the running worker reported about its programs and model (Health). */
  private identity: Pick<EngineStats, "deployment_id" | "component_set_sha" | "certification" | "compiles_after_ready"> = {};
  /** The host cache file this engine made (removed on close); null when given or off. */
  private ownedCachePath: string | null = null;
  private readyPromise: Promise<void>;
  private readyResolve!: () => void;
  private readyReject!: (e: Error) => void;

  constructor(private opts: EngineOptions) {
    this.model = { ...unloadedModel({ id: opts.model_id, path: opts.model_path, n_ctx: opts.n_ctx, slots: opts.n_slots }), ...specOf(opts) };
    this.readyPromise = new Promise((res, rej) => {
      this.readyResolve = res;
      this.readyReject = rej;
    });
    this.readyPromise.catch(() => {}); // observed via ready(); never an unhandled rejection
    const load: NativeLoadOptions = { model_path: opts.model_path, n_ctx: opts.n_ctx, n_slots: opts.n_slots, n_threads: opts.n_threads, max_batch: opts.max_batch ?? 512, device: opts.device ?? "cpu" };
    if (opts.spec !== undefined) load.spec = opts.spec;
    load.model_id = opts.model_id;
    if (opts.spec === "draft" && opts.draft_model_path !== undefined) {
      load.draft_model_path = opts.draft_model_path;
      if (opts.draft_model_id !== undefined) load.draft_model_id = opts.draft_model_id;
    }
    if ((opts.cache_ram_mib ?? 0) > 0) {
      this.ownedCachePath = opts.cache_path === undefined ? newCachePath(opts.cache_ram_mib! * 1024 * 1024) : null;
      load.cache_ram_mib = opts.cache_ram_mib;
      const path = opts.cache_path ?? this.ownedCachePath;
      if (path !== null) load.cache_path = path;
      load.cache_namespace = cacheNamespace(opts.model_path);
      if (load.draft_model_path !== undefined) load.draft_cache_namespace = cacheNamespace(load.draft_model_path);
      if (opts.cache_dir !== undefined && (opts.cache_disk_mib ?? 0) > 0) {
        // A directory that cannot be made is reported once by the worker, which then runs
        // without what it would have read back.
        try {
          mkdirSync(opts.cache_dir, { recursive: true, mode: 0o700 });
        } catch {}
        load.cache_dir = opts.cache_dir;
        load.cache_disk_mib = opts.cache_disk_mib;
      }
    }
    this.worker = new WorkerClient(load, {
      ready: (info) => {
        this.model = {
          ...this.model,
          architecture: info.architecture,
          n_ctx_train: info.n_ctx_train,
          n_vocab: info.n_vocab,
          file_bytes: info.file_bytes,
          bpw: info.bpw,
          chat_template: this.opts.chat_template ?? info.chat_template,
          bos_token: info.bos_token,
          eos_token: info.eos_token,
          add_bos: info.add_bos,
          control_tokens: info.control_tokens,
          // What the worker runs (a model that cannot roll back K/V does not draft).
          spec: info.spec ?? "off",
          ...(info.spec === "draft" && this.opts.draft_model_id !== undefined ? { draft_model: this.opts.draft_model_id } : {}),
        };
        // The kernels are compiled ahead of time; what a worker still compiles while serving is a
        // CUDA model's graph capture of a decode step (once per batch width), counted from here.
        // The ready message's stats came just before this call.
        this.capturesAtReady = this.nativeStats?.graph_captures ?? 0;
        this.identity = { ...this.identity, deployment_id: info.deployment_id ?? null, certification: info.certification, compiles_after_ready: 0 };
        this.state = "ready";
        this.readyResolve();
        const again = this.resend;
        this.resend = [];
        for (const job of again) if (!job.finished) this.dispatch(job);
      },
      events: (evs, stats) => {
        this.nativeStats = stats;
        for (const e of evs) this.onNativeEvent(e);
      },
      stats: (stats) => (this.nativeStats = stats),
      identity: (component_set_sha) => (this.identity = { ...this.identity, component_set_sha }),
      down: () => this.onWorkerDown(),
      load_failed: (message) => {
        this.state = "failed";
        this.readyReject(new Error(`model failed to load: ${message}`));
        this.failAll("engine_error", `The model failed to load: ${message}`);
      },
      gave_up: (cause) => {
        this.state = "failed";
        this.readyReject(new Error(cause));
        this.failAll("engine_error", "The model's worker failed to start.");
        this.opts.on_fatal?.(cause);
      },
    });
  }

  ready(): Promise<void> {
    return this.readyPromise;
  }

  async close(): Promise<void> {
    await Promise.all([this.worker.close(), this.grammars.close()]);
    if (this.ownedCachePath) {
      removeCacheFile(this.ownedCachePath);
      removeCacheFile(draftCachePath(this.ownedCachePath));
    }
    this.failAll("engine_error", "The engine stopped.");
  }

  /**
   * The worker died (a crash, or a fault it reported). A request whose client has received
   * nothing is sent again once, from the start, when the new worker is ready; any other ends
   * with an error event (a rerun could repeat what the client has).
   */
  private onWorkerDown(): void {
    this.state = this.state === "loading" ? "loading" : "restarting";
    this.compilesOfPastWorkers = this.compilesAfterReady(); // as last reported by the worker now gone
    for (const job of this.jobs.values()) {
      if (job.finished) continue;
      if (!job.output_sent && job.attempts < 2) this.resend.push(job);
      else this.endWithError(job, "engine_error", "The request failed on the device.");
    }
    this.jobs.clear();
    this.nativeStats = null;
  }

  /** Graph captures (the only programs compiled while serving) since ready, over every worker. */
  private compilesAfterReady(): number {
    const n = this.nativeStats;
    return this.compilesOfPastWorkers + (n ? Math.max(0, (n.graph_captures ?? 0) - this.capturesAtReady) : 0);
  }

  private failAll(code: ErrorCode, message: string): void {
    for (const job of [...this.jobs.values(), ...this.resend, ...this.preparing]) if (!job.finished) this.endWithError(job, code, message);
    this.jobs.clear();
    this.resend = [];
  }

  // ---- admission ----

  async countTokens(input: GenerationRequest["input"]): Promise<number> {
    const err = notReadyError(this.state);
    if (err) throw err;
    // The grammar is built too: a forced tool whose schema cannot be used is the same 400 here.
    const p = await preparePrompt(input, this.model, this.grammars);
    return this.worker.tokenize(p.text, p.add_special, true, p.literal);
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

  submit(req: GenerationRequest, signal?: AbortSignal): AsyncIterable<GenerationEvent> {
    const err = notReadyError(this.state);
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
      prompt: NO_PROMPT,
      out: new OutputStage({ stop: req.stop, parser: null }),
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
      job.prompt = await preparePrompt(job.req.input, this.model, this.grammars, job.req.grammar);
    } catch (e) {
      this.preparing.delete(job);
      if (job.finished) return;
      job.finished = true;
      job.detach();
      job.chan.fail(e instanceof ApiError ? e : new ApiError("invalid_request", (e as Error).message));
      return;
    }
    this.preparing.delete(job);
    if (job.finished) return;
    if (this.state !== "ready") this.resend.push(job);
    else this.dispatch(job);
  }

  // ---- the job state machine ----

  private dispatch(job: Job): void {
    job.attempts++;
    job.nid = this.nextNid++;
    job.deferred = [];
    const p = job.prompt;
    const input = job.req.input;
    job.out = new OutputStage(
      { stop: job.req.stop, parser: requestParser(job.req, p.family, p.starts_in_thinking), thinking_budget: input.kind === "chat" ? input.chat.thinking_budget : undefined },
      job.out.prompt,
    );
    this.jobs.set(job.nid, job);
    this.submitNative(job, p.text, job.req.max_tokens ?? -1, p.literal);
  }

  private submitNative(job: Job, text: string, max_tokens: number, literal: number[]): void {
    const s = job.req.sampling;
    const p = job.prompt;
    const sub: WorkerSubmit = {
      id: job.nid,
      text,
      add_special: job.prompt.add_special,
      parse_special: true,
      max_tokens,
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
      ...(p.grammar !== undefined ? { grammar: p.grammar } : {}),
      // Resent past a thinking budget, the output starts after the think block.
      ...(p.lazy_grammar ? { lazy_grammar: job.out.resumed ? { ...p.lazy_grammar, starts_in_thinking: false } : p.lazy_grammar } : {}),
      ...(p.state_point_chars > 0 ? { state_point_chars: p.state_point_chars } : {}),
      ...(literal.length > 0 ? { literal } : {}),
    };
    this.worker.send({ t: "submit", req: sub });
  }

  private cancelJob(job: Job): void {
    if (job.finished) return;
    if (this.jobs.get(job.nid) === job) this.worker.send({ t: "cancel", id: job.nid });
    // A job still in the resend queue or being prepared never reaches the worker.
    this.resend = this.resend.filter((j) => j !== job);
    this.deliver(job, job.out.cancel());
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

  /** A step of the output stage: its events, then what the engine does about how it ended. */
  private step(job: Job, step: StageStep): void {
    if (step.ended) this.worker.send({ t: "cancel", id: job.nid });
    this.deliver(job, step.events);
    if (step.resubmit) this.resubmit(job, step.resubmit);
  }

  /** Events of the output stage to the client; "done" ends the job. */
  private deliver(job: Job, events: GenerationEvent[]): void {
    for (const ev of events) {
      if (ev.type !== "done") {
        this.emit(job, ev);
        continue;
      }
      if (job.finished) return;
      job.finished = true;
      job.waiting = false;
      job.detach();
      for (const e of job.deferred) job.chan.push(e);
      job.deferred = [];
      job.chan.push(ev);
      job.chan.end();
    }
  }

  /**
   * The thinking budget ran out (output.ts): the native request is cancelled and sent again with
   * its thinking and the closing tag after the prompt; the slot still holds those tokens, so that
   * prefill is a few tokens.
   */
  private resubmit(job: Job, r: NonNullable<StageStep["resubmit"]>): void {
    this.worker.send({ t: "cancel", id: job.nid });
    this.jobs.delete(job.nid);
    const p = job.prompt;
    const at = p.text.length;
    job.nid = this.nextNid++;
    this.jobs.set(job.nid, job);
    const max = job.req.max_tokens;
    this.submitNative(job, p.text + r.continuation, max === null ? -1 : Math.max(1, max - r.completion_tokens), [...p.literal, at + r.literal[0], at + r.literal[1]]);
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
        if (!job.out.start(e)) return; // the same request, past its thinking budget
        if (!job.started_sent) {
          job.started_sent = true;
          this.emit(job, { type: "start", prompt_tokens: e.prompt_tokens, cached_tokens: e.cached_tokens });
        }
        return;
      case "token":
        this.step(job, job.out.token(e.text));
        return;
      case "done":
        this.step(job, job.out.done(e.text, e.finish, e));
        return;
      case "error": {
        // A forced call's grammar that passed the up-front trial can still reach the grammar
        // engine's limits deeper in: the schema's doing, so the 400 naming the tool (an error
        // event in the route's shape once output was sent), not a server failure.
        const dead = GRAMMAR_DEAD_END.exec(e.message);
        const chat = job.req.input.kind === "chat" ? job.req.input.chat : null;
        const forced = dead && chat && job.req.grammar === undefined ? forcedTools(chat) : null;
        const auto = dead && chat && job.prompt.lazy_grammar ? autoTools(chat) : null;
        const named = forced ?? auto;
        if (dead && named) {
          const { tool, reason } = deadEndReason(dead[1], job.out.output);
          const err = toolSchemaError(tool !== null ? [tool] : named.map((t) => t.name), reason, forced !== null);
          this.endWithError(job, err.code, err.message);
        } else this.endWithError(job, "engine_error", e.message);
        return;
      }
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
      spec_draft_tokens: n?.spec_draft_tokens ?? 0,
      spec_accepted_tokens: n?.spec_accepted_tokens ?? 0,
      // Absent while no worker runs (loading, restarting): unknown, not zero.
      ...(n
        ? {
            host_cache_bytes: n.host_cache_bytes,
            host_cache_cap_bytes: n.host_cache_cap_bytes,
            host_cache_evictions: n.host_cache_evictions,
            host_cache_restored_tokens: n.host_cache_restored_tokens,
            host_cache_disk_bytes: n.host_cache_disk_bytes,
            host_cache_disk_cap_bytes: n.host_cache_disk_cap_bytes,
            host_cache_disk_hit_tokens: n.host_cache_disk_hit_tokens,
            host_cache_disk_evictions: n.host_cache_disk_evictions,
            host_cache_disk_rejected: n.host_cache_disk_rejected,
            cache_namespace: n.cache_namespace,
            ...(n.routed_expert_calls ? { routed_expert_calls: n.routed_expert_calls } : {}),
          }
        : {}),
      ...this.identity,
      ...(this.identity.compiles_after_ready !== undefined ? { compiles_after_ready: this.compilesAfterReady() } : {}),
      worker_pid: this.state === "ready" ? this.worker.pid : null,
      worker_restarts: this.worker.restarts,
    };
  }
}
