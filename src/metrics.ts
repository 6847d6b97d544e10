// Prometheus metrics on a private Registry (no default process metrics: every exported name
// must start with "mashbox:"). Engine gauges are read at scrape time from engine.stats(), so
// they can never drift from what the engine reports; per-request numbers arrive through
// AppDeps.observe from the handlers. No label carries a user, a key, a tenant or a session.
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Engine, FinishReason } from "./engine/types.js";
import type { AppDeps } from "./app/context.js";

const FINISH_REASONS: readonly FinishReason[] = ["stop", "stop_sequence", "length", "tool_calls", "cancelled", "error"];

/** Latency buckets (seconds) wide enough for a 2-core CPU and a GPU alike. */
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160];
const TPOT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5];

/**
 * A counter fed from a source that restarts from zero (the worker's native stats after a
 * fault): keeps a running base so the exported counter never goes down.
 */
class MonotonicSource {
  private base = 0;
  private last = 0;
  value(current: number): number {
    if (current < this.last) this.base += this.last;
    this.last = current;
    return this.base + current;
  }
}

export interface Metrics {
  registry: Registry;
  observe: AppDeps["observe"];
  /** One finished HTTP request, by operation id (or "unmatched") and status. */
  http(operation: string, status: number): void;
  text(): Promise<string>;
}

