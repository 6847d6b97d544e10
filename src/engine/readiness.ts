// The one "not ready" answer: the engine, the server's route gate and the CLI's stand-in engine
// (while the model is still being pulled) all refuse generation with exactly this error.
import { ApiError } from "../errors.js";
import type { Engine, ModelInfo } from "./types.js";

/**
 * Seconds a client should wait before trying again while the model loads or its worker starts
 * again after a fault (both are one model load; a small model takes about a second, a large
 * one several).
 */
export const NOT_READY_RETRY_AFTER_S = 5;

/** The error generation routes answer with in `state`; null when ready. */
export function notReadyError(state: Engine["state"]): ApiError | null {
  switch (state) {
    case "ready":
      return null;
    case "failed":
      return new ApiError("engine_error", "The model failed to load.");
    case "restarting":
      return new ApiError("loading", "The model's worker is restarting after a fault.", { retry_after: NOT_READY_RETRY_AFTER_S });
    case "loading":
      return new ApiError("loading", undefined, { retry_after: NOT_READY_RETRY_AFTER_S });
  }
}

/** What is known of a model before it has loaded: what the server was told to run. */
export function unloadedModel(m: { id: string; path: string; n_ctx: number; slots: number }): ModelInfo {
  return { ...m, architecture: "", n_ctx_train: 0, n_vocab: 0, file_bytes: 0, bpw: 0, chat_template: null, bos_token: null, eos_token: null };
}
