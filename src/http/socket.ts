// Kernel facts about a streaming response's socket, for the stalled-reader clock (./sse.ts).
// setsockopt/getsockopt have no Node API, so they come from the native addon; where the addon or
// a call is missing every function here answers null and the clock falls back to watching what
// the kernel takes from this process.
//
// - A small kernel send buffer: Linux grows it up to 4 MiB (tcp_wmem), minutes of a token stream.
// - TCP_INFO: the right edge of the peer's receive window (bytes acked + window) moves when the
//   client's application reads, which is what the stall limit is about.
// - TCP_MAXSEG on the listening socket: a receiver reopens a closed window only once a segment's
//   worth of space is free, and over loopback a segment is up to 64 KiB, which would hide a slow
//   reader's progress for a minute; Ethernet-sized segments make it visible every few KB.
import type { Socket } from "node:net";
import { loadAddon } from "../engine/native.js";

/** Plenty for a token stream even across a slow link (~320 KB/s at 100 ms round trip). */
export const STREAM_SEND_BUFFER = 16 * 1024;
/** Ethernet's segment payload (1500 - IP - TCP headers): what a remote client sees anyway. */
export const MAX_SEGMENT = 1448;

interface SocketAddon {
  setSendBuffer?: (fd: number, bytes: number) => number;
  setMaxSegment?: (fd: number, bytes: number) => number;
  tcpInfo?: (fd: number) => [number, number, number, number] | null;
}
let addon: SocketAddon | null | undefined;

function native(): SocketAddon | null {
  if (addon === undefined) {
    try {
      addon = loadAddon() as unknown as SocketAddon;
    } catch {
      addon = null;
    }
  }
  return addon;
}

function fdOf(handleOwner: unknown): number | null {
  const fd = (handleOwner as { _handle?: { fd?: unknown } } | null)?._handle?.fd;
  return typeof fd === "number" && fd >= 0 ? fd : null;
}

/** Caps the socket's kernel send buffer; the size the kernel set, or null when it could not. */
export function capSendBuffer(socket: Socket | null | undefined, bytes = STREAM_SEND_BUFFER): number | null {
  const fd = fdOf(socket);
  const fn = native()?.setSendBuffer;
  if (typeof fn !== "function" || fd === null) return null;
  const got = fn(fd, bytes);
  return got > 0 ? got : null;
}

/** TCP_MAXSEG on a listening server (net.Server), inherited by the connections it accepts; false when it could not. */
export function capMaxSegment(server: unknown, bytes = MAX_SEGMENT): boolean {
  const fd = fdOf(server);
  const fn = native()?.setMaxSegment;
  if (typeof fn !== "function" || fd === null) return false;
  return fn(fd, bytes) === 0;
}

export interface PeerWindow {
  /** Bytes the peer acknowledged plus its advertised window: moves when its application reads. */
  edge: number;
  /** The advertised window itself (bytes). */
  window: number;
  /** Bytes in this socket's kernel queue not sent yet. */
  notsent: number;
  /** The largest segment this socket sends (bytes). */
  segment: number;
}

/** The peer's receive window as TCP_INFO reports it, or null where it cannot be read. */
export function peerWindow(socket: Socket | null | undefined): PeerWindow | null {
  const fd = fdOf(socket);
  const fn = native()?.tcpInfo;
  if (typeof fn !== "function" || fd === null) return null;
  const info = fn(fd);
  if (!info) return null;
  const [acked, window, notsent, segment] = info;
  return { edge: acked + window, window, notsent, segment };
}
