import { engineError, fromInternal, ResponsesStreamEncoder, toInternal, type ResponsesRequest } from "../dialects/openai-responses/index.js";
import { collect, observer, startStream } from "../dialects/shared/generation.js";
import type { GenerationEvent } from "../engine/types.js";
import { ApiError } from "../errors.js";
import { openSse } from "../http/sse.js";
import { assertModel, newId, requestContext } from "./common.js";
import type { Handler } from "./types.js";

/** POST /v1/responses. Nothing is stored: every request carries its whole input. */
export const createResponse: Handler = async (api, ctx, deps) => {
  const body = api.request.requestBody as ResponsesRequest;
  assertModel(deps, body.model);
  const id = newId("resp_");
  const req = toInternal(body, { id, ...requestContext(ctx) });
  const rc = { id, model_id: deps.model_id, created_at: Math.floor(Date.now() / 1000) };
  const tap = observer(deps.observe);
  // The client leaving before the answer is written cancels the generation.
  const abort = new AbortController();
  ctx.res.once("close", () => {
    if (!ctx.res.writableEnded) abort.abort();
  });

  if (body.stream !== true) {
    ctx.body = fromInternal(await collect(deps.engine, req, abort.signal, tap), body, rc);
    return;
  }
  const { first, rest } = await startStream(deps.engine, req, abort.signal);
  if (first === null) throw new ApiError("engine_error", "The generation ended without a result.");
  if (first.type === "error") throw engineError(first);
  const sse = openSse(ctx);
  sse.signal.addEventListener("abort", () => abort.abort());
  const enc = new ResponsesStreamEncoder(body, rc);
  const send = (ev: GenerationEvent) => {
    tap(ev);
    sse.write(enc.push(ev));
  };
  send(first);
  // Koa sends the body only after the handler returns, so the stream is pumped in the background.
  void (async () => {
    try {
      while (!enc.ended) {
        const r = await rest.next();
        if (r.done) break;
        send(r.value);
      }
      if (!enc.ended && !abort.signal.aborted) send({ type: "error", code: "engine_error", message: "The generation ended without a result." });
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError("engine_error", (err as Error).message);
      send({ type: "error", code: e.code, message: e.message });
    } finally {
      sse.end();
      await rest.return?.().catch(() => undefined);
    }
  })();
};

export const handler = createResponse;
