// The output stage of one attempt at a request: what the engine does with the text the model
// generates, apart from admission, dispatch and retry (engine.ts). Pure: it is fed token pieces
// and answers with events, never talks to a worker, and its clock can be injected for tests.
//
//   token pieces ──▶ stop matcher ──▶ model-family parser ──▶ repeated-call guard ──▶ events
//                    (stop.ts)        (src/chat/parsers/)     (ends a looping answer)
//                                          │
//                                          └──▶ thinking budget: close the think block, and tell
//                                               the engine to resubmit the output as prompt
//   "done" ──▶ usage (prompt, cached, completion, reasoning tokens) and llama-server timings
//
// The engine makes a fresh stage for each attempt (a rerun after a worker fault starts over);
// the prompt's side (prompt and cached tokens, queue time) carries over until the new attempt's
// native start reports its own.
import type { FinishReason, GenerationEvent, GenerationRequest } from "./types.js";
import { StopMatcher } from "./stop.js";
import { parserOf, type OutputParser } from "../chat/parsers/index.js";
import type { ToolFamily } from "../chat/family.js";

export interface OutputStageOptions {
  /** The request's stop strings. */
  stop: readonly string[];
  /** The chat template family's parser; null: the output is plain text (a raw completion). */
  parser: OutputParser | null;
  /** Most tokens of thinking (ChatPrompt.thinking_budget); undefined = no budget. */
  thinking_budget?: number;
  /** Milliseconds on a monotonic clock (default performance.now). */
  now?: () => number;
}

/** The prompt's side of the usage and timings, as the native start reported it. */
export interface PromptSide {
  prompt_tokens: number;
  cached_tokens: number;
  queue_ms: number;
  /** When the native start arrived (the stage's clock). */
  t_start: number;
}

/** The native scheduler's own timings of a finished request. */
export interface NativeTimings {
  prompt_ms: number;
  predicted_ms: number;
  /** Speculative decoding: draft tokens verified, and those the output kept (absent: none). */
  draft_n?: number;
  draft_n_accepted?: number;
}

/**
 * The thinking budget ran out: the engine cancels the native request and submits the prompt
 * followed by `continuation` (the model's text so far and the closing tag), keeping
 * `literal` (in characters of the continuation) plain text, for at most `max_tokens` more.
 */
export interface Resubmit {
  continuation: string;
  literal: [number, number];
  /** Tokens generated so far in this attempt (the engine subtracts them from the budget). */
  completion_tokens: number;
}

/** What one piece of output led to: the events to send, and what the engine must do next. */
export interface StageStep {
  events: GenerationEvent[];
  /**
   * The answer ended early (a stop string, or a repeated tool call): the last event is "done" and
   * the engine cancels the native request.
   */
  ended: boolean;
  /** Set when the thinking budget ran out with this piece. */
  resubmit: Resubmit | null;
}

type Done = Extract<GenerationEvent, { type: "done" }>;

const EMPTY_PROMPT: PromptSide = { prompt_tokens: 0, cached_tokens: 0, queue_ms: 0, t_start: 0 };

/**
 * The parser of a chat request: the tools it may call (none under tool_choice "none": a call the
 * model writes anyway stays text) and call ids drawn from the request id.
 */
export function requestParser(req: GenerationRequest, family: ToolFamily | null, starts_in_thinking: boolean): OutputParser | null {
  if (req.input.kind !== "chat" || family === null) return null;
  const chat = req.input.chat;
  let n = 0;
  const base = req.id.replace(/[^A-Za-z0-9]/g, "").slice(-12) || "call";
  return parserOf(family, {
    tools: chat.tool_choice.type === "none" ? [] : chat.tools,
    starts_in_thinking,
    new_call_id: () => `call_${base}_${n++}`,
  });
}

export class OutputStage {
  /** The prompt's side of usage and timings (carried over from the attempt before, if any). */
  readonly prompt: PromptSide;
  private readonly stops: StopMatcher;
  private readonly parser: OutputParser | null;
  private readonly budget: number | undefined;
  private readonly now: () => number;
  private readonly calls = new CallGuard();
  private completion_tokens = 0;
  private reasoning_tokens = 0;
  private t_first: number | null = null;
  private t_last = 0;
  /** Raw text of the native request now running. */
  private generated = "";
  /** Text after the prompt that the running native request was given: thinking cut at its budget. */
  private continued = "";
  private ended = false;

