// The part of the golden-file harness that every dialect shares: reading the fixtures, rendering a
// fixture's events through the dialect (a thrown ApiError becomes `{ status, error }` in the
// dialect's error shape) and rewriting the expected outputs. Each dialect's golden.test.ts keeps
// the checks that are specific to its wire format.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { GenerationEvent } from "../../src/engine/types.js";
import { ApiError, type ErrorDialect } from "../../src/errors.js";
import type { SseFrame } from "../../src/http/sse.js";

/** One golden file: the request, render context and engine events, plus the expected outputs. */
export interface Golden {
  request: any;
  render: any;
  events: GenerationEvent[];
  response: any;
  stream: any[];
}

/** What differs between dialects: how events become a response and a stream, and the error shape. */
export interface GoldenDialect {
  errors: ErrorDialect;
  fromInternal(golden: Golden): unknown;
  encoder(golden: Golden): { push(ev: GenerationEvent): SseFrame[] };
}

/** The folder of the golden files for the module at `moduleUrl` (pass `import.meta.url`). */
export function goldenDir(moduleUrl: string): string {
  return dirname(fileURLToPath(moduleUrl));
}

/** The golden file names in `dir`, each with its parsed contents. */
export function readGoldens(dir: string): Array<{ name: string; golden: Golden }> {
  return readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .map((name) => ({ name, golden: JSON.parse(readFileSync(join(dir, name), "utf8")) as Golden }));
}

/** The non-streamed wire output: the response, or `{ status, error }` when the dialect throws an ApiError. */
export function renderResponse(dialect: GoldenDialect, golden: Golden): any {
  try {
    return dialect.fromInternal(golden);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { status: e.status(dialect.errors), error: e.body(dialect.errors) };
  }
}

/** The stream frames a fresh encoder emits for the golden events, and the encoder (to push more). */
export function renderStream(dialect: GoldenDialect, golden: Golden): { frames: SseFrame[]; encoder: { push(ev: GenerationEvent): SseFrame[] } } {
  const encoder = dialect.encoder(golden);
  return { frames: golden.events.flatMap((ev) => encoder.push(ev)), encoder };
}

/** Rewrites the expected outputs of every golden file in `dir` from the current dialect code. */
export function regenerate(dir: string, dialect: GoldenDialect): void {
  for (const { name, golden } of readGoldens(dir)) {
    const response = renderResponse(dialect, golden);
    const { frames: stream } = renderStream(dialect, golden);
    writeFileSync(join(dir, name), JSON.stringify({ ...golden, response, stream }, null, 2) + "\n");
  }
}
