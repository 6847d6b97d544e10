import type { FinishReason, Usage } from "../../engine/types.js";
import { fromEngineError } from "../../errors.js";
import type { ResponseUsage } from "./types.js";

/** The engine names calls neutrally; Responses clients expect call_… ids. */
export function callId(engine_id: string): string {
  return engine_id.startsWith("call_") ? engine_id : `call_${engine_id.replace(/^[A-Za-z]+_/, "")}`;
}

export function responseUsage(usage: Usage): ResponseUsage {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: usage.cached_tokens },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.reasoning_tokens },
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
  };
}

export function isIncomplete(finish: FinishReason): boolean {
  return finish === "length";
}

/** The engine's error event as the catalog error it names (engine_error when it names none). */
export const engineError = fromEngineError;
