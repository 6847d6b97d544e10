// The part of a generation handler that is the same on every route: cancel on disconnect,
// collect a non-streamed answer, or peek at the first event before committing to a 200 stream
// and pump the rest through the dialect's encoder. Handlers supply only the dialect pieces.
import type Koa from "koa";
import { collect, observer, startStream } from "./generation.js";
import type { GenerationEvent, GenerationRequest } from "../engine/types.js";
import { ApiError, fromEngineError } from "../errors.js";
import { openSse, type SseFrame } from "../http/sse.js";
import type { AppDeps } from "../app/context.js";

export interface StreamEncoder {
  push(ev: GenerationEvent): SseFrame[];
  /**
   * Frames that keep an idle stream alive (a long prefill sends nothing for minutes, and HTTP
   * clients such as undici give up after 300 s without a byte). Dialects with a keep-alive
   * event of their own (Anthropic's ping) return it; the default is an SSE comment.
   */
  keepalive?(): SseFrame[];
  /** True once the encoder wrote its final frame (done or error); later events are dropped. */
  readonly ended: boolean;
}

/** Quiet time on an open stream before a keep-alive frame is sent. */
export const SSE_KEEPALIVE_MS = 15_000;

const UNFINISHED = { type: "error", code: "engine_error", message: "The generation ended without a result." } as const;

export async function runGeneration(
  ctx: Koa.Context,
  deps: AppDeps,
  req: GenerationRequest,
  dialect: { stream: boolean; whole: (events: GenerationEvent[]) => unknown; encoder: () => StreamEncoder },
): Promise<void> {
  const tap = observer(deps.observe, !dialect.stream);
  // The client leaving before the answer is written cancels the generation.
  const abort = new AbortController();
  ctx.res.once("close", () => {
    if (!ctx.res.writableEnded) abort.abort();
  });

  // A request that fails before or outside its events still counts as failed (tap ignores refusals).
  const failed = (err: unknown): never => {
    const e = err instanceof ApiError ? err : new ApiError("internal_error");
    tap({ type: "error", code: e.code, message: e.message });
    throw err;
  };
  if (!dialect.stream) {
    const events = await collect(deps.engine, { ...req, whole: true }, abort.signal, tap).catch(failed);
    ctx.body = dialect.whole(events);
    return;
  }
  const quiet_ms = deps.sse_keepalive_ms ?? SSE_KEEPALIVE_MS;
  // A stream still waiting for a slot after one keep-alive period is committed to its 200 and
  // kept alive while it waits (undici drops a response whose headers take 300 s); a refusal
  // after that point arrives as the dialect's in-stream error.
  const { first, pending, rest } = await startStream(deps.engine, req, abort.signal, quiet_ms);
  if (first !== null) {
    if (!first.ok) failed(first.err);
    else if (first.r.done) failed(fromEngineError(UNFINISHED));
    else if (first.r.value.type === "error") failed(fromEngineError(first.r.value));
  }
  const sse = openSse(ctx, { stall_ms: deps.sse_stall_ms });
  sse.signal.addEventListener("abort", () => abort.abort());
  const enc = dialect.encoder();
  let last_write = Date.now();
  let started = false;
  const send = (ev: GenerationEvent) => {
    tap(ev);
    sse.write(enc.push(ev));
    started = true;
    last_write = Date.now();
  };
  const keepalive = setInterval(() => {
    if (enc.ended || Date.now() - last_write < quiet_ms) return;
    // Before the dialect's first event only a comment is safe (an Anthropic ping before
    // message_start is out of order).
    sse.write((started && enc.keepalive?.()) || [{ comment: "keep-alive" }]);
    last_write = Date.now();
  }, Math.max(10, Math.floor(quiet_ms / 3)));
  keepalive.unref();
  if (first === null) sse.write([{ comment: "waiting for a slot" }]);
  // Koa sends the body only after the handler returns, so the stream is pumped in the background.
  void (async () => {
    try {
      const step = await pending;
      if (!step.ok) throw step.err;
      if (!step.r.done) {
        send(step.r.value);
        for (let r = await rest.next(); !r.done && !enc.ended; r = await rest.next()) send(r.value);
      }
      // An iterator that stops without "done"/"error" still ends the stream the dialect's way.
      if (!enc.ended && !abort.signal.aborted) send(UNFINISHED);
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError("engine_error", (err as Error)?.message ?? String(err));
      send({ type: "error", code: e.code, message: e.message });
    } finally {
      clearInterval(keepalive);
      sse.end();
      await rest.return?.().catch(() => undefined);
    }
  })();
}
