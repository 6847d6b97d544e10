import { fromInternal, MessagesStreamEncoder, omitsThinking } from "../../../src/dialects/anthropic-messages/index.js";
import type { GoldenDialect } from "../harness.js";

export const dialect: GoldenDialect = {
  name: "anthropic-messages",
  required: ["text", "thinking", "tool-one", "tool-two", "stop-sequence", "max-tokens", "error"],
  errors: "anthropic",
  fromInternal: (g) => fromInternal(g.events, g.request, g.render),
  encoder: (g) => new MessagesStreamEncoder({ id: g.render.id, model: g.request.model ?? g.render.model_id, omit_thinking: omitsThinking(g.request) }),
};
