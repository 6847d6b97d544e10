// OpenAI (legacy) Completions: a raw prompt continued without the chat template.
import { createHash } from "node:crypto";
import type { FinishReason, GenerationEvent, GenerationRequest } from "../../engine/types.js";
import { badField, fromEngineError } from "../../errors.js";
import type { components } from "../../generated/types.js";
import type { SseFrame } from "../../http/sse.js";
import { commonGenerationFields, generationRequest } from "../shared/request.js";
import type { CreatedRenderContext, RequestContext } from "../shared/context.js";

export type CompletionRequest = components["schemas"]["TextCompletionRequest"];
export type Completion = components["schemas"]["TextCompletion"];
type StreamError = components["schemas"]["OpenAIStreamError"];

export type { RequestContext };
/** cmpl-… id, served model id, unix seconds. */
export type RenderContext = CreatedRenderContext;

/**
 * Stable per served model: clients use system_fingerprint to notice that the backend changed,
 * and here only the model can change.
 */
export function systemFingerprint(model_id: string): string {
  return `seed-${createHash("sha256").update(model_id).digest("hex").slice(0, 12)}`;
}

export function promptText(prompt: CompletionRequest["prompt"]): string {
  if (typeof prompt === "string") return prompt;
  if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === "string") return prompt[0];
  throw badField("prompt", "must be a string or a list of one string");
}

export function toInternal(body: CompletionRequest, rc: RequestContext): GenerationRequest {
  const text = promptText(body.prompt);
  // Completions' logprobs is a count, so 0 asks for none and passes; anything else is refused.
  const json: Record<string, unknown> = { ...body };
  if (json.logprobs === 0) delete json.logprobs;
  const common = commonGenerationFields(json, ["max_completion_tokens", "max_tokens"]);
  return generationRequest(rc, { kind: "text", text }, common);
}

function finishReason(reason: FinishReason): "stop" | "length" {
  return reason === "length" ? "length" : "stop";
}

export const engineError = fromEngineError;

function base(rc: RenderContext): Omit<Completion, "choices"> {
  return { id: rc.id, object: "text_completion", created: rc.created, model: rc.model_id, system_fingerprint: systemFingerprint(rc.model_id) };
}

/** A finished generation's events → the non-streamed Completion. Throws the engine's error. */
export function fromInternal(events: GenerationEvent[], rc: RenderContext): Completion {
  let text = "";
  for (const ev of events) {
    // A raw prompt is not parsed for thinking or calls; should the engine split any, it is still text.
    if (ev.type === "text" || ev.type === "thinking") text += ev.text;
    else if (ev.type === "error") throw engineError(ev);
    else if (ev.type === "done") {
      return {
        ...base(rc),
        choices: [{ index: 0, text, finish_reason: finishReason(ev.finish_reason), logprobs: null }],
        usage: { prompt_tokens: ev.usage.prompt_tokens, completion_tokens: ev.usage.completion_tokens, total_tokens: ev.usage.prompt_tokens + ev.usage.completion_tokens },
        timings: { ...ev.timings },
      };
    }
  }
  throw engineError({ code: "engine_error", message: "The generation ended without a result." });
}

/** GenerationEvents → text_completion frames, the finishing one with timings, then [DONE]. */
export class CompletionStreamEncoder {
  private finished = false;

  constructor(
    private readonly rc: RenderContext,
    private readonly opts: { include_usage?: boolean } = {},
  ) {}

  /** True once "done" or "error" went out ([DONE] sent): later events are dropped. */
  get ended(): boolean {
    return this.finished;
  }

  push(ev: GenerationEvent): SseFrame[] {
    if (this.finished) return [];
    switch (ev.type) {
      case "start":
        // An empty piece at admission: the client sees its request is running while the
        // prompt is prefilled (seconds to minutes), not only a silent connection.
        return [{ data: { ...base(this.rc), choices: [{ index: 0, text: "", finish_reason: null, logprobs: null }] } satisfies Completion }];
      case "text":
      case "thinking":
        return ev.text === "" ? [] : [{ data: { ...base(this.rc), choices: [{ index: 0, text: ev.text, finish_reason: null, logprobs: null }] } satisfies Completion }];
      case "done": {
        this.finished = true;
        const out: SseFrame[] = [
          { data: { ...base(this.rc), choices: [{ index: 0, text: "", finish_reason: finishReason(ev.finish_reason), logprobs: null }], timings: { ...ev.timings } } satisfies Completion },
        ];
        if (this.opts.include_usage) {
          const u = ev.usage;
          out.push({ data: { ...base(this.rc), choices: [], usage: { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.prompt_tokens + u.completion_tokens } } satisfies Completion });
        }
        out.push({ data: "[DONE]" });
        return out;
      }
      case "error": {
        this.finished = true;
        const body = engineError(ev).body("openai") as { error: StreamError["error"] };
        return [{ data: { error: body.error, request_id: this.rc.id } satisfies StreamError }, { data: "[DONE]" }];
      }
      default:
        return [];
    }
  }
}
