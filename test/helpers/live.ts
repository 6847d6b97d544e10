// A live server for the HTTP tests that need server options the shared harness does not take
// (stall limit, body limit, a big context): a real engine on a fixture model, real HTTP, every
// answer checked against openapi.json (violations fail close()).
import { createEngine, type ManagedEngine } from "../../src/engine/engine.js";
import { createApp, type AppOptions, type MashboxApp } from "../../src/server.js";
import { defaultModelPath } from "./server.js";

export interface LiveServer {
  url: string;
  port: number;
  app: MashboxApp;
  engine: ManagedEngine;
  logs: string[];
  close(): Promise<void>;
}

export async function startLiveServer(opts: { ctx?: number; slots?: number; model_path?: string; app?: Partial<AppOptions> } = {}): Promise<LiveServer> {
  const model_id = "test-model";
  const engine = createEngine({
    model_path: opts.model_path ?? defaultModelPath(),
    model_id,
    n_ctx: opts.ctx ?? 512,
    n_slots: opts.slots ?? 1,
    n_threads: 1, // the dev box is shared
  });
  const logs: string[] = [];
  const app = createApp({
    engine,
    model_id,
    host: "127.0.0.1",
    port: 0,
    validate_responses: true,
    log: (line) => logs.push(line),
    ...opts.app,
  });
  const { port } = await app.listen(0, "127.0.0.1");
  try {
    await engine.ready();
  } catch (e) {
    await app.close();
    await engine.close();
    throw e;
  }
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    app,
    engine,
    logs,
    async close() {
      const left = app.contract_violations.splice(0);
      await app.close();
      await engine.close();
      if (left.length) throw new Error(`the server answered outside openapi.json:\n  ${left.join("\n  ")}`);
    },
  };
}
