export { toInternal, chatPrompt, chatTurns, toolSpecs, toolChoice } from "./request.js";
export { fromInternal } from "./response.js";
export { ChatStreamEncoder } from "./stream.js";
export { callId, chatUsage, engineError, finishReason, streamError } from "./wire.js";
export type * from "./types.js";
