// An in-memory Engine double for client tests that must run without the native engine: it
// "generates" the request's scripted text (x-mashbox-test-script), one word-sized token at a
// time, through the real output parser (src/chat/parser.ts), honouring stop strings and the
// token budget the way the engine does. Prompt tokens are a fixed function of the prompt, so
// countTokens and usage agree as they do on the real engine.
import { OutputParser } from "../../src/chat/parser.js";
import type { Engine, GenerationEvent, GenerationRequest } from "../../src/engine/types.js";
import { fakeEngine } from "./fake-app.js";

function promptTokens(input: GenerationRequest["input"]): number {
  return Math.ceil(JSON.stringify(input).length / 4);
}

export function scriptedEngine(model_id = "scripted-model"): Engine {
  const base = fakeEngine({ events: [] });
  return {
    ...base,
    model: { ...base.model, id: model_id },
    async countTokens(input) {
      return promptTokens(input);
    },
    submit(req: GenerationRequest, signal?: AbortSignal): AsyncIterable<GenerationEvent> {
      return (async function* () {
        let text = req.scripted_text ?? "Hello.";
        let stop_sequence: string | null = null;
        for (const s of req.stop) {
          const at = text.indexOf(s);
          if (at >= 0 && (stop_sequence === null || at < text.indexOf(stop_sequence))) stop_sequence = s;
        }
        if (stop_sequence !== null) text = text.slice(0, text.indexOf(stop_sequence));
        let tokens: string[] = text.match(/\s*\S+|\s+/g) ?? [];
        const truncated = req.max_tokens !== null && tokens.length > req.max_tokens;
        if (truncated) tokens = tokens.slice(0, req.max_tokens!);
        const prompt_tokens = promptTokens(req.input);
        yield { type: "start", prompt_tokens, cached_tokens: 0 };
        let n = 0;
        const parser =
          req.input.kind === "chat" ? new OutputParser({ tools: req.input.chat.tools, starts_in_thinking: false, new_call_id: () => `call_scripted_${n++}` }) : null;
        for (const tok of tokens) {
          await new Promise((r) => setTimeout(r, 0));
          if (signal?.aborted) return;
          if (parser) yield* parser.push(tok);
          else yield { type: "text", text: tok };
        }
        if (parser) yield* parser.finish();
        const finish_reason = truncated ? "length" : stop_sequence !== null ? "stop_sequence" : parser && parser.tool_calls > 0 ? "tool_calls" : "stop";
        yield {
          type: "done",
          finish_reason,
          stop_sequence,
          usage: { prompt_tokens, cached_tokens: 0, completion_tokens: tokens.length, reasoning_tokens: 0 },
          timings: { prompt_n: prompt_tokens, prompt_ms: 1, prompt_per_second: null, predicted_n: tokens.length, predicted_ms: 1, predicted_per_second: null, cache_n: 0, queue_ms: 0 },
        };
      })();
    },
  };
}
