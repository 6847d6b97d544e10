import { CompletionStreamEncoder, fromInternal, toInternal, type CompletionRequest } from "../dialects/openai-completions/index.js";
import { assertModel, newId } from "./common.js";
import { requestTenant } from "../app/context.js";
import { runGeneration } from "./run.js";
import type { Handler } from "./types.js";

export const createCompletion: Handler = async (api, ctx, deps) => {
  const body = api.request.requestBody as CompletionRequest;
  assertModel(deps, body.model);
  const id = newId("cmpl-");
  const rc = { id, model_id: deps.model_id, created: Math.floor(Date.now() / 1000) };
  const include_usage = (body as { stream_options?: { include_usage?: boolean } | null }).stream_options?.include_usage === true;
  await runGeneration(ctx, deps, toInternal(body, { id, ...requestTenant(ctx) }), {
    stream: body.stream === true,
    whole: (events) => fromInternal(events, rc),
    encoder: () => new CompletionStreamEncoder(rc, { include_usage }),
  });
};

export const handler = createCompletion;
