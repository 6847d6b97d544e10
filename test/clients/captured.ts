// Reads the captured client requests kept in test/fixtures/clients/ (one JSON request per line).
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

export const CLIENTS_DIR = process.env.MASHBOX_CLIENTS_DIR ?? new URL("../fixtures/clients", import.meta.url).pathname;

export interface CapturedRequest {
  /** file:line, for test names. */
  where: string;
  file: string;
  method: string;
  path: string;
  url: string;
  headers: Record<string, string>;
  body: Record<string, any> | null;
}

function jsonlFiles(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) return jsonlFiles(p);
      return name.endsWith(".jsonl") ? [p] : [];
    });
}

export function capturedRequests(filter: (r: CapturedRequest) => boolean = () => true): CapturedRequest[] {
  const out: CapturedRequest[] = [];
  for (const file of jsonlFiles(CLIENTS_DIR)) {
    const rel = relative(CLIENTS_DIR, file);
    readFileSync(file, "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (line.trim() === "") return;
        const r = JSON.parse(line);
        out.push({ where: `${rel}:${i + 1}`, file: rel, method: r.method, path: r.path, url: r.url, headers: r.headers ?? {}, body: r.body ?? null });
      });
  }
  return out.filter(filter);
}

// Hop-by-hop and addressing headers belong to the capture's connection, not to the request.
const DROP_HEADERS = new Set(["host", "content-length", "connection", "accept-encoding", "transfer-encoding", "keep-alive", "origin", "authorization", "x-api-key"]);

/** The captured request's own headers (user agent, betas, stainless ids ...), minus the above. */
export function replayHeaders(r: CapturedRequest): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) if (!DROP_HEADERS.has(k.toLowerCase())) headers[k] = String(v);
  return headers;
}
