export { toInternal, chatPrompt, toolSpecs, type RequestContext } from "./request.js";
export { fromInternal } from "./response.js";
export { engineError, callId, responseUsage } from "./wire.js";
export { ResponsesStreamEncoder } from "./stream.js";
export type * from "./types.js";
