// Loads the mashbox_native addon (native/build/binding/mashbox_native.node, built by
// `npm run build:native`). MASHBOX_NATIVE_ADDON overrides the path (packaged installs).
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";

export interface NativeLoadOptions {
  model_path: string;
  n_ctx: number;
  n_slots: number;
  n_threads: number;
  max_batch?: number;
  /** Where the model runs (absent = cpu); cuda needs an addon with the CUDA model (NativeAddon.cudaArchitectures). */
  device?: "cpu" | "cuda";
  /** Host prompt cache size in MiB (0 or absent = off). */
  cache_ram_mib?: number;
  /** File backing the host cache, so a restarted worker maps it again (absent = private memory). */
  cache_path?: string;
  /** What a cached state is valid for (model file, tokenizer, template, policy; see prompt-cache.ts). */
  cache_namespace?: string;
  /**
   * The draft model's cache namespace, as cache_namespace (absent = the draft model keeps no host
   * cache). Its cache takes a share of cache_ram_mib and cache_disk_mib, in `${cache_path}.draft`
   * and `${cache_dir}/draft`.
   */
  draft_cache_namespace?: string;
  /** Directory of the host cache's disk tier (absent = none). */
  cache_dir?: string;
  /** Cap of the disk tier in MiB (0 or absent = none). */
  cache_disk_mib?: number;
  /**
   * Speculative decoding: "ngram" drafts from the request's own prompt and output, "draft" from
   * the model at draft_model_path (absent = off).
   */
  spec?: "ngram" | "draft" | "off";
  /** The draft model's GGUF (with spec "draft" only): same vocabulary, rollable K/V, enough context. */
  draft_model_path?: string;
  /** Names the load's errors give the model and the draft model (default: their paths). */
  model_id?: string;
  draft_model_id?: string;
  /** Draft tokens per sequence per step, at most (default 8). */
  spec_draft_max?: number;
}

export interface NativeModelInfo {
  architecture: string;
  n_ctx_train: number;
  n_vocab: number;
  n_ctx: number;
  slots: number;
  n_layer: number;
  n_embd: number;
  chat_template: string | null;
  bos_token: string | null;
  eos_token: string | null;
  /** The tokenizer starts a prompt with BOS (add_special): a template's own BOS is then dropped. */
  add_bos: boolean;
  /** Texts that become control tokens only with parse_special (what user text must not forge). */
  control_tokens: string[];
  file_bytes: number;
  n_params: number;
  bpw: number;
  kv_bytes: number;
  /** The kernel set dispatch picked on this CPU ("avx512amx", "avx512vnni", "avx2", "ref"), or "cuda" for the CUDA model. */
  kernels: string;
  /** Where the model's forward pass runs. */
  device: "cpu" | "cuda";
  /** The start-up gate's verdict on that set: "passed" (a set that fails does not load). */
  certification: string;
  /** The speculative decoding that runs. */
  spec: "off" | "ngram" | "draft";
  /** The draft model, with spec "draft". */
  draft?: { architecture: string; n_ctx_train: number; n_layer: number; n_embd: number; file_bytes: number };
  /** Filled in by the worker (identity.ts), not the addon. */
  deployment_id?: string;
  /** K/V bytes of one position of one slot (what the host cache stores per token). */
  kv_token_bytes: number;
}

export interface NativeSampling {
  temperature: number;
  top_k: number;
  top_p: number;
  min_p: number;
  repetition_penalty: number;
  frequency_penalty: number;
  presence_penalty: number;
  penalty_last_n?: number;
  seed?: number;
}

/**
 * A lazy grammar (native/engine/grammar.h, TriggerScanner): the output is free until it opens a
 * call in one of `triggers` (literal pieces, up to 8 whitespace bytes between two; an at_start
 * one only where nothing but whitespace precedes it in the answer); from the trigger's first
 * byte on it must match `grammar`. Nothing triggers inside a think block: think_open as the first
 * thing written, or from the start when starts_in_thinking, up to think_close.
 */
export interface LazyGrammar {
  grammar: string;
  triggers: { pieces: string[]; at_start: boolean }[];
  think_open?: string;
  think_close?: string;
  starts_in_thinking?: boolean;
}

export interface NativeRequest {
  id: number;
  prompt: number[] | Int32Array;
  max_tokens: number; // -1 = until the end of the context
  sampling: NativeSampling;
  /**
   * GBNF-style grammar (native/engine/grammar.h) the output must match; absent or "" =
   * unconstrained. One that does not compile ends the request with an error event.
   */
  grammar?: string;
  /** Tool calls under tool_choice auto: free output until a call opens (see LazyGrammar). */
  lazy_grammar?: LazyGrammar;
  /**
   * State point: prompt[0, state_point) is what a new conversation of the same client shares
   * (system prompt and tools); saved to the host cache once prefilled. Absent or 0 = none.
   */
  state_point?: number;
}

export type NativeEvent =
  | { type: "start"; id: number; prompt_tokens: number; cached_tokens: number; queue_ms: number }
  /** The first token of a request also carries its timing: queue wait and prefill time. */
  | { type: "token"; id: number; token: number; text: string; first?: true; queue_ms?: number; prompt_ms?: number }
  | {
      type: "done";
      id: number;
      finish: "stop" | "length" | "cancelled";
      text: string;
      prompt_tokens: number;
      cached_tokens: number;
      completion_tokens: number;
      queue_ms: number;
      prompt_ms: number;
      predicted_ms: number;
      /** Draft tokens verified, and how many of them the output kept (speculative decoding). */
      draft_n: number;
      draft_n_accepted: number;
    }
  /**
   * fault: the forward pass of the whole batch threw (the engine state is suspect); device_fault:
   * it was the device's error (a CUDA error: the process's device context is lost as well).
   */
  | { type: "error"; id: number; message: string; fault?: true; device_fault?: true };

