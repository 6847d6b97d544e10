import type Koa from "koa";
import { PassThrough } from "node:stream";

/** One server-sent event. `event` is omitted for OpenAI-style `data:`-only streams. */
export interface SseFrame {
  event?: string;
  data: unknown; // objects are JSON-encoded; strings (e.g. "[DONE]") are sent as they are
}

/** A comment line: clients skip it, but its bytes keep idle timers from firing. */
export interface SseComment {
  comment: string;
}

export function formatSse(frame: SseFrame | SseComment): string {
  if ("comment" in frame) return `: ${frame.comment}\n\n`;
  const data = typeof frame.data === "string" ? frame.data : JSON.stringify(frame.data);
  return (frame.event ? `event: ${frame.event}\n` : "") + `data: ${data}\n\n`;
}

/** A client that reads nothing for this long is disconnected and its generation stops. */
export const STALLED_READER_MS = 30_000;

export interface SseWriter {
  write(frames: Array<SseFrame | SseComment>): void;
  end(): void;
  /** Aborts when the client disconnects or stops reading for STALLED_READER_MS. */
  readonly signal: AbortSignal;
}

/** Switches the koa response to an SSE stream. Call before the first event. */
export function openSse(ctx: Koa.Context): SseWriter {
  const out = new PassThrough();
  const abort = new AbortController();
  let stallTimer: NodeJS.Timeout | null = null;
  let ended = false;
  ctx.status = 200;
  ctx.set("Content-Type", "text/event-stream; charset=utf-8");
  ctx.set("Cache-Control", "no-cache");
  ctx.set("Connection", "keep-alive");
  ctx.set("X-Accel-Buffering", "no");
  ctx.body = out;
  const stop = () => {
    if (!abort.signal.aborted) abort.abort();
  };
  ctx.req.on("close", () => {
    if (!ended) stop();
  });
  ctx.res.on("close", () => {
    if (!ended) stop();
  });
  out.on("drain", () => {
    if (stallTimer) clearTimeout(stallTimer);
    stallTimer = null;
  });
  return {
    signal: abort.signal,
    write(frames) {
      if (ended || abort.signal.aborted || frames.length === 0) return;
      const ok = out.write(frames.map(formatSse).join(""));
      if (!ok && !stallTimer) {
        stallTimer = setTimeout(() => {
          stop();
          out.destroy();
        }, STALLED_READER_MS);
        stallTimer.unref();
      }
    },
    end() {
      if (ended) return;
      ended = true;
      if (stallTimer) clearTimeout(stallTimer);
      out.end();
    },
  };
}
