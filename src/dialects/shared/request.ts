// Request fields that every generating route shares (sampling, budget, stop), read with the
// spec's defaults and ranges: both come from openapi.json (src/generated/limits.ts), never
// restated here. openapi-backend has validated the body against the same bounds; these checks
// only keep an engine-level caller from passing what the contract refuses. Neutral: each dialect
// passes its own budget field names, and the helpers never know which wire they serve.
import type { GenerationRequest, SamplingParams } from "../../engine/types.js";
import type { RequestContext } from "./context.js";
import { badField, unsupported } from "../../errors.js";
import { FIELD_LIMITS, type FieldLimits } from "../../generated/limits.js";

export interface CommonFields {
  sampling: SamplingParams;
  max_tokens: number | null;
  stop: string[];
}

type Body = Record<string, unknown>;

function isSet(v: unknown): boolean {
  return v !== undefined && v !== null;
}

/** Whether `v` is within a field's bounds (numbers: type, minimum, maximum and their exclusive forms). */
export function withinLimits(l: FieldLimits, v: number): boolean {
  if (!Number.isFinite(v) || (l.type === "integer" && !Number.isInteger(v))) return false;
  if (l.minimum !== undefined && v < l.minimum) return false;
  if (l.exclusiveMinimum !== undefined && v <= l.exclusiveMinimum) return false;
  if (l.maximum !== undefined && v > l.maximum) return false;
  if (l.exclusiveMaximum !== undefined && v >= l.exclusiveMaximum) return false;
  return true;
}

/** The range of a numeric field in words: "between 0 and 4", "in (0, 1]", "an integer >= 0", "> 0", "1". */
export function rangeText(l: FieldLimits): string {
  if (l.minimum !== undefined && l.minimum === l.maximum) return String(l.minimum);
  const lo = l.minimum ?? l.exclusiveMinimum;
  const hi = l.maximum ?? l.exclusiveMaximum;
  const int = l.type === "integer" ? "an integer " : "";
  if (lo !== undefined && hi !== undefined) {
    if (l.minimum !== undefined && l.maximum !== undefined) return `${int}between ${lo} and ${hi}`;
    return `${int}in ${l.minimum !== undefined ? "[" : "("}${lo}, ${hi}${l.maximum !== undefined ? "]" : ")"}`;
  }
  if (lo !== undefined) return `${int}${l.minimum !== undefined ? ">=" : ">"} ${lo}`;
  if (hi !== undefined) return `${int}${l.maximum !== undefined ? "<=" : "<"} ${hi}`;
  return int === "" ? "a number" : "an integer";
}

type SamplingField = Exclude<keyof SamplingParams, "seed">;

/** A sampling field: its spec default when absent, else a number within the spec's bounds. */
function num(body: Body, field: SamplingField): number {
  const l: FieldLimits = FIELD_LIMITS[field];
  const v = body[field];
  if (!isSet(v)) return l.default as number;
  if (typeof v !== "number" || !withinLimits(l, v)) throw badField(field, `must be ${rangeText(l)}`);
  return v;
}

/** Spec defaults: greedy, every filter and penalty off, random seed. */
export function samplingParams(body: Body): SamplingParams {
  const sampling: SamplingParams = {
    temperature: num(body, "temperature"),
    top_p: num(body, "top_p"),
    top_k: num(body, "top_k"),
    min_p: num(body, "min_p"),
    repetition_penalty: num(body, "repetition_penalty"),
    frequency_penalty: num(body, "frequency_penalty"),
    presence_penalty: num(body, "presence_penalty"),
  };
  if (isSet(body.seed)) {
    // The contract bounds seed to the integers a JSON number holds exactly (|seed| <= 2^53 - 1).
    if (typeof body.seed !== "number" || !withinLimits(FIELD_LIMITS.seed, body.seed)) throw badField("seed", "must be an integer");
    sampling.seed = body.seed;
  }
  return sampling;
}

/**
 * Token budget. `fields` is in precedence order (the first one set wins), e.g.
 * ["max_completion_tokens", "max_tokens"] for the OpenAI routes; null = up to the context end.
 */
export function maxTokens(body: Body, fields: ("max_tokens" | "max_completion_tokens" | "max_output_tokens")[]): number | null {
  for (const field of fields) {
    const v = body[field];
    if (!isSet(v)) continue;
    const l: FieldLimits = FIELD_LIMITS[field];
    if (typeof v !== "number" || !withinLimits(l, v)) throw badField(field, `must be ${rangeText(l)}`);
    return v;
  }
  return null;
}

/** `stop` (string or list) wins; `stop_sequences` is used only when `stop` is absent. */
export function stopStrings(body: Body): string[] {
  const field = isSet(body.stop) ? "stop" : "stop_sequences";
  const raw = body[field];
  if (!isSet(raw)) return [];
  const list = typeof raw === "string" ? [raw] : raw;
  if (!Array.isArray(list)) throw badField(field, "must be a string or a list of strings");
  // In code points, as JSON Schema's minLength counts them.
  const min = FIELD_LIMITS[field].minLength;
  const what = min === 1 ? "a non-empty string" : `a string of at least ${min} characters`;
  list.forEach((s, i) => {
    if (typeof s !== "string" || [...s].length < min) throw badField(`${field}[${i}]`, `must be ${what}`);
  });
  return [...new Set(list as string[])];
}

/** Fields the spec lists as "not supported": any truthy value is refused, false/null/absent pass. */
export function rejectSet(body: Body, fields: string[], why: string): void {
  for (const field of fields) {
    const v = body[field];
    if (isSet(v) && v !== false) throw unsupported(field, why);
  }
}

/** `n` exists for compatibility only: the contract bounds it to one choice per request. */
export function requireSingleChoice(body: Body): void {
  const l: FieldLimits = FIELD_LIMITS.n;
  if (isSet(body.n) && (typeof body.n !== "number" || !withinLimits(l, body.n))) throw badField("n", `must be ${rangeText(l)}`);
}

/**
 * Everything above in one call, as every generating route needs it. `budget_fields` in
 * precedence order.
 */
export function commonGenerationFields(body: Body, budget_fields: Parameters<typeof maxTokens>[1] = ["max_completion_tokens", "max_tokens"]): CommonFields {
  rejectSet(body, ["logprobs", "top_logprobs"], "log probabilities");
  requireSingleChoice(body);
  return { sampling: samplingParams(body), max_tokens: maxTokens(body, budget_fields), stop: stopStrings(body) };
}

/** The neutral request of a route: its input, the shared fields, and the context's id and tenant. */
export function generationRequest(ctx: RequestContext, input: GenerationRequest["input"], common: CommonFields): GenerationRequest {
  return {
    id: ctx.id,
    input,
    sampling: common.sampling,
    max_tokens: common.max_tokens,
    stop: common.stop,
    ...(ctx.tenant !== undefined ? { tenant: ctx.tenant } : {}),
  };
}

/** `chat_template_kwargs.enable_thinking` and the top-level shorthand; the top-level one wins. */
export function enableThinking(body: Body): boolean | undefined {
  const top = body.enable_thinking;
  if (isSet(top)) {
    if (typeof top !== "boolean") throw badField("enable_thinking", "must be a boolean");
    return top;
  }
  const kwargs = body.chat_template_kwargs;
  if (isSet(kwargs) && typeof kwargs === "object") {
    const v = (kwargs as Body).enable_thinking;
    if (isSet(v)) {
      if (typeof v !== "boolean") throw badField("chat_template_kwargs.enable_thinking", "must be a boolean");
      return v;
    }
  }
  return undefined;
}
