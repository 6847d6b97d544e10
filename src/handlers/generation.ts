// Running one generation for a handler (run.ts): the bits every route repeats (metrics
// observation, collecting a non-streamed answer, peeking at the first event before committing to
// a 200 stream). Engine-level only: no koa, no wire shapes, no dialect.
import type { Engine, GenerationEvent, GenerationRequest } from "../engine/types.js";
import { ERROR_CATALOG, type ErrorCode } from "../errors.js";
import type { AppDeps } from "../app/context.js";

/** Whether an error event is the server failing the request (5xx), not a refusal of it (4xx). */
function isFailure(code: string): boolean {
  return (ERROR_CATALOG[code as ErrorCode]?.status ?? 500) >= 500;
}

/**
 * Calls deps.observe.generation once, when the "done" event passes through, or when an error
 * event says the request failed (finish_reason "error"). A `whole` request gets its events only
 * at the end, so its time to first token is the engine's own (queue + prompt time) rather than
 * the arrival of the first event.
 */
export function observer(observe: AppDeps["observe"], whole = false): (ev: GenerationEvent) => void {
  const t0 = performance.now();
  let first: number | null = null;
  let reported = false;
  let prompt = { prompt_tokens: 0, cached_tokens: 0 };
  return (ev) => {
    if (reported) return;
    if (ev.type === "start") prompt = { prompt_tokens: ev.prompt_tokens, cached_tokens: ev.cached_tokens };
    if (first === null && (ev.type === "text" || ev.type === "thinking" || ev.type === "tool_call_start")) first = performance.now();
    if (ev.type === "error" && isFailure(ev.code)) {
      reported = true;
      observe.generation({ finish_reason: "error", ...prompt, completion_tokens: 0, ttft_ms: null, queue_ms: 0, e2e_ms: performance.now() - t0 });
      return;
    }
    if (ev.type !== "done") return;
    reported = true;
    observe.generation({
      finish_reason: ev.finish_reason,
      prompt_tokens: ev.usage.prompt_tokens,
      cached_tokens: ev.usage.cached_tokens,
      completion_tokens: ev.usage.completion_tokens,
      ttft_ms: first === null ? null : whole ? ev.timings.queue_ms + ev.timings.prompt_ms : first - t0,
      queue_ms: ev.timings.queue_ms,
      e2e_ms: performance.now() - t0,
    });
  };
}

/** All events of a non-streamed request, up to and including "done" or "error". */
export async function collect(engine: Engine, req: GenerationRequest, signal: AbortSignal, tap: (ev: GenerationEvent) => void): Promise<GenerationEvent[]> {
  const events: GenerationEvent[] = [];
  for await (const ev of engine.submit(req, signal)) {
    tap(ev);
    events.push(ev);
    if (ev.type === "done" || ev.type === "error") break;
  }
  return events;
}

/** The first step of a stream: its event, its end, or a failure before any event. */
export type FirstStep = { ok: true; r: IteratorResult<GenerationEvent> } | { ok: false; err: unknown };

/**
 * Starts a generation and waits up to wait_ms for its first event, so that a request refused
 * before it ran (queue full, prompt too long, loading) is answered with a JSON error, not a 200
 * stream. first is null when the wait ran out (the request is still queued for a slot); the
 * caller then commits to the stream and reads the step later from pending, which never rejects.
 * Throws at once what submit throws synchronously (rate limits, loading).
 */
export async function startStream(
  engine: Engine,
  req: GenerationRequest,
  signal: AbortSignal,
  wait_ms: number,
): Promise<{ first: FirstStep | null; pending: Promise<FirstStep>; rest: AsyncIterator<GenerationEvent> }> {
  const rest = engine.submit(req, signal)[Symbol.asyncIterator]();
  const pending: Promise<FirstStep> = rest.next().then(
    (r) => ({ ok: true as const, r }),
    (err: unknown) => ({ ok: false as const, err }),
  );
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), wait_ms);
  });
  const first = await Promise.race([pending, timeout]);
  clearTimeout(timer);
  return { first, pending, rest };
}
