// The one neutral internal request/event vocabulary. Every dialect translates its wire
// request into a GenerationRequest and renders GenerationEvents back into its own wire shape;
// no dialect ever sees another dialect's types. What the chat layer reads and writes (chat
// history, tools, the output events) is defined in src/chat/types.ts, below the engine, and
// re-exported here so that a dialect has one place to import the vocabulary from.
import type { ChatPrompt, GenerationEvent, TemplateModel } from "../chat/types.js";

export type { ChatPrompt, ChatToolCall, ChatTurn, FinishReason, GenerationEvent, TemplateModel, Timings, ToolChoice, ToolSpec, Usage } from "../chat/types.js";

export interface SamplingParams {
  temperature: number; // 0 = greedy
  top_p: number; //       (0, 1]
  top_k: number; //       0 = off
  min_p: number; //       [0, 1)
  repetition_penalty: number; // 1 = off
  frequency_penalty: number; //  0 = off
  presence_penalty: number; //   0 = off
  seed?: number; //       absent = random
}

export interface GenerationRequest {
  /** Unique per request; used for cancel and logs (never the prompt itself). */
  id: string;
  /** Chat request (rendered with the model's template) or a raw completion prompt. */
  input: { kind: "chat"; chat: ChatPrompt } | { kind: "text"; text: string };
  sampling: SamplingParams;
  /** null = up to the end of the context window. */
  max_tokens: number | null;
  /** Text ends before the first match; matched across token boundaries. */
  stop: string[];
  /** Tenant of the API key (for per-tenant queue limits); undefined without keys. */
  tenant?: string;
  /**
   * The caller reads the answer only once it is complete (a non-streamed request). The engine
   * then holds the events until "done", so a worker fault mid-generation can rerun the request
   * from the start without the caller having seen half of a first attempt.
   */
  whole?: boolean;
  /**
   * A grammar (native/engine/grammar.h syntax) the output must match, in place of the one a
   * forced tool choice implies. No route sets it; engine-level callers may (tests script exact
   * output with a one-literal grammar through the real constrained-decoding path).
   */
  grammar?: string;
}



export interface ModelInfo extends TemplateModel {
  id: string;
  path: string;
  architecture: string;
  n_ctx: number; // context length the server runs (--ctx)
  n_ctx_train: number;
  slots: number;
  n_vocab: number;
  file_bytes: number;
  bpw: number;
  /** Speculative decoding that runs (--spec; absent = off), and the draft model's id with "draft". */
  spec?: "off" | "ngram" | "draft";
  draft_model?: string;
}

export interface EngineStats {
  slots_total: number;
  slots_in_use: number;
  waiting: number;
  kv_tokens_used: number;
  kv_tokens_total: number;
  prefix_lookups: number;
  prefix_hit_tokens: number;
  prefix_lookup_tokens: number;
  /** Speculative decoding: draft tokens verified, and accepted, over all requests (absent: no worker). */
  spec_draft_tokens?: number;
  spec_accepted_tokens?: number;
  /**
   * Host prompt cache: bytes held (each shared block once), its cap (0 = off), LRU evictions,
   * prompt tokens restored from it into a slot, and its namespace id. Absent = no host cache.
   */
  host_cache_bytes?: number;
  host_cache_cap_bytes?: number;
  host_cache_evictions?: number;
  host_cache_restored_tokens?: number;
  /** Its disk tier: bytes of this namespace's files, the cap (0 = off), tokens read back, files evicted, torn or foreign files removed. */
  host_cache_disk_bytes?: number;
  host_cache_disk_cap_bytes?: number;
  host_cache_disk_hit_tokens?: number;
  host_cache_disk_evictions?: number;
  host_cache_disk_rejected?: number;
  cache_namespace?: string | null;
  /** The native program and kernel set, the model file's sha256, the start-up gate's verdict (identity.ts); absent before the first worker is ready. */
  deployment_id?: string | null;
  component_set_sha?: string | null;
  certification?: string;
  /** Programs compiled since the engine first reported ready, in every worker it ran; absent before. */
  compiles_after_ready?: number;
  /** MoE models: expert matmuls run per routed call site, in the running worker. */
  routed_expert_calls?: Record<string, number>;
  worker_pid: number | null;
  worker_restarts: number;
}

/** What handlers talk to. Implemented by src/engine/engine.ts on top of the worker process. */
export interface Engine {
  readonly state: "loading" | "ready" | "restarting" | "failed";
  readonly model: ModelInfo;
  /** Prompt token count for a request exactly as it would be submitted (after the template). */
  countTokens(input: GenerationRequest["input"]): Promise<number>;
  /** Streams parsed events; the iterator ends after "done" or "error". Abort cancels. */
  submit(req: GenerationRequest, signal?: AbortSignal): AsyncIterable<GenerationEvent>;
  stats(): EngineStats;
}
