// The application context: what the server core builds once (AppDeps) and what it records on
// each request (tenant, session tag) before a route runs. Neutral ground: the server core, the
// HTTP helpers, metrics, security and handlers all read it; it imports none of them.
import type Koa from "koa";
import type { Engine } from "../engine/types.js";
import type { OperationId } from "../generated/operations.js";

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
  /** A stream whose client takes no bytes for this long is closed (--stall-timeout); default STALLED_READER_MS. */
  sse_stall_ms?: number;
  /** Renders the Prometheus text for GET /metrics. */
  metrics_text(): Promise<string>;
}

/** ctx.state keys the server core writes (the matched route, the API key's tenant, the session tag for logs). */
export const STATE = {
  route: "mashbox_route",
  tenant: "mashbox_tenant",
  session: "mashbox_session",
} as const;

/** The operation a request's method and path matched, once, before the security check. */
export interface MatchedRoute {
  id: OperationId;
  /** False when the path is an operation's under another method (405, and HEAD). */
  method_matches: boolean;
}

/** The matched route the router middleware recorded; null for a path no operation has. */
export function matchedRoute(ctx: Koa.Context): MatchedRoute | null {
  return (ctx.state[STATE.route] as MatchedRoute | undefined) ?? null;
}

/** The request's tenant, as the security middleware recorded it; handlers read it only here. */
export function requestTenant(ctx: Koa.Context): { tenant?: string } {
  const tenant = ctx.state[STATE.tenant];
  return typeof tenant === "string" ? { tenant } : {};
}
