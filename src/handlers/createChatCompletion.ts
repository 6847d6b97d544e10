import { ChatStreamEncoder, fromInternal, toInternal, type ChatCompletionRequest } from "../dialects/openai-chat/index.js";
import { assertModel, newId } from "./common.js";
import { requestTenant } from "../app/context.js";
import { runGeneration } from "./run.js";
import type { Handler } from "./types.js";

export const createChatCompletion: Handler = async (api, ctx, deps) => {
  const body = api.request.requestBody as ChatCompletionRequest;
  assertModel(deps, body.model);
  const id = newId("chatcmpl-");
  const rc = { id, model_id: deps.model_id, created: Math.floor(Date.now() / 1000) };
  await runGeneration(ctx, deps, toInternal(body, { id, ...requestTenant(ctx) }), {
    stream: body.stream === true,
    whole: (events) => fromInternal(events, rc),
    encoder: () => new ChatStreamEncoder(rc, { include_usage: body.stream_options?.include_usage === true }),
  });
};

export const handler = createChatCompletion;
