// The koa app: request log → error rendering (+ contract checks in test mode) → security →
// HEAD → routing / body / validation (openapi-backend) → the operation's handler.
import Koa from "koa";
import { koaBody } from "koa-body";
import { OpenAPIBackend, type Context as ApiContext } from "openapi-backend";
import { Ajv2020 } from "ajv/dist/2020.js";
import { createServer, type Server } from "node:http";
import { Stream } from "node:stream";
import type { AddressInfo } from "node:net";
import type { Engine } from "./engine/types.js";
import { ApiError } from "./errors.js";
import { operations, type OperationId } from "./generated/operations.js";
import { handlers } from "./handlers/index.js";
import type { Handler } from "./handlers/types.js";
import { STATE, matchedRoute, type AppDeps, type MatchedRoute } from "./app/context.js";
import { notReadyError } from "./engine/readiness.js";
import { createMetrics } from "./metrics.js";
import { ApiKeys, requireJson, securityMiddleware } from "./security.js";
import { DEFAULTS } from "./config.js";
import { renderError, requestValidationError, toApiError } from "./http/errors.js";
import { ContractRecorder } from "./http/contract.js";
import { setServerInfo } from "./http/server-info.js";
import { canonicalPath } from "./http/route.js";
import { capMaxSegment } from "./http/socket.js";
import { MAX_HEADER_BYTES, guardServer, guardedListener } from "./http/wire.js";
import { createResponseValidator, readOpenapiDocument } from "./contract/validator.js";
import { addUnsupportedKeyword } from "./contract/unsupported.js";
import { fillModelId } from "./contract/model-id.js";

export interface AppOptions {
  engine: Engine;
  model_id: string;
  /** --host: what the server binds to and answers to (default 127.0.0.1). */
  host?: string;
  /** --port (default 8000; 0 = any free port, known after listen()). */
  port?: number;
  /** Parsed keys (security.loadApiKeys); required when host is not loopback. */
  api_keys?: ApiKeys | null;
  /** --allowed-host: more Host names answered, on any port (security.ts). */
  allowed_hosts?: string[];
  /** --metrics-without-key: /metrics needs no key (security.ts). */
  metrics_without_key?: boolean;
  /** --ui: GET / is the chat page. */
  ui?: boolean;
  /** --body-limit (bytes): larger request bodies get 413 (default DEFAULTS.body_limit_mib). */
  body_limit_bytes?: number;
  /** --stall-timeout (ms): a stream whose client takes no bytes for this long is closed (default STALLED_READER_MS). */
  sse_stall_ms?: number;
  /** --cache-ram (MiB), reported in Model and Health. */
  cache_ram_mib?: number;
  /** Where request log lines go (default stderr). */
  log?: (line: string) => void;
  /** Defaults to openapi.json at the repository root. */
  openapi_document?: Record<string, unknown>;
  // ---- programmatic only: no CLI flag or environment variable reaches these ----
  /** Tests: validate every JSON answer and SSE event against openapi.json, recording violations. */
  validate_responses?: boolean;
  /** Tests: quiet time before a stream's keep-alive frame (default SSE_KEEPALIVE_MS). */
  sse_keepalive_ms?: number;
}

export interface MashboxApp {
  app: Koa;
  deps: AppDeps;
  /** Contract violations seen so far (validate_responses only); drain with splice(0). */
  contract_violations: string[];
  /** Starts listening; resolves with the bound port and base URL. */
  listen(port?: number, host?: string): Promise<{ server: Server; port: number; url: string }>;
  close(): Promise<void>;
}

const SESSION_MAX = 64;

/** A session tag safe for one log line: printable, bounded. */
function sessionTag(v: unknown): string | undefined {
  if (typeof v !== "string" || v === "") return undefined;
  return v.replace(/[^\x21-\x7e]/g, "?").slice(0, SESSION_MAX);
}