  constructor(opts: OutputStageOptions, prompt: PromptSide = EMPTY_PROMPT) {
    this.stops = new StopMatcher(opts.stop);
    this.parser = opts.parser;
    this.budget = opts.thinking_budget;
    this.now = opts.now ?? (() => performance.now());
    this.prompt = { ...prompt };
  }

  /** The native request was resubmitted past the thinking budget (it is the same answer). */
  get resumed(): boolean {
    return this.continued !== "";
  }

  /** Everything the model wrote in this attempt, with a closing tag the budget added. */
  get output(): string {
    return this.continued + this.generated;
  }

  /** Whether the stage has written its "done" event. */
  get finished(): boolean {
    return this.ended;
  }

  /**
   * The native request started. False when it is the same answer resubmitted past its thinking
   * budget (its prompt numbers are the first request's); true for the attempt's own start.
   */
  start(e: { prompt_tokens: number; cached_tokens: number; queue_ms: number }): boolean {
    if (this.resumed) return false;
    this.prompt.prompt_tokens = e.prompt_tokens;
    this.prompt.cached_tokens = e.cached_tokens;
    this.prompt.queue_ms = e.queue_ms;
    this.prompt.t_start = this.now();
    return true;
  }

  /** One generated token's text. */
  token(text: string): StageStep {
    const now = this.now();
    if (this.t_first === null) this.t_first = now;
    this.t_last = now;
    this.completion_tokens++;
    this.generated += text;
    const step: StageStep = { events: [], ended: false, resubmit: null };
    if (text.length > 0 && this.release(step, text, false)) return step;
    if (this.budget !== undefined && this.parser?.in_thinking && this.reasoning_tokens >= this.budget) step.resubmit = this.cutThinking(step.events);
    return step;
  }

  /** The native request finished (`text`: its last, not yet released output); the last event is "done". */
  done(text: string, finish: FinishReason, native: NativeTimings | null): StageStep {
    const step: StageStep = { events: [], ended: false, resubmit: null };
    if (this.release(step, text, true)) return step;
    this.finish(step.events, finish, null, native);
    return step;
  }

  /** The client went away: "done" with finish_reason "cancelled", the parser's held text dropped. */
  cancel(): GenerationEvent[] {
    const events: GenerationEvent[] = [];
    this.finish(events, "cancelled", null, null);
    return events;
  }

  /** Releases generated text: through the stop matcher, then the parser; true when the answer ended. */
  private release(step: StageStep, text: string, final: boolean): boolean {
    const r = this.stops.push(text);
    const out = r.stop === null && final ? r.text + this.stops.flush() : r.text;
    if (out.length > 0) {
      if (this.parser) {
        const evs = this.parser.push(out);
        if (evs.some((e) => e.type === "thinking")) this.reasoning_tokens++;
        if (this.calls.filter(evs, step.events)) {
          // The model called a tool again exactly as before in this answer: it is looping.
          this.finish(step.events, "stop", null, null, false);
          step.ended = true;
          return true;
        }
      } else step.events.push({ type: "text", text: out });
    }
    if (r.stop !== null) {
      this.finish(step.events, "stop_sequence", r.stop, null);
      step.ended = true;
      return true;
    }
    return false;
  }

  /**
   * thinking.budget_tokens reached: the think block is closed the way the template writes it and
   * the answer continues from a resubmitted request (the slot still holds the tokens, so its
   * prefill is a few tokens), which the client sees as one uninterrupted response.
   */
  private cutThinking(events: GenerationEvent[]): Resubmit {
    const close = this.parser!.thinking_close;
    events.push(...this.parser!.push(close));
    // The model's own text stays plain text; only the closing tag may be a control token.
    const at = this.continued.length;
    const literal: [number, number] = [at, at + this.generated.length];
    this.continued += this.generated + close;
    this.generated = "";
    return { continuation: this.continued, literal, completion_tokens: this.completion_tokens };
  }

  private finish(events: GenerationEvent[], reason: FinishReason, stop_sequence: string | null, native: NativeTimings | null, flush = true): void {
    if (this.ended) return;
    this.ended = true;
    // A request resubmitted past its thinking budget has timings of its own, not the native ones.
    if (this.resumed) native = null;
    if (this.parser && reason !== "cancelled" && flush) {
      this.calls.filter(this.parser.finish(), events);
      events.push(...this.calls.release());
    }
    if (this.parser && this.parser.tool_calls > 0 && (reason === "stop" || reason === "stop_sequence")) reason = "tool_calls";
    events.push(this.doneEvent(reason, stop_sequence, native));
  }