export function createMetrics(engine: Engine): Metrics {
  const registry = new Registry();
  const reg = [registry];
  const stats = () => engine.stats();

  new Gauge({
    name: "mashbox:num_requests_running",
    help: "Requests being decoded now (slots in use).",
    registers: reg,
    collect() {
      this.set(stats().slots_in_use);
    },
  });
  new Gauge({
    name: "mashbox:num_requests_waiting",
    help: "Requests waiting for a slot.",
    registers: reg,
    collect() {
      this.set(stats().waiting);
    },
  });
  new Gauge({
    name: "mashbox:kv_cache_usage_perc",
    help: "Fraction of the KV cache in use (1 = full).",
    registers: reg,
    collect() {
      const s = stats();
      this.set(s.kv_tokens_total > 0 ? s.kv_tokens_used / s.kv_tokens_total : 0);
    },
  });
  new Gauge({
    name: "mashbox:kv_cache_tokens_used",
    help: "KV cache cells holding a token.",
    registers: reg,
    collect() {
      this.set(stats().kv_tokens_used);
    },
  });
  new Gauge({
    name: "mashbox:cache_config_info",
    help: "KV cache layout: one block is one slot holding a whole context (block_size = context length, num_blocks = slots).",
    labelNames: ["block_size", "num_blocks"],
    registers: reg,
    collect() {
      this.reset();
      this.set({ block_size: String(engine.model.n_ctx), num_blocks: String(stats().slots_total) }, 1);
    },
  });

  const fromStats = (name: string, help: string, pick: (s: ReturnType<Engine["stats"]>) => number) => {
    const src = new MonotonicSource();
    new Counter({
      name,
      help,
      registers: reg,
      collect() {
        this.reset();
        this.inc(src.value(pick(stats())));
      },
    });
  };
  fromStats("mashbox:prefix_cache_lookups_total", "Prefix cache lookups (one per admitted request).", (s) => s.prefix_lookups);
  fromStats("mashbox:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", (s) => s.prefix_lookup_tokens);
  fromStats("mashbox:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", (s) => s.prefix_hit_tokens);
  // vLLM's names: speculative decoding's draft tokens verified, and those the output kept.
  fromStats("mashbox:spec_decode_num_draft_tokens", "Draft tokens verified by speculative decoding.", (s) => s.spec_draft_tokens ?? 0);
  fromStats("mashbox:spec_decode_num_accepted_tokens", "Draft tokens speculative decoding accepted.", (s) => s.spec_accepted_tokens ?? 0);
  // The host-memory prompt cache (--cache-ram): K/V of prompt prefixes kept after their slot moved on.
  new Gauge({
    name: "mashbox:host_cache_bytes",
    help: "Bytes the host-memory prompt cache holds, each block shared by several prompts counted once.",
    registers: reg,
    collect() {
      this.set(stats().host_cache_bytes ?? 0);
    },
  });
  new Gauge({
    name: "mashbox:host_cache_cap_bytes",
    help: "Most bytes the host-memory prompt cache holds (0 = off).",
    registers: reg,
    collect() {
      this.set(stats().host_cache_cap_bytes ?? 0);
    },
  });
  fromStats("mashbox:host_cache_evictions_total", "Host prompt cache blocks removed to stay under its cap.", (s) => s.host_cache_evictions ?? 0);
  fromStats("mashbox:host_cache_hits_total", "Prompt tokens restored from the host-memory prompt cache.", (s) => s.host_cache_restored_tokens ?? 0);
  // Its disk tier (--cache-dir): block files written behind, read back by a later server.
  new Gauge({
    name: "mashbox:host_cache_disk_bytes",
    help: "Bytes of this server's prompt cache namespace in the disk tier.",
    registers: reg,
    collect() {
      this.set(stats().host_cache_disk_bytes ?? 0);
    },
  });
  new Gauge({
    name: "mashbox:host_cache_disk_cap_bytes",
    help: "Most bytes the prompt cache's disk tier holds (0 = off).",
    registers: reg,
    collect() {
      this.set(stats().host_cache_disk_cap_bytes ?? 0);
    },
  });
  fromStats("mashbox:host_cache_disk_hits_total", "Prompt tokens read back from the prompt cache's disk tier.", (s) => s.host_cache_disk_hit_tokens ?? 0);
  fromStats("mashbox:host_cache_disk_evictions_total", "Disk tier blocks removed to stay under its cap.", (s) => s.host_cache_disk_evictions ?? 0);
  fromStats("mashbox:host_cache_disk_rejected_total", "Torn or foreign disk tier files removed.", (s) => s.host_cache_disk_rejected ?? 0);
  new Counter({
    name: "mashbox:worker_restarts_total",
    help: "Times the model worker was started again after a fault.",
    registers: reg,
    collect() {
      this.reset();
      this.inc(stats().worker_restarts);
    },
  });
  // A slot holds a whole context, so a running request is never evicted to make room.
  new Counter({ name: "mashbox:num_preemptions_total", help: "Requests preempted to free KV cache (never: a slot holds a whole context).", registers: reg });
  // Health's compiles_after_ready (0 before ready, where Health says null: nothing has been).
  fromStats("mashbox:compiles_after_ready_total", "Device programs compiled after the server reported ready.", (s) => s.compiles_after_ready ?? 0);

  const success = new Counter({
    name: "mashbox:request_success_total",
    help: "Generations finished, by finish reason.",
    labelNames: ["finished_reason"],
    registers: reg,
  });
  for (const r of FINISH_REASONS) success.inc({ finished_reason: r }, 0);
  const promptTokens = new Counter({ name: "mashbox:prompt_tokens_total", help: "Prompt tokens of finished generations.", registers: reg });
  const cachedTokens = new Counter({ name: "mashbox:prompt_tokens_cached_total", help: "Prompt tokens served from the prefix cache.", registers: reg });
  const generationTokens = new Counter({ name: "mashbox:generation_tokens_total", help: "Tokens generated.", registers: reg });
  const ttft = new Histogram({ name: "mashbox:time_to_first_token_seconds", help: "Time to first token.", buckets: LATENCY_BUCKETS, registers: reg });
  const queue = new Histogram({ name: "mashbox:request_queue_time_seconds", help: "Time a request waited for a slot.", buckets: LATENCY_BUCKETS, registers: reg });
  const e2e = new Histogram({ name: "mashbox:e2e_request_latency_seconds", help: "End-to-end generation time.", buckets: LATENCY_BUCKETS, registers: reg });
  const tpot = new Histogram({ name: "mashbox:time_per_output_token_seconds", help: "Time per output token after the first.", buckets: TPOT_BUCKETS, registers: reg });
  const http = new Counter({
    name: "mashbox:http_requests_total",
    help: "HTTP requests answered, by operation and status.",
    labelNames: ["operation", "status"],
    registers: reg,
  });

  const nonNeg = (x: number) => (Number.isFinite(x) && x > 0 ? x : 0);
  return {
    registry,
    observe: {
      generation(ev) {
        const reason = (FINISH_REASONS as readonly string[]).includes(ev.finish_reason) ? ev.finish_reason : "error";
        success.inc({ finished_reason: reason });
        // A failed request has no meaningful token counts or latencies to add to the histograms.
        if (reason === "error") return;
        promptTokens.inc(nonNeg(ev.prompt_tokens));
        cachedTokens.inc(nonNeg(ev.cached_tokens));
        generationTokens.inc(nonNeg(ev.completion_tokens));
        if (ev.ttft_ms !== null) ttft.observe(nonNeg(ev.ttft_ms) / 1000);
        queue.observe(nonNeg(ev.queue_ms) / 1000);
        e2e.observe(nonNeg(ev.e2e_ms) / 1000);
        if (ev.ttft_ms !== null && ev.completion_tokens > 1) {
          tpot.observe(nonNeg(ev.e2e_ms - ev.ttft_ms) / 1000 / (ev.completion_tokens - 1));
        }
      },
    },
    http(operation, status) {
      http.inc({ operation, status: String(status) });
    },
    text: () => registry.metrics(),
  };
}
