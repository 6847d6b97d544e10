// Wire shapes of OpenAI Chat Completions, straight from openapi.json (src/generated): the body
// has been validated against them before a handler runs.
import type { components } from "../../generated/types.js";

type S = components["schemas"];
export type ChatCompletionRequest = S["ChatCompletionRequest"];
export type ChatMessage = S["ChatMessage"];
export type ChatCompletion = S["ChatCompletion"];
export type ChatCompletionChunk = S["ChatCompletionChunk"];
export type ChatUsage = S["ChatUsage"];
export type ChatTimings = S["MashboxTimings"];
export type StreamError = S["OpenAIStreamError"];

export type { RequestContext } from "../shared/context.js";
/** What the encoders stamp on every object: chatcmpl-… id, served model id, unix seconds. */
export type { CreatedRenderContext as RenderContext } from "../shared/context.js";