  private doneEvent(reason: FinishReason, stop_sequence: string | null, native: NativeTimings | null): Done {
    const p = this.prompt;
    const now = this.now();
    const prompt_n = p.prompt_tokens - p.cached_tokens;
    const prompt_ms = native ? native.prompt_ms : this.t_first !== null ? this.t_first - p.t_start : now - p.t_start;
    const predicted_ms = native ? native.predicted_ms : this.t_first !== null ? this.t_last - this.t_first : 0;
    const predicted_n = this.completion_tokens;
    return {
      type: "done",
      finish_reason: reason,
      stop_sequence,
      usage: {
        prompt_tokens: p.prompt_tokens,
        cached_tokens: p.cached_tokens,
        completion_tokens: this.completion_tokens,
        reasoning_tokens: this.reasoning_tokens,
      },
      timings: {
        prompt_n,
        prompt_ms,
        prompt_per_second: prompt_ms > 0 && prompt_n > 0 ? (prompt_n * 1000) / prompt_ms : null,
        predicted_n,
        predicted_ms,
        // The first token ends the prompt phase; decode speed is the n - 1 tokens after it.
        predicted_per_second: predicted_ms > 0 && predicted_n > 1 ? ((predicted_n - 1) * 1000) / predicted_ms : null,
        cache_n: p.cached_tokens,
        queue_ms: p.queue_ms,
        draft_n: native?.draft_n ?? 0,
        draft_n_accepted: native?.draft_n_accepted ?? 0,
      },
    };
  }
}

/** A call's arguments compared as JSON values where they parse (key order and spacing aside). */
function canonical(args: string): string {
  try {
    return JSON.stringify(sortKeys(JSON.parse(args)));
  } catch {
    return args;
  }
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v === null || typeof v !== "object") return v;
  const o = v as Record<string, unknown>;
  return Object.fromEntries(Object.keys(o).sort().map((k) => [k, sortKeys(o[k])]));
}

/**
 * Ends an answer at a tool call identical (name and arguments) to an earlier call in the same
 * answer: small models fall into calling the same tool the same way until max_tokens (issue 24).
 * A call whose name an earlier call had is held back while its arguments so far are the start of
 * that call's: a repeat is then dropped whole, and the answer ends with the calls before it. A
 * call whose text differs but whose arguments are the same JSON value was streamed already; it
 * stays, and the answer ends after it.
 */
class CallGuard {
  /** Finished calls of this answer: name and canonical arguments. */
  private readonly done: { name: string; args: string; raw: string }[] = [];
  /** Calls still open, by index. */
  private readonly open = new Map<number, { name: string; args: string; held: GenerationEvent[] | null }>();

  /** Moves `evs` to `out`, holding back a possible repeat; true when a repeat ended the answer. */
  filter(evs: GenerationEvent[], out: GenerationEvent[]): boolean {
    for (const e of evs) {
      if (e.type === "tool_call_start") {
        const same = this.done.some((d) => d.name === e.name);
        this.open.set(e.index, { name: e.name, args: "", held: same ? [e] : null });
        if (!same) out.push(e);
        continue;
      }
      if (e.type !== "tool_call_delta" && e.type !== "tool_call_end") {
        out.push(e);
        continue;
      }
      const call = this.open.get(e.index);
      if (!call) {
        out.push(e);
        continue;
      }
      if (e.type === "tool_call_delta") {
        call.args += e.arguments;
        if (call.held === null) out.push(e);
        else if (this.done.some((d) => d.name === call.name && d.raw.startsWith(call.args))) call.held.push(e);
        else {
          out.push(...call.held, e);
          call.held = null;
        }
        continue;
      }
      this.open.delete(e.index);
      const args = canonical(e.arguments);
      const repeat = this.done.some((d) => d.name === call.name && d.args === args);
      if (repeat) {
        if (call.held === null) out.push(e);
        return true;
      }
      if (call.held !== null) out.push(...call.held);
      out.push(e);
      this.done.push({ name: call.name, args, raw: e.arguments });
    }
    return false;
  }

  /** The events still held back (the answer ended without settling them). */
  release(): GenerationEvent[] {
    const out: GenerationEvent[] = [];
    for (const call of this.open.values()) if (call.held !== null) out.push(...call.held);
    this.open.clear();
    return out;
  }
}
