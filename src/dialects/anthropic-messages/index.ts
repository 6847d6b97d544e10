export { toInternal, chatPrompt, omitsThinking, type RequestContext } from "./request.js";
export { fromInternal, engineError, toolUseId, messageUsage, stopReason } from "./response.js";
export { MessagesStreamEncoder } from "./stream.js";
export type * from "./types.js";
