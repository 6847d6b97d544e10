// The part of the golden-file harness that every dialect shares: reading the fixtures, rendering a
// fixture's events through the dialect (a thrown ApiError becomes `{ status, error }` in the
// dialect's error shape), the checks that hold for every dialect, and rewriting the expected
// outputs. Each dialect's golden.test.ts adds the checks that are specific to its wire format.
import { expect } from "chai";
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
  /** The folder name under test/golden/. */
  name: string;
  /** Scenarios (file names without .json) a dialect must have a golden file for. */
  required: string[];
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

/**
 * The golden suite of a dialect over the files next to `moduleUrl` (pass `import.meta.url`): every
 * required scenario is there, and per file the response and stream frames are as recorded and the
 * encoder emits nothing after the end. `checks` adds the dialect's own tests inside each file's suite.
 */
export function describeGoldens(dialect: GoldenDialect, moduleUrl: string, checks: (golden: Golden) => void): void {
  const goldens = readGoldens(goldenDir(moduleUrl));
  describe(`golden: ${dialect.name}`, () => {
    it("covers every required scenario", () => {
      const files = goldens.map((g) => g.name);
      for (const need of dialect.required) expect(files, need).to.include(`${need}.json`);
    });

    for (const { name, golden } of goldens) {
      describe(name.replace(/\.json$/, ""), () => {
        it("non-streamed response", () => {
          expect(renderResponse(dialect, golden)).to.deep.equal(golden.response);
        });

        it("stream frames, and nothing after the stream ended", () => {
          const { frames, encoder } = renderStream(dialect, golden);
          expect(JSON.parse(JSON.stringify(frames))).to.deep.equal(golden.stream);
          expect(encoder.push({ type: "text", text: "late" })).to.deep.equal([]);
        });

        checks(golden);
      });
    }
  });
}
