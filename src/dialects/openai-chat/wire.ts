import type { FinishReason, Timings, Usage } from "../../engine/types.js";
import { fromEngineError } from "../../errors.js";
import type { ChatUsage, StreamError } from "./types.js";

/** Chat Completions knows stop / length / tool_calls; a stop string is a plain "stop" there. */
export function finishReason(reason: FinishReason): "stop" | "length" | "tool_calls" {
  if (reason === "length") return "length";
  if (reason === "tool_calls") return "tool_calls";
  return "stop";
}

export function chatUsage(usage: Usage): ChatUsage {
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
    prompt_tokens_details: { cached_tokens: usage.cached_tokens },
  };
}

export function timings(t: Timings): Timings {
  return { ...t };
}

/** OpenAI clients expect call_… ids; the engine's own ids keep their unique part. */
export function callId(engine_id: string): string {
  return engine_id.startsWith("call_") ? engine_id : `call_${engine_id.replace(/^[A-Za-z]+_/, "")}`;
}

/** The engine's error event as the catalog error it names (engine_error when it names none). */
export const engineError = fromEngineError;

/** The data: payload that ends a stream which failed after it had sent output. */
export function streamError(ev: { code: string; message: string }, request_id: string): StreamError {
  const body = engineError(ev).body("openai") as { error: StreamError["error"] };
  return { error: body.error, request_id };
}
