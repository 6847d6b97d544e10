// Helpers every handler uses.
import { randomBytes } from "node:crypto";
import { ApiError } from "../errors.js";
import type { AppDeps } from "../app/context.js";

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
