// A bare koa app around one handler and a scripted in-memory Engine: exercises a handler's HTTP
// and SSE plumbing (commit points, background pumping, error rendering) without the native engine.
import Koa from "koa";
import type { AddressInfo } from "node:net";
import type { Engine, GenerationEvent, GenerationRequest } from "../../src/engine/types.js";
import { ApiError, type ErrorDialect } from "../../src/errors.js";
import type { Handler } from "../../src/handlers/types.js";
import type { AppDeps } from "../../src/app/context.js";

export interface FakeEngineScript {
  /** Events yielded, one per tick; an ApiError entry is thrown from the iterator instead. */
  events: Array<GenerationEvent | ApiError>;
  prompt_tokens?: number;
  /** Delay before each event (default 1 ms); a long one stands in for a slow prefill. */
  tick_ms?: number;
}

export function fakeEngine(script: FakeEngineScript, seen: GenerationRequest[] = []): Engine {
  return {
    state: "ready",
    model: {
      id: "fake-model",
      path: "/nonexistent/fake.gguf",
      architecture: "llama",
      n_ctx: 4096,
      n_ctx_train: 4096,
      slots: 1,
      n_vocab: 256,
      file_bytes: 0,
      bpw: 8,
      chat_template: null,
      bos_token: null,
      eos_token: null,
    },
    async countTokens() {
      return script.prompt_tokens ?? 0;
    },
    submit(req: GenerationRequest, signal?: AbortSignal): AsyncIterable<GenerationEvent> {
      seen.push(req);
      return (async function* () {
        for (const ev of script.events) {
          await new Promise((r) => setTimeout(r, script.tick_ms ?? 1));
          if (signal?.aborted) return;
          if (ev instanceof ApiError) throw ev;
          yield ev;
        }
      })();
    },
    stats() {
      return {
        slots_total: 1,
        slots_in_use: 0,
        waiting: 0,
        kv_tokens_used: 0,
        kv_tokens_total: 4096,
        prefix_lookups: 0,
        prefix_hit_tokens: 0,
        prefix_lookup_tokens: 0,
        worker_pid: null,
        worker_restarts: 0,
      };
    },
  };
}

export async function serveHandler(handler: Handler, engine: Engine, dialect: ErrorDialect, overrides: Partial<AppDeps> = {}): Promise<{ url: string; generations: string[]; close(): Promise<void> }> {
  const generations: string[] = [];
  const deps: AppDeps = {
    engine,
    model_id: "fake-model",
    openapi_document: {},
    observe: { generation: (ev) => generations.push(ev.finish_reason) },
    metrics_text: async () => "",
    ...overrides,
  };
  const app = new Koa();
  app.use(async (ctx, next) => {
    try {
      await next();
    } catch (e) {
      const err = e instanceof ApiError ? e : new ApiError("internal_error", (e as Error).message);
      ctx.status = err.status(dialect);
      ctx.body = err.body(dialect);
    }
  });
  app.use(async (ctx) => {
    const chunks: Buffer[] = [];
    for await (const c of ctx.req) chunks.push(c as Buffer);
    const requestBody = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    await handler({ request: { requestBody } } as never, ctx, deps);
  });
  const server = app.listen(0, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    generations,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

export function parseSse(text: string): Array<{ event?: string; data: any }> {
  return text
    .split("\n\n")
    .filter((b) => b.trim() !== "" && !b.split("\n").every((l) => l.startsWith(":")))
    .map((block) => {
      const lines = block.split("\n");
      const event = lines.find((l) => l.startsWith("event: "))?.slice(7);
      const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      return { ...(event ? { event } : {}), data: data === "[DONE]" ? data : JSON.parse(data) };
    });
}
