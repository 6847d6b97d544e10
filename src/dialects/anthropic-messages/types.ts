// Wire shapes of the Anthropic Messages API, straight from openapi.json (src/generated): what the
// server reads (the request body has been validated against it before a handler runs) and what
// it writes. A block's fields depend on its type; the contract names each type's fields as a
// variant component, and codegen types a block as its own fields and one of those variants.
import type { components } from "../../generated/types.js";

type S = components["schemas"];
export type MessagesRequest = S["AnthropicMessagesRequest"];
export type CountTokensRequest = S["AnthropicCountTokensRequest"];
export type MessageParam = S["AnthropicInputMessage"];
/** A block of a message: text, thinking, redacted_thinking, tool_use, tool_result (image and document refused). */
export type RequestBlock = S["AnthropicInputBlock"];
/** A text block of system or of a tool_result's content. */
export type TextBlock = S["AnthropicInputTextBlock"];
export type ToolUseBlock = S["AnthropicInputToolUseBlock"];
export type ToolResultBlock = S["AnthropicInputToolResultBlock"];
export type ThinkingBlock = S["AnthropicInputThinkingBlock"];
export type RedactedThinkingBlock = S["AnthropicInputRedactedThinkingBlock"];
export type ToolParam = S["AnthropicTool"];

export type MessageUsage = S["AnthropicUsage"];
export type StopReason = NonNullable<S["AnthropicMessage"]["stop_reason"]>;
export type ResponseBlock = S["AnthropicContentBlock"];
export type Message = S["AnthropicMessage"];

/** msg_… id and served model id. */
export type { RenderContext } from "../shared/context.js";

/** Signature every thinking block carries: nothing here verifies it, but clients require one. */
export const THINKING_SIGNATURE = "mashbox-local";
