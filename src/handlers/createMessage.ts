import { fromInternal, MessagesStreamEncoder, omitsThinking, toInternal, type MessagesRequest } from "../dialects/anthropic-messages/index.js";
import { newId } from "./common.js";
import { requestTenant } from "../app/context.js";
import { runGeneration } from "./run.js";
import type { Handler } from "./types.js";

/** POST /v1/messages. Any `model` is accepted and echoed (Claude Code sends its own names). */
export const createMessage: Handler = async (api, ctx, deps) => {
  const body = api.request.requestBody as MessagesRequest;
  const id = newId("msg_");
  await runGeneration(ctx, deps, toInternal(body, { id, ...requestTenant(ctx) }), {
    stream: body.stream === true,
    whole: (events) => fromInternal(events, body, { id, model_id: deps.model_id }),
    encoder: () => new MessagesStreamEncoder({ id, model: body.model ?? deps.model_id, omit_thinking: omitsThinking(body) }),
  });
};

export const handler = createMessage;
