// Answers for requests the HTTP parser refuses before koa sees them (oversize head, malformed
// bytes, unknown methods, CONNECT, another HTTP version), in the route's error shape, closed so
// that the answer arrives: the socket is half-closed and its input drained for a moment, because
// closing a socket with unread input makes the kernel send a reset, which destroys the answer
// still in flight.
import { STATUS_CODES, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { ApiError } from "../errors.js";
import { dialectOf } from "./errors.js";

/** Request line plus headers (Node's default; the URL counts toward it). */
export const MAX_HEADER_BYTES = 16 * 1024;
/** How long a refused connection's input is drained after the answer before it is dropped. */
export const LINGER_MS = 2_000;

const answered = new WeakSet<Duplex>();

/** The request target of a raw request head ("GET /v1/models HTTP/1.1" -> "/v1/models"), or "". */
function targetOf(head: Buffer | undefined): string {
  const line = head?.subarray(0, Math.min(head.length, 8192)).toString("latin1").split("\r\n", 1)[0] ?? "";
  const target = line.split(" ")[1] ?? "";
  // An absolute-form target names its path after the authority.
  const path = /^[a-z][a-z0-9+.-]*:\/\/[^/]*(\/[^?#]*)?/i.exec(target)?.[1] ?? target.split(/[?#]/)[0];
  return path ?? "";
}

/** Writes `err` as a whole HTTP/1.1 response, then half-closes and drains the connection. */
export function refuse(socket: Duplex, err: ApiError, path: string, headers: Record<string, string> = {}): void {
  if (answered.has(socket)) return;
  answered.add(socket);
  const dialect = dialectOf(path);
  const status = err.status(dialect);
  const body = JSON.stringify(err.body(dialect));
  const lines = [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}`,
    "Content-Type: application/json; charset=utf-8",
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Connection: close",
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  linger(socket);
  if (socket.writable) socket.end(lines.join("\r\n") + "\r\n\r\n" + body);
}

/** Half-closes after what is written, discards input, and drops the connection after LINGER_MS. */
function linger(socket: Duplex): void {
  // The HTTP parser is done with this connection: later bytes must not reach it again.
  socket.removeAllListeners("data");
  socket.on("data", () => undefined);
  socket.on("error", () => undefined);
  socket.resume();
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}

function clientError(err: Error & { code?: string; rawPacket?: Buffer }, socket: Duplex): void {
  if (err.code === "ECONNRESET" || !socket.writable) return void socket.destroy();
  const path = targetOf(err.rawPacket);
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return refuse(socket, new ApiError("headers_too_large"), path);
    case "HPE_INVALID_METHOD":
      return refuse(socket, new ApiError("method_not_allowed"), path, { Allow: "GET, POST, HEAD" });
    case "HPE_INVALID_VERSION":
      return refuse(socket, new ApiError("http_version_not_supported"), path);
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return refuse(socket, new ApiError("malformed_request", "The request did not arrive in time."), path);
    default:
      return refuse(socket, new ApiError("malformed_request"), path);
  }
}

/**
 * The request listener for `app`, behind the checks the parser leaves to its user: only
 * HTTP/1.0 and 1.1, and a response that leaves its request body unread (413, an early error)
 * closes the connection gracefully instead of reading a body nobody wants.
 */
export function guardedListener(app: RequestListener): RequestListener {
  return (req: IncomingMessage, res: ServerResponse) => {
    if (req.httpVersionMajor !== 1 || req.httpVersionMinor > 1) {
      refuse(req.socket, new ApiError("http_version_not_supported"), targetOf(Buffer.from(`${req.method} ${req.url} `)));
      return;
    }
    // Decided as the headers go out, so the answer itself says Connection: close: a client that
    // reused the socket would otherwise send its next request into one being shut.
    const writeHead = res.writeHead;
    res.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse["writeHead"]>) {
      if (!req.complete) res.shouldKeepAlive = false;
      return writeHead.apply(this, args);
    } as ServerResponse["writeHead"];
    res.once("finish", () => {
      if (req.complete) return;
      // Answered before its body was read: no keep-alive on a connection still carrying it.
      linger(req.socket);
      req.socket.end();
    });
    app(req, res);
  };
}

/** Answers what the parser refuses (clientError) and CONNECT, which Node otherwise drops. */
export function guardServer(server: Server): void {
  server.on("clientError", clientError);
  server.on("connect", (_req: IncomingMessage, socket: Duplex) => {
    refuse(socket, new ApiError("method_not_allowed", "CONNECT is not served: this is not a proxy."), "", { Allow: "GET, POST, HEAD" });
  });
}
