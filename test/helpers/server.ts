// The API test harness: createApp on a REAL engine (a fixture model from test/fixtures, made by
// `npm run fixtures`) in this process, over real HTTP, with validate_responses on. Every
// contract violation a server records fails the test that caused it: importing this module
// installs a root-level afterEach that calls assertNoContractViolations(). Requests may carry
// scripted output (scriptHeader, test/helpers/script.ts).
import { existsSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { createEngine, type EngineOptions, type ManagedEngine } from "../../src/engine/engine.js";
import type { Engine } from "../../src/engine/types.js";
import { createApp, type AppOptions, type MashboxApp } from "../../src/server.js";
import { loadApiKeys } from "../../src/security.js";
import { scriptingEngine, serveScripts } from "./script.js";

export { scriptHeader } from "./script.js";

/**
 * Fixture models in order of preference; then SmolLM2-135M (MB_MODEL), the fastest real model, so
 * a fresh checkout still runs. Not the product's default (Qwen2.5-Coder-0.5B): these tests need a
 * model, not that one.
 */
export const MODEL_CANDIDATES = [
  "test/fixtures/llama-q8_0.gguf",
  "test/fixtures/llama-q4_0.gguf",
  "test/fixtures/llama-f32.gguf",
  (process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`),
];

export function defaultModelPath(): string {
  const found = MODEL_CANDIDATES.find((p) => existsSync(p));
  if (!found) throw new Error(`no test model: run \`npm run fixtures\` (looked for ${MODEL_CANDIDATES.join(", ")})`);
  return found;
}

export interface TestServerOptions {
  model_path?: string;
  api_keys_file?: string;
  /** --host the app is configured with (it always listens on 127.0.0.1 in tests). */
  host?: string;
  slots?: number;
  ctx?: number;
  ui?: boolean;
  /** Wait for the model to load before resolving (default true). */
  wait_ready?: boolean;
  /** Honour x-test-script (test/helpers/script.ts); default true. False serves the app as production does. */
  scripts?: boolean;
  /** Serve this engine instead of a real one (only for states a real engine cannot be held in). */
  engine?: Engine;
  model_id?: string;
  /** Engine options over the harness defaults (a cache size, a batch size...). */
  engine_options?: Partial<EngineOptions>;
  /** App options over the harness defaults (a stall limit, a body limit...). */
  app?: Partial<AppOptions>;
}

export interface TestServer {
  url: string;
  port: number;
  app: MashboxApp;
  engine: Engine;
  /** Request log lines the server wrote. */
  logs: string[];
  close(): Promise<void>;
}

const live = new Set<MashboxApp>();

export async function startTestServer(opts: TestServerOptions = {}): Promise<TestServer> {
  const model_id = opts.model_id ?? "test-model";
  const slots = opts.slots ?? 2;
  const ctx = opts.ctx ?? 512;
  let managed: ManagedEngine | null = null;
  const inner: Engine =
    opts.engine ??
    (managed = createEngine({
      model_path: opts.model_path ?? defaultModelPath(),
      model_id,
      n_ctx: ctx,
      n_slots: slots,
      n_threads: 1, // the dev box is shared: one thread per test engine
      ...opts.engine_options,
    }));
  const scripts = opts.scripts !== false;
  const engine = scripts ? scriptingEngine(inner) : inner;
  const logs: string[] = [];
  let app: MashboxApp;
  try {
    app = createApp({
      engine,
      model_id,
      host: opts.host ?? "127.0.0.1",
      port: 0,
      api_keys: opts.api_keys_file ? loadApiKeys({ file: opts.api_keys_file }) : null,
      ui: opts.ui,
      validate_responses: true,
      log: (line) => {
        logs.push(line);
        if (line.startsWith("CONTRACT VIOLATION") || line.startsWith("internal error")) process.stderr.write(`[server] ${line}\n`);
      },
      ...opts.app,
    });
  } catch (e) {
    await managed?.close();
    throw e;
  }
  const { port, server } = await app.listen(0, "127.0.0.1");
  if (scripts) serveScripts(server);
  live.add(app);
  if (managed && opts.wait_ready !== false) {
    try {
      await managed.ready();
    } catch (e) {
      await app.close();
      await managed.close();
      live.delete(app);
      throw e;
    }
  }
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    app,
    engine,
    logs,
    async close() {
      // A last check here too: violations of the final test must not slip through.
      const left = app.contract_violations.splice(0);
      live.delete(app);
      await app.close();
      await managed?.close();
      if (left.length) throw new Error(`contract violations:\n  ${left.join("\n  ")}`);
    },
  };
}

/** Throws (failing the current test) if any live test server answered outside openapi.json. */
export function assertNoContractViolations(): void {
  const all: string[] = [];
  for (const app of live) all.push(...app.contract_violations.splice(0));
  if (all.length) throw new Error(`the server answered outside openapi.json:\n  ${all.join("\n  ")}`);
}

/** JSON POST helper. */
export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
}

// Mocha's BDD globals exist while spec files load; at this module's top level the current
// suite is the root, so this hook runs after every test of the run.
declare const afterEach: ((fn: () => void) => void) | undefined;
if (typeof afterEach === "function") {
  afterEach(function contractCheck() {
    assertNoContractViolations();
  });
}

/** A request over node:http, which (unlike fetch) lets a test set Host and Origin freely. */
export function rawRequest(
  port: number,
  opts: { method?: string; path: string; headers?: Record<string, string>; body?: string },
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: "127.0.0.1", port, method: opts.method ?? "GET", path: opts.path, headers: opts.headers }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", reject);
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}