export interface NativeStats {
  slots_total: number;
  slots_in_use: number;
  waiting: number;
  kv_tokens_used: number;
  kv_tokens_total: number;
  prefix_lookups: number;
  prefix_hit_tokens: number;
  prefix_lookup_tokens: number;
  steps: number;
  /** Launch sequences compiled while serving (CUDA graphs the CUDA model captured); 0 on the CPU. */
  graph_captures: number;
  /** Speculative decoding: draft tokens verified, and accepted, over all requests. */
  spec_draft_tokens: number;
  spec_accepted_tokens: number;
  /** Host prompt cache (all 0 and a null namespace when it is off); blocks shared by prompts count once. */
  host_cache_bytes: number;
  host_cache_cap_bytes: number;
  host_cache_tokens: number;
  host_cache_evictions: number;
  /** Blocks dropped because their header or checksum did not verify. */
  host_cache_rejected: number;
  host_cache_saved_tokens: number;
  host_cache_restored_tokens: number;
  /** The cache lives in a file a restarted worker maps again. */
  host_cache_persistent: boolean;
  /** Disk tier (all 0 when it is off): this namespace's block files, tokens read back, files removed to stay under the cap, torn or foreign files removed. */
  host_cache_disk_bytes: number;
  host_cache_disk_cap_bytes: number;
  host_cache_disk_blocks: number;
  host_cache_disk_hit_tokens: number;
  host_cache_disk_evictions: number;
  host_cache_disk_rejected: number;
  host_cache_disk_written: number;
  host_cache_disk_write_errors: number;
  cache_namespace: string | null;
  /** MoE models: expert matmuls each routed call site has run (ffn_gate_exps, ...); absent for a dense model. */
  routed_expert_calls?: Record<string, number>;
}

export interface NativeEngine {
  /** Resolves once the weights are loaded and the scheduler thread runs. */
  load(opts: NativeLoadOptions, on_events: (evs: NativeEvent[]) => void): Promise<NativeModelInfo>;
  info(): NativeModelInfo;
  /** literal: [begin, end, ...] string indices that stay plain text even with parse_special. */
  tokenize(text: string, add_special: boolean, parse_special: boolean, literal?: number[]): Int32Array;
  /**
   * tokenize() on a libuv pool thread: a long text does not hold up the JS thread. With a limit
   * it may stop once that many tokens are out: a result that long is a prefix of the whole.
   */
  tokenizeAsync(text: string, add_special: boolean, parse_special: boolean, literal?: number[], limit?: number): Promise<Int32Array>;
  detokenize(ids: number[] | Int32Array, render_special?: boolean): string;
  submit(req: NativeRequest): void;
  cancel(id: number): void;
  stats(): NativeStats;
  /** Stops the scheduler and releases the event callback (lets the process exit). */
  close(): void;
}

/** What the CUDA runtime sees (device 0): count 0 with error saying why. */
export interface CudaProbe {
  count: number;
  error: string;
  name: string;
  cc: string;
  total_bytes: number;
  free_bytes: number;
}

/** What the CUDA model would take on the device for a model file and a capacity. */
export interface CudaFootprint {
  architecture: string;
  weight_bytes: number;
  kv_bytes: number;
  scratch_bytes: number;
}

export interface NativeAddon {
  Engine: new () => NativeEngine;
  /** From the GGUF header alone; n_ctx_train is 0 when the file does not say. Throws for a file that is not GGUF. */
  ggufContext: (model_path: string) => { architecture: string; n_ctx_train: number };
  /** Null, or why the draft model cannot draft for the model (vocabulary, training context), from their headers alone; names both ids. */
  checkDraft: (model_path: string, draft_path: string, n_ctx: number, model_id: string, draft_id: string) => string | null;
  /** Present in an addon linked with the CUDA kernel set. */
  cuda?: true;
  cudaProbe?: () => CudaProbe;
  /** Present when the addon has the CUDA model too ("llama, qwen3": what runs with device cuda). */
  cudaArchitectures?: string;
  /** Throws for an architecture the CUDA model does not run. */
  cudaFootprint?: (model_path: string, n_slots: number, n_ctx: number, max_batch: number) => CudaFootprint;
}

export function addonPath(): string {
  if (process.env.MASHBOX_NATIVE_ADDON) return process.env.MASHBOX_NATIVE_ADDON;
  // src/engine/ or dist/src/engine/ -> repository root
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const p = resolve(dir, "native/build/binding/mashbox_native.node");
    if (existsSync(p)) return p;
    dir = dirname(dir);
  }
  return resolve(dirname(fileURLToPath(import.meta.url)), "../../native/build/binding/mashbox_native.node");
}

export function loadAddon(): NativeAddon {
  const p = addonPath();
  if (!existsSync(p)) throw new Error(`native addon not found at ${p}; run \`npm run build:native\``);
  return createRequire(import.meta.url)(p) as NativeAddon;
}
