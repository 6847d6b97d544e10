// An in-memory Engine double for client tests that must run without the native engine: it
// "generates" the request's scripted text (x-test-script, test/helpers/script.ts), one
// word-sized token at a time, through the engine's own stop matcher (src/engine/stop.ts) and
// output parser (src/chat/parsers/hermes.ts), honouring the token budget the way the engine does. Prompt tokens are a fixed function of the prompt, so
// countTokens and usage agree as they do on the real engine.
import { HermesParser } from "../../src/chat/parsers/hermes.js";
import { StopMatcher } from "../../src/engine/stop.js";
import { currentScript } from "../helpers/script.js";
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
        const script = currentScript() ?? "Hello.";
        const tokens: string[] = script.match(/\s*\S+|\s+/g) ?? [];
        const budget = req.max_tokens ?? Infinity;
        const stops = new StopMatcher(req.stop);
        const prompt_tokens = promptTokens(req.input);
        yield { type: "start", prompt_tokens, cached_tokens: 0 };
        let n = 0;
        const parser =
          req.input.kind === "chat" ? new HermesParser({ tools: req.input.chat.tools, starts_in_thinking: false, new_call_id: () => `call_scripted_${n++}` }) : null;
        function* release(text: string): Generator<GenerationEvent> {
          if (text === "") return;
          if (parser) yield* parser.push(text);
          else yield { type: "text", text };
        }
        let used = 0;
        let stop_sequence: string | null = null;
        for (const tok of tokens) {
          if (used === budget) break;
          await new Promise((r) => setTimeout(r, 0));
          if (signal?.aborted) return;
          used++;
          const r = stops.push(tok);
          yield* release(r.text);
          if (r.stop !== null) {
            stop_sequence = r.stop;
            break;
          }
        }
        const truncated = stop_sequence === null && used < tokens.length;
        if (stop_sequence === null) yield* release(stops.flush());
        if (parser) yield* parser.finish();
        const finish_reason = truncated ? "length" : stop_sequence !== null ? "stop_sequence" : parser && parser.tool_calls > 0 ? "tool_calls" : "stop";
        yield {
          type: "done",
          finish_reason,
          stop_sequence,
          usage: { prompt_tokens, cached_tokens: 0, completion_tokens: used, reasoning_tokens: 0 },
          timings: { prompt_n: prompt_tokens, prompt_ms: 1, prompt_per_second: null, predicted_n: used, predicted_ms: 1, predicted_per_second: null, cache_n: 0, queue_ms: 0 },
        };
      })();
    },
  };
}
