import type Koa from "koa";
import type { Socket } from "node:net";
import { PassThrough } from "node:stream";
import { capSendBuffer, peerWindow } from "./socket.js";

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

/** The most padding one probe sends (a peer with a larger window has read megabytes lately). */
export const PROBE_MAX_BYTES = 256 * 1024;

/**
 * SSE comment lines of about `bytes` in all, ending at a frame boundary. Lines stay short
 * (1 KiB) because some SSE readers cap a line at 64 KiB.
 */
export function paddingComment(bytes: number): string {
  const line = `: ${".".repeat(1021)}\n`;
  return line.repeat(Math.max(1, Math.ceil(bytes / line.length))) + "\n";
}

/**
 * Switches the koa response to an SSE stream. Call before the first event.
 *
 * The stall clock is about the client's application, not about buffers (docs/STREAMS.md):
 * - where TCP_INFO can be read, a read shows as the right edge of the peer's receive window
 *   moving. The clock runs while bytes wait to be sent (the window is closed) and the edge has
 *   not moved for stall_ms;
 * - a peer that takes every byte does not have to be reading: Linux grows a receive buffer that
 *   small segments overfill up to tcp_rmem's maximum (tens of MB) rather than closing the window.
 *   So a stream whose peer took everything for a third of the limit gets one window's worth of
 *   padding (SSE comments, which clients skip): a reading client consumes it, a client that
 *   stopped reading now has a closed window and its clock starts. A client that stopped reading
 *   is thus cut within about 4/3 of the limit of its last read;
 * - without TCP_INFO the clock starts when this process's writes stay undrained.
 * Once it reaches stall_ms the connection is destroyed and `signal` aborts, which cancels the
 * generation and frees its slot.
 */
export function openSse(ctx: Koa.Context, opts: { stall_ms?: number } = {}): SseWriter {
  const stall_ms = opts.stall_ms ?? STALLED_READER_MS;
  const probe_ms = Math.max(1, Math.floor(stall_ms / 4));
  // A tenth of the limit keeps the reaction within 10 % of it; 1 s is precise enough at 30 s.
  const tick_ms = Math.max(5, Math.min(1000, Math.floor(stall_ms / 10)));
  const out = new PassThrough();
  const abort = new AbortController();
  const socket = ctx.req.socket as Socket | null;
  capSendBuffer(socket);
  const watches_peer = peerWindow(socket) !== null;
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
  let last_edge = -1;
  let all_taken_since = Date.now();
  let last_edge_at = Date.now();
  /** The peer's window when the last probe went out, until it is seen whole again. */
  let probe_window: number | null = null;
  const cut = () => {
    clearInterval(watch);
    stop();
    out.destroy();
    socket?.destroy();
  };
  const check = () => {
    if (abort.signal.aborted) return clearInterval(watch);
    const now = Date.now();
    const { held, taken } = backlog(out, socket);
    const peer = watches_peer ? peerWindow(socket) : null;
    if (peer === null) {
      if (held === 0 || taken !== last_taken) {
        last_taken = taken;
        stalled_since = held === 0 ? null : now;
        return;
      }
      stalled_since ??= now;
      if (now - stalled_since >= stall_ms) cut();
      return;
    }
    const read = peer.edge !== last_edge;
    if (read) last_edge_at = now;
    last_edge = peer.edge;
    if (held + peer.notsent === 0) {
      stalled_since = null;
      if (ended) return;
      // After a probe a reading client's window comes back whole; one that is not reading kept
      // part of the padding, and if its kernel grew the buffer rather than close the window,
      // a second window's worth closes it.
      const follow_up = probe_window !== null && peer.window < probe_window;
      if (!follow_up && now - all_taken_since < probe_ms) {
        if (probe_window !== null && now - all_taken_since >= 2 * tick_ms) probe_window = null;
        return;
      }
      probe_window = follow_up ? null : peer.window;
      all_taken_since = now;
      out.write(paddingComment(Math.min(PROBE_MAX_BYTES, peer.window + 4096)));
      return;
    }
    all_taken_since = now;
    probe_window = null;
    if (read) {
      stalled_since = null;
      return;
    }
    // Bytes wait and the client has not read since last_edge_at. A burst can wait a moment on
    // a client that reads (a congestion window, a probe), so the clock reaches back at most a
    // probe interval before the wait began.
    stalled_since ??= Math.max(last_edge_at, now - probe_ms);
    if (now - stalled_since >= stall_ms) cut();
  };
  const watch = setInterval(check, tick_ms);
  watch.unref();

  return {
    signal: abort.signal,
    write(frames) {
      if (ended || abort.signal.aborted || frames.length === 0) return;
      out.write(frames.map(formatSse).join(""));
      // Without TCP_INFO: starts the clock now if this write is already stuck, rather than at
      // the next tick. With it the tick decides: a write always waits a moment, which must not
      // count as the peer holding bytes back.
      if (stalled_since === null && !watches_peer) check();
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
