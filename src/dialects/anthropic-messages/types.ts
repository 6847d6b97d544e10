// Wire shapes of the Anthropic Messages API as this server reads and writes them. What it
// writes comes straight from openapi.json (src/generated). What it reads is typed per block here:
// the contract spells a block's fields by its type with if/then, which generated types do not
// carry; openapi-backend has already validated the body, and fields a route does not list are
// accepted and ignored.
import type { components } from "../../generated/types.js";

export interface TextBlock {
  type: "text";
  text: string;
}

export interface ToolUseBlock {
  type: "tool_use";
  id: string;
  name: string;
  input: unknown;
}

export interface ToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  content?: string | Array<{ type: string; text?: string }>;
  is_error?: boolean;
}

export interface ThinkingBlock {
  type: "thinking";
  thinking: string;
  signature?: string;
}

export interface RedactedThinkingBlock {
  type: "redacted_thinking";
  data: string;
}

export type RequestBlock =
  | TextBlock
  | ToolUseBlock
  | ToolResultBlock
  | ThinkingBlock
  | RedactedThinkingBlock
  | { type: string; [k: string]: unknown };

export interface MessageParam {
  role: "user" | "assistant" | "system";
  content: string | RequestBlock[];
}

export interface ToolParam {
  name: string;
  description?: string;
  input_schema?: Record<string, unknown>;
  /** Absent or "custom" for client tools; versioned names for Anthropic-hosted tools. */
  type?: string;
}

type S = components["schemas"];
export type MessageUsage = S["AnthropicUsage"];
export type StopReason = NonNullable<S["AnthropicMessage"]["stop_reason"]>;
export type ResponseBlock = S["AnthropicContentBlock"];
export type Message = S["AnthropicMessage"];
/**
 * The request body: its fields as the contract types them, but for those whose blocks the
 * contract spells per type (messages, system, tools) and thinking's display, typed above.
 */
export type MessagesRequest = Omit<S["AnthropicMessagesRequest"], "messages" | "system" | "tools" | "thinking"> & {
  messages: MessageParam[];
  system?: string | TextBlock[];
  tools?: ToolParam[];
  thinking?: S["AnthropicMessagesRequest"]["thinking"] & { display?: string };
};

/** msg_… id and served model id. */
export type { RenderContext } from "../shared/context.js";

/** Signature every thinking block carries: nothing here verifies it, but clients require one. */
export const THINKING_SIGNATURE = "mashbox-local";
