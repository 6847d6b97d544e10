import { ChatStreamEncoder, fromInternal } from "../../../src/dialects/openai-chat/index.js";
import type { GoldenDialect } from "../harness.js";

export const dialect: GoldenDialect = {
  name: "openai-chat",
  required: ["text", "thinking", "tool-one", "tool-two", "stop-sequence", "max-tokens", "error"],
  errors: "openai",
  fromInternal: (g) => fromInternal(g.events, g.render),
  encoder: (g) => new ChatStreamEncoder(g.render, { include_usage: g.request.stream_options?.include_usage === true }),
};
