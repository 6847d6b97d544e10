// A live server for the HTTP tests that need server options beyond the usual ones (stall limit,
// body limit, a big context): the shared harness (./server.ts) serving the app as production does,
// without test scripts, one slot by default. Every answer is checked against openapi.json.
import type { AppOptions } from "../../src/server.js";
import type { EngineOptions } from "../../src/engine/engine.js";
import { startTestServer, type TestServer } from "./server.js";

export type LiveServer = TestServer;

export function startLiveServer(
  opts: { ctx?: number; slots?: number; model_path?: string; model_id?: string; engine_options?: Partial<EngineOptions>; app?: Partial<AppOptions> } = {},
): Promise<LiveServer> {
  return startTestServer({ ...opts, slots: opts.slots ?? 1, scripts: false });
}
