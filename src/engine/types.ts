// The one neutral internal request/event vocabulary. Every dialect translates its wire
// request into a GenerationRequest and renders GenerationEvents back into its own wire shape;
// no dialect ever sees another dialect's types.

/** Why a generation ended. Dialects map these onto their own wire names. */
export type FinishReason =
  | "stop" //          end-of-generation token (eos / <|im_end|> ...)
  | "stop_sequence" // a caller-supplied stop string matched; GenerationDone.stop_sequence says which
  | "length" //        max_tokens budget or end of the context window
  | "tool_calls" //    the model finished after emitting one or more tool calls
  | "cancelled" //     the client went away
  | "error"; //        the engine failed mid-stream

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

/** A tool offered to the model, dialect-neutral. */
export interface ToolSpec {
  name: string;
  description?: string;
  /** JSON Schema of the arguments object (function tools). */
  parameters?: Record<string, unknown>;
  /** "function": JSON object arguments; "custom": raw string input (Responses custom tools). */
  kind: "function" | "custom";
  /** Responses namespace tool this one came from, echoed back on the call. */
  namespace?: string;
}

export type ToolChoice =
  | { type: "auto" }
  | { type: "none" }
  | { type: "required" }
  | { type: "tool"; name: string };

/** A tool call the assistant made earlier in the conversation (replayed history). */
export interface ChatToolCall {
  id: string;
  name: string;
  /** JSON text for function tools, raw text for custom tools. */
  arguments: string;
}

/** One turn of neutral chat history. System text is collected separately in ChatPrompt.system. */
export type ChatTurn =
  | { role: "user"; content: string }
  | { role: "assistant"; content: string; thinking?: string; tool_calls?: ChatToolCall[] }
  | { role: "tool"; tool_call_id: string; name?: string; content: string };

/** What the prompt builder renders with the model's own chat template. */
export interface ChatPrompt {
  /** All system text from every place a dialect allows it, joined in order. */
  system: string[];
  turns: ChatTurn[];
  tools: ToolSpec[];
  tool_choice: ToolChoice;
  /** false: at most one call per answer (parallel_tool_calls false, disable_parallel_tool_use); default several. */
  parallel_tool_calls?: boolean;
  /** undefined = template default. */
  enable_thinking?: boolean;
  /** Most tokens of thinking (Anthropic thinking.budget_tokens); then the think block is closed and the answer follows. */
  thinking_budget?: number;
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

export interface Usage {
  prompt_tokens: number;
  /** Prompt tokens served from the prefix cache (not prefilled). */
  cached_tokens: number;
  completion_tokens: number;
  /** Tokens spent inside <think>...</think>. */
  reasoning_tokens: number;
}

/** llama-server's timings block. */
export interface Timings {
  prompt_n: number;
  prompt_ms: number;
  prompt_per_second: number | null;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_second: number | null;
  cache_n: number;
  queue_ms: number;
  /** Speculative decoding (llama-server's names): draft tokens verified, and those the output kept. */
  draft_n?: number;
  draft_n_accepted?: number;
}

/** The parsed output stream. Text, thinking and tool calls never overlap within one event. */
export type GenerationEvent =
  | { type: "start"; prompt_tokens: number; cached_tokens: number }
  | { type: "text"; text: string }
  | { type: "thinking"; text: string }
  | { type: "tool_call_start"; index: number; id: string; name: string; kind: "function" | "custom"; namespace?: string }
  | { type: "tool_call_delta"; index: number; arguments: string }
  | { type: "tool_call_end"; index: number; arguments: string }
  | {
      type: "done";
      finish_reason: FinishReason;
      stop_sequence: string | null;
      usage: Usage;
      timings: Timings;
    }
  | { type: "error"; code: string; message: string };

export interface ModelInfo {
  id: string;
  path: string;
  architecture: string;
  n_ctx: number; // context length the server runs (--ctx)
  n_ctx_train: number;
  slots: number;
  n_vocab: number;
  file_bytes: number;
  bpw: number;
  chat_template: string | null;
  bos_token: string | null;
  eos_token: string | null;
  /** The tokenizer starts a prompt with BOS, so a template's leading bos_token is dropped. */
  add_bos?: boolean;
  /** Texts the tokenizer turns into control tokens (only the template may produce them). */
  control_tokens?: string[];
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
