import type Koa from "koa";
import type { Socket } from "node:net";
import { PassThrough } from "node:stream";
import { capSendBuffer } from "./socket.js";

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

/** A client that takes no byte of its stream for this long is disconnected and its generation stops. */
export const STALLED_READER_MS = 30_000;

export interface SseWriter {
  write(frames: Array<SseFrame | SseComment>): void;
  end(): void;
  /** Aborts when the client disconnects or stops taking bytes for the stall limit. */
  readonly signal: AbortSignal;
}

/**
 * Bytes of this response that the kernel has not taken yet: what the stream and the socket
 * still hold. The socket's own share is writableLength; bytesWritten - writableLength is what
 * the kernel accepted, which moves as long as the client reads.
 */
function backlog(out: PassThrough, socket: Socket | null): { held: number; taken: number } {
  const own = out.readableLength + out.writableLength;
  if (!socket) return { held: own, taken: 0 };
  return { held: own + socket.writableLength, taken: socket.bytesWritten - socket.writableLength };
}

/**
 * Switches the koa response to an SSE stream. Call before the first event.
 *
 * The stall clock starts at the first moment a write is left undrained (the kernel stopped
 * taking this response's bytes) and restarts whenever the kernel takes more, however large the
 * stream and socket buffers are; it never waits for them to fill. Once it reaches stall_ms the
 * connection is destroyed and `signal` aborts, which cancels the generation and frees its slot.
 */
export function openSse(ctx: Koa.Context, opts: { stall_ms?: number } = {}): SseWriter {
  const stall_ms = opts.stall_ms ?? STALLED_READER_MS;
  const out = new PassThrough();
  const abort = new AbortController();
  const socket = ctx.req.socket as Socket | null;
  capSendBuffer(socket);
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

  let stalled_since: number | null = null;
  let last_taken = -1;
  const check = () => {
    if (abort.signal.aborted) return clearInterval(watch);
    const { held, taken } = backlog(out, socket);
    if (held === 0 || taken !== last_taken) {
      last_taken = taken;
      stalled_since = held === 0 ? null : Date.now();
      return;
    }
    stalled_since ??= Date.now();
    if (Date.now() - stalled_since < stall_ms) return;
    clearInterval(watch);
    stop();
    out.destroy();
    socket?.destroy();
  };
  // A tenth of the limit keeps the reaction within 10 % of it; 1 s is precise enough at 30 s.
  const watch = setInterval(check, Math.max(5, Math.min(1000, Math.floor(stall_ms / 10))));
  watch.unref();

  return {
    signal: abort.signal,
    write(frames) {
      if (ended || abort.signal.aborted || frames.length === 0) return;
      out.write(frames.map(formatSse).join(""));
      // Starts the clock now if this write is already stuck, rather than at the next tick.
      if (stalled_since === null) check();
    },
    end() {
      if (ended) return;
      ended = true;
      // The last frames may still be on their way: the watch keeps guarding the socket until
      // they are taken, and stops with it.
      out.end();
      out.once("end", () => {
        if (backlog(out, socket).held === 0) clearInterval(watch);
      });
      ctx.res.once("finish", () => clearInterval(watch));
      ctx.res.once("close", () => clearInterval(watch));
    },
  };
}
