import { ChatStreamEncoder, engineError, fromInternal, toInternal, type ChatCompletionRequest } from "../dialects/openai-chat/index.js";
import { collect, observer, startStream } from "../dialects/shared/generation.js";
import type { GenerationEvent } from "../engine/types.js";
import { ApiError } from "../errors.js";
import { openSse } from "../http/sse.js";
import { assertModel, newId, requestContext } from "./common.js";
import type { Handler } from "./types.js";

export const createChatCompletion: Handler = async (api, ctx, deps) => {
  const body = api.request.requestBody as ChatCompletionRequest;
  assertModel(deps, body.model);
  const id = newId("chatcmpl-");
  const req = toInternal(body, { id, ...requestContext(ctx) });
  const rc = { id, model_id: deps.model_id, created: Math.floor(Date.now() / 1000) };
  const tap = observer(deps.observe);
  // The client leaving before the answer is written cancels the generation.
  const abort = new AbortController();
  ctx.res.once("close", () => {
    if (!ctx.res.writableEnded) abort.abort();
  });

  if (!body.stream) {
    ctx.body = fromInternal(await collect(deps.engine, req, abort.signal, tap), rc);
    return;
  }
  const { first, rest } = await startStream(deps.engine, req, abort.signal);
  if (first === null) throw engineError({ code: "engine_error", message: "The generation ended without a result." });
  if (first.type === "error") throw engineError(first);
  const sse = openSse(ctx);
  sse.signal.addEventListener("abort", () => abort.abort());
  const enc = new ChatStreamEncoder(rc, { include_usage: body.stream_options?.include_usage === true });
  const send = (ev: GenerationEvent) => {
    tap(ev);
    sse.write(enc.push(ev));
  };
  send(first);
  // Koa sends the body only after the handler returns, so the stream is pumped in the background.
  void (async () => {
    try {
      for (let r = await rest.next(); !r.done && !enc.ended; r = await rest.next()) send(r.value);
      // An iterator that stops without "done"/"error" still gets a closed stream ([DONE]).
      if (!enc.ended && !abort.signal.aborted) sse.write(enc.end());
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError("engine_error", (err as Error).message);
      send({ type: "error", code: e.code, message: e.message });
    } finally {
      sse.end();
      await rest.return?.().catch(() => undefined);
    }
  })();
};

export const handler = createChatCompletion;
