// Helpers every handler uses. The server core fills ctx.state (tenant from the API key,
// session tag, scripted test text) before a handler runs; handlers read it only through
// requestContext so the state keys stay private to the core.
import type Koa from "koa";
import { randomBytes } from "node:crypto";
import { ApiError } from "../errors.js";
import type { AppDeps } from "./types.js";

export interface RequestContext {
  /** Tenant of the API key (per-tenant queue limit); undefined without keys. */
  tenant?: string;
  /** Session tag for logs (prompt_cache_key, else X-Session-Id). */
  session?: string;
  /** Test-only scripted output (x-mashbox-test-script with test_hooks on); never set otherwise. */
  scripted_text?: string;
}

/** ctx.state keys the server core writes. */
export const STATE = {
  tenant: "mashbox_tenant",
  session: "mashbox_session",
  scripted_text: "mashbox_scripted_text",
} as const;

export function requestContext(ctx: Koa.Context): RequestContext {
  const out: RequestContext = {};
  const tenant = ctx.state[STATE.tenant];
  const session = ctx.state[STATE.session];
  const scripted = ctx.state[STATE.scripted_text];
  if (typeof tenant === "string") out.tenant = tenant;
  if (typeof session === "string") out.session = session;
  if (typeof scripted === "string") out.scripted_text = scripted;
  return out;
}

/**
 * OpenAI routes: a model id other than the served one is model_not_found (404). Leaving the
 * model out is fine, and so is the served id.
 */
export function assertModel(deps: Pick<AppDeps, "model_id">, model: string | undefined | null): void {
  if (model === undefined || model === null || model === deps.model_id) return;
  throw new ApiError("model_not_found", `The model '${String(model).slice(0, 200)}' does not exist; this server runs '${deps.model_id}'.`, {
    param: "model",
  });
}

/** A response id: prefix + 24 random base62-ish characters (chatcmpl-, msg_, resp_, call_ ...). */
export function newId(prefix: string): string {
  const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const bytes = randomBytes(24);
  let s = "";
  // The slight modulo bias does not matter: ids need to be unique, not uniformly distributed.
  for (const b of bytes) s += alphabet[b % 62];
  return prefix + s;
}
