import { chatPrompt, type CountTokensRequest } from "../dialects/anthropic-messages/index.js";
import type { Handler } from "./types.js";

/**
 * POST /v1/messages/count_tokens: the prompt tokens of exactly the chat prompt a Messages
 * request with this body would render (same translation, same template).
 */
export const countMessageTokens: Handler = async (api, ctx, deps) => {
  const body = api.request.requestBody as CountTokensRequest;
  const input_tokens = await deps.engine.countTokens({ kind: "chat", chat: chatPrompt(body) });
  ctx.body = { input_tokens };
};

export const handler = countMessageTokens;
