import type { FinishReason, GenerationEvent, Usage } from "../../engine/types.js";
import { ApiError, fromEngineError } from "../../errors.js";
import { omitsThinking } from "./request.js";
import { THINKING_SIGNATURE, type Message, type MessagesRequest, type MessageUsage, type RenderContext, type ResponseBlock, type StopReason } from "./types.js";

/** The engine names calls neutrally; Anthropic clients expect toolu_… ids. */
export function toolUseId(engine_id: string): string {
  return engine_id.startsWith("toolu_") ? engine_id : `toolu_${engine_id.replace(/^[A-Za-z]+_/, "")}`;
}

export function stopReason(finish: FinishReason): StopReason {
  switch (finish) {
    case "length":
      return "max_tokens";
    case "stop_sequence":
      return "stop_sequence";
    case "tool_calls":
      return "tool_use";
    default:
      // "cancelled" never reaches a client; "error" is rendered as an error, not a message.
      return "end_turn";
  }
}

export function messageUsage(usage: Pick<Usage, "prompt_tokens" | "cached_tokens" | "completion_tokens">): MessageUsage {
  return {
    input_tokens: Math.max(0, usage.prompt_tokens - usage.cached_tokens),
    cache_read_input_tokens: usage.cached_tokens,
    cache_creation_input_tokens: 0,
    output_tokens: usage.completion_tokens,
  };
}

/**
 * Tool input must be an object on the wire. The output parser only closes a call on complete
 * JSON, so anything else is a parser fault; the raw text is kept rather than dropped.
 */
export function parseToolInput(args: string): Record<string, unknown> {
  if (args.trim() === "") return {};
  try {
    const v: unknown = JSON.parse(args);
    if (v !== null && typeof v === "object" && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // fall through
  }
  return { input: args };
}

/** The engine's error event as the catalog error it names (engine_error when it names none). */
export const engineError = fromEngineError;

/** A finished generation's events → the Messages response. Throws the engine's error, if any. */
export function fromInternal(events: GenerationEvent[], body: MessagesRequest, rc: RenderContext): Message {
  const content: ResponseBlock[] = [];
  const omit = omitsThinking(body);
  const calls = new Map<number, { type: "tool_use"; id: string; name: string; input: Record<string, unknown> }>();
  let done: Extract<GenerationEvent, { type: "done" }> | null = null;
  const last = () => content[content.length - 1];
  for (const ev of events) {
    switch (ev.type) {
      case "text": {
        const block = last();
        if (block?.type === "text") block.text += ev.text;
        else content.push({ type: "text", text: ev.text });
        break;
      }
      case "thinking": {
        const block = last();
        const text = omit ? "" : ev.text;
        if (block?.type === "thinking") block.thinking += text;
        else content.push({ type: "thinking", thinking: text, signature: THINKING_SIGNATURE });
        break;
      }
      case "tool_call_start": {
        const block = { type: "tool_use" as const, id: toolUseId(ev.id), name: ev.name, input: {} };
        calls.set(ev.index, block);
        content.push(block);
        break;
      }
      case "tool_call_end": {
        const block = calls.get(ev.index);
        if (block) block.input = parseToolInput(ev.arguments);
        break;
      }
      case "done":
        done = ev;
        break;
      case "error":
        throw engineError(ev);
      default:
        break;
    }
  }
  if (!done) throw new ApiError("engine_error", "The generation ended without a result.");
  return {
    id: rc.id,
    type: "message",
    role: "assistant",
    model: body.model ?? rc.model_id,
    content,
    stop_reason: stopReason(done.finish_reason),
    stop_sequence: done.finish_reason === "stop_sequence" ? done.stop_sequence : null,
    usage: messageUsage(done.usage),
  };
}
