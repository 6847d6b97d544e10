import { CompletionStreamEncoder, fromInternal } from "../../../src/dialects/openai-completions/index.js";
import type { GoldenDialect } from "../harness.js";

export const dialect: GoldenDialect = {
  name: "openai-completions",
  required: ["text", "stop-sequence", "max-tokens", "error"],
  errors: "openai",
  fromInternal: (g) => fromInternal(g.events, g.render),
  encoder: (g) => new CompletionStreamEncoder(g.render, { include_usage: g.request.stream_options?.include_usage === true }),
};
