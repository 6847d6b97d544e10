import { fromInternal, ResponsesStreamEncoder, toInternal, type ResponsesRequest } from "../dialects/openai-responses/index.js";
import { assertModel, newId } from "./common.js";
import { requestTenant } from "../app/context.js";
import { runGeneration } from "./run.js";
import type { Handler } from "./types.js";

/** POST /v1/responses. Nothing is stored: every request carries its whole input. */
export const createResponse: Handler = async (api, ctx, deps) => {
  const body = api.request.requestBody as ResponsesRequest;
  assertModel(deps, body.model);
  const id = newId("resp_");
  const rc = { id, model_id: deps.model_id, created_at: Math.floor(Date.now() / 1000) };
  await runGeneration(ctx, deps, toInternal(body, { id, ...requestTenant(ctx) }), {
    stream: body.stream === true,
    whole: (events) => fromInternal(events, body, rc),
    encoder: () => new ResponsesStreamEncoder(body, rc),
  });
};

export const handler = createResponse;
