// A streaming response's socket with a small kernel send buffer. Linux grows a socket's send
// buffer up to 4 MiB (tcp_wmem), so a client that stops reading a slow token stream would keep
// "taking" bytes for many minutes; the stall clock (./sse.ts) can only start once a write stays
// undrained. The cap comes from the native addon (setsockopt has no Node API); where the addon
// or the call is missing the socket keeps the kernel's default and the clock simply starts later.
import type { Socket } from "node:net";
import { loadAddon } from "../engine/native.js";

/** Plenty for a token stream even across a slow link (~320 KB/s at 100 ms round trip). */
export const STREAM_SEND_BUFFER = 16 * 1024;

type SetSendBuffer = (fd: number, bytes: number) => number;
let setSendBuffer: SetSendBuffer | null | undefined;

function native(): SetSendBuffer | null {
  if (setSendBuffer === undefined) {
    try {
      const fn = (loadAddon() as unknown as { setSendBuffer?: SetSendBuffer }).setSendBuffer;
      setSendBuffer = typeof fn === "function" ? fn : null;
    } catch {
      setSendBuffer = null;
    }
  }
  return setSendBuffer;
}

/** Caps the socket's kernel send buffer; the size the kernel set, or null when it could not. */
export function capSendBuffer(socket: Socket | null | undefined, bytes = STREAM_SEND_BUFFER): number | null {
  const fd = (socket as unknown as { _handle?: { fd?: unknown } } | null)?._handle?.fd;
  const fn = native();
  if (!fn || typeof fd !== "number" || fd < 0) return null;
  const got = fn(fd, bytes);
  return got > 0 ? got : null;
}