function tooLarge(limit: number): ApiError {
  return new ApiError("payload_too_large", `The request body is over this server's limit of ${limit} bytes (--body-limit).`);
}

export function createApp(opts: AppOptions): MashboxApp {
  const host = opts.host ?? DEFAULTS.host;
  let boundPort = opts.port ?? DEFAULTS.port;
  const log = opts.log ?? ((line: string) => process.stderr.write(line + "\n"));
  const rawDoc = opts.openapi_document ?? readOpenapiDocument();
  const document = fillModelId(rawDoc, opts.model_id);
  const metrics = createMetrics(opts.engine);
  const deps: AppDeps = {
    engine: opts.engine,
    model_id: opts.model_id,
    openapi_document: document,
    observe: metrics.observe,
    metrics_text: () => metrics.text(),
    ...(opts.sse_keepalive_ms !== undefined ? { sse_keepalive_ms: opts.sse_keepalive_ms } : {}),
    ...(opts.sse_stall_ms !== undefined ? { sse_stall_ms: opts.sse_stall_ms } : {}),
  };
  setServerInfo(deps, { ui: opts.ui === true, cache_ram_mib: opts.cache_ram_mib ?? 0, prefix_cache: true });
  const contract = opts.validate_responses ? new ContractRecorder(createResponseValidator(rawDoc), log) : null;
  // Throws (refusing to start) when the host is not loopback and no key is configured.
  const security = securityMiddleware({
    host,
    port: () => boundPort,
    keys: opts.api_keys ?? null,
    allowed_hosts: opts.allowed_hosts,
    metrics_without_key: opts.metrics_without_key,
    operation: (ctx) => matchedRoute(ctx)?.id,
  });

  // openapi.json is OpenAPI 3.1 (JSON Schema 2020-12); openapi-backend's own definition check
  // knows only 3.0, so `quick` skips it (the contract engineer lints the document with redocly)
  // and Ajv2020 compiles the request schemas.
  const api = new OpenAPIBackend({
    definition: structuredClone(document) as never,
    validate: true,
    quick: true,
    // The first error only: a 400 names one field, and collecting every error of a body with a
    // million wrong items took gigabytes and overflowed openapi-backend's push(...errors) (500).
    customizeAjv: (_ajv, ajvOpts) => addUnsupportedKeyword(new Ajv2020({ ...ajvOpts, strict: false, allErrors: false, validateFormats: false })) as never,
  });
  const call = (h: Handler) => (c: ApiContext, ctx: Koa.Context) => h(c, ctx, deps);
  api.register({
    ...Object.fromEntries(Object.entries(handlers).map(([id, h]) => [id, call(gate(id as OperationId, h))])),
    validationFail: (c: ApiContext) => {
      const name = operations[c.operation.operationId as OperationId]?.request_schema;
      const schema = name ? ((rawDoc as any).components?.schemas?.[name] ?? null) : null;
      throw requestValidationError(c.validation.errors as never, schema);
    },
    notFound: () => {
      throw new ApiError("not_found");
    },
    methodNotAllowed: (_c: ApiContext, ctx: Koa.Context) => {
      // Every path answers HEAD (the ready check); the rest is what the document lists.
      const allowed = ["GET", "POST"].filter((m) => api.router.matchOperation({ method: m.toLowerCase(), path: ctx.path, headers: {} }));
      ctx.set("Allow", [...allowed, "HEAD"].join(", "));
      throw new ApiError("method_not_allowed");
    },
  });
  // Request validators are compiled up front (while the model loads), not on first use: the
  // first request would otherwise pay ~1 s of schema compilation.
  const apiReady = api.init().then(() => api.validator.preCompileRequestValidators());

  /** Generation routes wait for the model: 503 / 529 with Retry-After until it is ready. */
  function gate(id: OperationId, h: Handler): Handler {
    if (operations[id].request_schema === null) return h;
    return (c, ctx, d) => {
      const err = notReadyError(d.engine.state);
      if (err) throw err;
      return h(c, ctx, d);
    };
  }

  // koa-body ships its own copy of @types/koa; the middleware is the same function either way.
  // The limit is what a request can use: a body that would not fit any context is refused as
  // it arrives (by Content-Length, before a byte is read; otherwise when the count passes it),
  // and JSON.parse never sees more than this, which bounds the memory one request can take.
  const body_limit = opts.body_limit_bytes ?? DEFAULTS.body_limit_mib * 1024 * 1024;
  const parseBody = koaBody({ json: true, jsonLimit: body_limit, jsonStrict: true, urlencoded: false, text: false, multipart: false }) as unknown as Koa.Middleware;

  /** Query parameters each operation declares; any other is ignored, as unknown body fields are. */
  const declaredQuery = new Map<string, Set<string>>();
  for (const item of Object.values((document as { paths?: Record<string, Record<string, any>> }).paths ?? {})) {
    for (const o of Object.values(item)) {
      if (typeof o?.operationId !== "string") continue;
      const names = ((o.parameters ?? []) as Array<{ in?: string; name?: string }>).filter((p) => p.in === "query").map((p) => p.name!);
      declaredQuery.set(o.operationId, new Set(names));
    }
  }
  const knownQuery = (id: string | undefined, query: Record<string, string | string[] | undefined>) => {
    const names = id ? declaredQuery.get(id) : undefined;
    return Object.fromEntries(Object.entries(query).filter(([k, v]) => names?.has(k) && v !== undefined)) as Record<string, string | string[]>;
  };

  /** operationId of (method, path), or of the path under another method (for a 405's contract check). */
  function routeOf(method: string, path: string): MatchedRoute | null {
    const match = (m: string) => api.router.matchOperation({ method: m, path, headers: {} }) as { operationId?: string } | undefined;
    const m = match(method);
    if (m?.operationId) return { id: m.operationId as OperationId, method_matches: true };
    for (const other of ["get", "post", "head"]) {
      const o = match(other);
      if (o?.operationId) return { id: o.operationId as OperationId, method_matches: false };
    }
    return null;
  }

  const app = new Koa();
  app.silent = true;
  app.on("error", (err: Error) => log(`stream error: ${err.message}`));

  // Every later step sees the canonical path (src/http/route.ts), so the operation matched, the
  // key decision, the error shape and the log line all describe what the router runs.
  app.use(async (ctx, next) => {
    ctx.path = canonicalPath(ctx.path);
    await next();
  });

  // Request log + metrics: one line per request when its response is done (streams included).
  // Never the body, a prompt or a key: method, path, status, time and the session tag only.
  app.use(async (ctx, next) => {
    const t0 = performance.now();
    ctx.res.once("close", () => {
      const ms = (performance.now() - t0).toFixed(1);
      const session = ctx.state[STATE.session] as string | undefined;
      // A client that left before its answer was sent saw no status at all; koa's ctx.status
      // would still say 404 (no body yet), so log nginx's 499 "client closed request".
      const left = !ctx.res.writableFinished;
      const status = left && !ctx.res.headersSent ? 499 : ctx.status;
      log(`${ctx.method} ${ctx.path} ${status} ${ms}ms${left ? " client-closed" : ""}${session ? ` session=${session}` : ""}`);
      metrics.http(matchedRoute(ctx)?.id ?? "unmatched", status);
    });
    await next();
  });

  // Errors → the route's dialect; then (test mode) the answer is checked against the contract.
  app.use(async (ctx, next) => {
    try {
      await next();
    } catch (err) {
      const e = toApiError(err);
      if (e.code === "internal_error") log(`internal error on ${ctx.method} ${ctx.path}: ${(err as Error)?.stack ?? String(err)}`);
      renderError(ctx, e);
    }
    if (contract) checkContract(ctx, contract);
  });

  // The operation is matched once, before the security check that decides from it.
  app.use(async (ctx, next) => {
    await apiReady;
    const route = routeOf(ctx.method, ctx.path);
    if (route) ctx.state[STATE.route] = route;
    await next();
  });

  app.use(security);

  app.use(async (ctx, next) => {
    const route = matchedRoute(ctx);
    if (ctx.method === "HEAD") {
      // Every path answers HEAD as the ready check does.
      await handlers.headHealth(undefined as never, ctx, deps);
      return;
    }
    if (route?.method_matches && operations[route.id].request_schema !== null) {
      requireJson(ctx);
      if (Number(ctx.get("content-length")) > body_limit) throw tooLarge(body_limit);
      try {
        await parseBody(ctx, async () => {});
      } catch (err) {
        const status = (err as { status?: number }).status;
        if (status === 413) throw tooLarge(body_limit);
        throw new ApiError("invalid_json", `Request body is not valid JSON: ${(err as Error).message}`);
      }
    }
    const body = (ctx.request as { body?: Record<string, unknown> }).body;
    // prompt_cache_key, else X-Session-Id; Codex and Claude Code send their own session headers.
    const session =
      sessionTag(body?.prompt_cache_key) ??
      sessionTag(ctx.get("x-session-id")) ??
      sessionTag(ctx.get("session-id")) ??
      sessionTag(ctx.get("x-claude-code-session-id"));
    if (session) ctx.state[STATE.session] = session;
    await api.handleRequest(
      { method: ctx.method, path: ctx.path, query: knownQuery(route?.id, ctx.query), headers: ctx.headers as Record<string, string>, body },
      ctx,
    );
  });

  function checkContract(ctx: Koa.Context, rec: ContractRecorder): void {
    const id = matchedRoute(ctx)?.id;
    if (!id) return; // unknown path: nothing documented to hold it to
    const op = ctx.method === "HEAD" ? (ctx.path === "/v1/health" ? "headHealth" : null) : id;
    if (!op) return;
    const where = `${ctx.method} ${ctx.path} ${ctx.status}`;
    const type = ctx.response.type;
    if (ctx.body instanceof Stream) {
      if (type === "text/event-stream") ctx.body = (ctx.body as Stream).pipe(rec.sseTap(op, where));
      else rec.record(where, [`a stream of ${type || "unknown type"} is not documented`]);
      return;
    }
    if (op === "headHealth") {
      rec.record(where, rec.validator.validateJson(op, ctx.status, undefined));
      return;
    }
    if (type === "application/json") rec.record(where, rec.validator.validateJson(op, ctx.status, ctx.body));
    else if (ctx.body === null || ctx.body === undefined) rec.record(where, rec.validator.validateJson(op, ctx.status, undefined));
    // text/plain (metrics) and text/html (--ui) carry no JSON schema to check.
  }

  let server: Server | null = null;
  return {
    app,
    deps,
    contract_violations: contract?.violations ?? [],
    async listen(port = opts.port ?? DEFAULTS.port, listenHost = host) {
      const s = createServer({ maxHeaderSize: MAX_HEADER_BYTES }, guardedListener(app.callback()));
      guardServer(s);
      await new Promise<void>((resolve, reject) => {
        s.once("error", reject);
        s.listen(port, listenHost, () => {
          s.off("error", reject);
          resolve();
        });
      });
      server = s;
      // Segments as on Ethernet, also over loopback: the stalled-reader clock sees a slow
      // client's reads every few KB instead of every 64 KiB (src/http/socket.ts).
      capMaxSegment(s);
      boundPort = (s.address() as AddressInfo).port;
      const h = listenHost.includes(":") ? `[${listenHost}]` : listenHost;
      return { server: s, port: boundPort, url: `http://${h}:${boundPort}` };
    },
    async close() {
      const s = server;
      server = null;
      if (!s) return;
      s.closeAllConnections();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    },
  };
}
