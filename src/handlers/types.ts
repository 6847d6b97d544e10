import type { Context as ApiContext } from "openapi-backend";
import type Koa from "koa";
import type { Engine } from "../engine/types.js";

/** Everything a handler may use. Built once in src/server.ts. */
export interface AppDeps {
  engine: Engine;
  /** The model id this server answers to (GET /v1/models). */
  model_id: string;
  /** openapi.json with the running model's id filled in. */
  openapi_document: Record<string, unknown>;
  /** Observers the server core installs (metrics); handlers call them, never prom-client directly. */
  observe: {
    /** Called once per finished generation with its finish reason and timings. */
    generation(ev: { finish_reason: string; prompt_tokens: number; cached_tokens: number; completion_tokens: number; ttft_ms: number | null; queue_ms: number; e2e_ms: number }): void;
  };
  /** Quiet time before an open stream gets a keep-alive frame (tests shorten it); default SSE_KEEPALIVE_MS. */
  sse_keepalive_ms?: number;
  /** Renders the Prometheus text for GET /metrics. */
  metrics_text(): Promise<string>;
}

/**
 * One per operationId. `api` is openapi-backend's context: the request is already validated, so
 * handlers trust `api.request.requestBody` to have the documented shape.
 */
export type Handler = (api: ApiContext, ctx: Koa.Context, deps: AppDeps) => Promise<void> | void;
