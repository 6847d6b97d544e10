import { fromInternal, ResponsesStreamEncoder } from "../../../src/dialects/openai-responses/index.js";
import type { GoldenDialect } from "../harness.js";

export const dialect: GoldenDialect = {
  name: "openai-responses",
  required: ["text", "thinking", "tool-one", "tool-two", "tool-custom-namespace", "stop-sequence", "max-tokens", "error"],
  errors: "openai",
  fromInternal: (g) => fromInternal(g.events, g.request, g.render),
  encoder: (g) => new ResponsesStreamEncoder(g.request, g.render),
};
