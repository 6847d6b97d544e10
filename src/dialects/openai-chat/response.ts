import type { GenerationEvent } from "../../engine/types.js";
import type { ChatCompletion, RenderContext } from "./types.js";
import { callId, chatUsage, engineError, finishReason, timings } from "./wire.js";

type ToolCall = NonNullable<ChatCompletion["choices"][number]["message"]["tool_calls"]>[number];

/** A finished generation's events → the non-streamed ChatCompletion. Throws the engine's error. */
export function fromInternal(events: GenerationEvent[], rc: RenderContext): ChatCompletion {
  let text = "";
  let thinking = "";
  const calls: ToolCall[] = [];
  for (const ev of events) {
    switch (ev.type) {
      case "text":
        text += ev.text;
        break;
      case "thinking":
        thinking += ev.text;
        break;
      case "tool_call_start":
        calls[ev.index] = { id: callId(ev.id), type: "function", function: { name: ev.name, arguments: "" } };
        break;
      case "tool_call_delta":
        calls[ev.index].function.arguments += ev.arguments;
        break;
      case "tool_call_end":
        calls[ev.index].function.arguments = ev.arguments;
        break;
      case "error":
        throw engineError(ev);
      case "done": {
        const message: ChatCompletion["choices"][number]["message"] = {
          role: "assistant",
          // OpenAI's shape: a pure tool-call answer has content null, an empty answer "".
          content: text === "" && calls.length > 0 ? null : text,
          ...(thinking !== "" ? { reasoning_content: thinking } : {}),
          ...(calls.length > 0 ? { tool_calls: calls.filter(Boolean) } : {}),
        };
        return {
          id: rc.id,
          object: "chat.completion",
          created: rc.created,
          model: rc.model_id,
          choices: [{ index: 0, message, finish_reason: finishReason(ev.finish_reason), logprobs: null }],
          usage: chatUsage(ev.usage),
          timings: timings(ev.timings),
        };
      }
      default:
        break;
    }
  }
  throw engineError({ code: "engine_error", message: "The generation ended without a result." });
}
