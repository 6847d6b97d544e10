// Stands in for the engine while the model is still being pulled or loaded, so the server can
// listen at once and answer "loading"; afterwards every call goes to the real engine.
import type { Engine, EngineStats, GenerationEvent, GenerationRequest, ModelInfo } from "./types.js";
import { notReadyError } from "./readiness.js";

const EMPTY_STATS: EngineStats = {
  slots_total: 0,
  slots_in_use: 0,
  waiting: 0,
  kv_tokens_used: 0,
  kv_tokens_total: 0,
  prefix_lookups: 0,
  prefix_hit_tokens: 0,
  prefix_lookup_tokens: 0,
  worker_pid: null,
  worker_restarts: 0,
};

/** The engine to come: "loading" until attach(), then the attached engine. */
export class DeferredEngine implements Engine {
  private inner: Engine | null = null;
  constructor(private placeholder: ModelInfo) {}
  attach(engine: Engine): void {
    this.inner = engine;
  }
  get state(): Engine["state"] {
    return this.inner?.state ?? "loading";
  }
  get model(): ModelInfo {
    return this.inner?.model ?? this.placeholder;
  }
  countTokens(input: GenerationRequest["input"]): Promise<number> {
    if (!this.inner) return Promise.reject(notReadyError("loading"));
    return this.inner.countTokens(input);
  }
  submit(req: GenerationRequest, signal?: AbortSignal): AsyncIterable<GenerationEvent> {
    if (!this.inner) throw notReadyError("loading");
    return this.inner.submit(req, signal);
  }
  stats(): EngineStats {
    return this.inner?.stats() ?? { ...EMPTY_STATS, slots_total: this.placeholder.slots, kv_tokens_total: this.placeholder.slots * this.placeholder.n_ctx };
  }
}
