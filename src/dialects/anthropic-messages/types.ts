// Wire shapes of the Anthropic Messages API as this server reads and writes them. Only the
// fields the dialect acts on are typed; openapi-backend has already validated the body, and
// fields a route does not list are accepted and ignored.

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

export type ToolChoiceParam =
  | { type: "auto"; disable_parallel_tool_use?: boolean }
  | { type: "any"; disable_parallel_tool_use?: boolean }
  | { type: "tool"; name: string; disable_parallel_tool_use?: boolean }
  | { type: "none" };

export interface MessagesRequest {
  model?: string;
  messages: MessageParam[];
  system?: string | TextBlock[];
  tools?: ToolParam[];
  tool_choice?: ToolChoiceParam;
  thinking?: { type: "enabled" | "disabled" | "adaptive"; budget_tokens?: number; display?: string };
  stream?: boolean;
  prompt_cache_key?: string;
  metadata?: Record<string, unknown>;
  output_config?: { effort?: string; format?: unknown };
  max_tokens?: number;
  max_completion_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  seed?: number;
  stop?: string | string[];
  stop_sequences?: string[];
  repetition_penalty?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  n?: number;
}

export interface MessageUsage {
  input_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
  output_tokens: number;
}

export type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use";

export type ResponseBlock =
  | { type: "text"; text: string }
  | { type: "thinking"; thinking: string; signature: string }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> };

export interface Message {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: ResponseBlock[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: MessageUsage;
}

/** msg_… id and served model id. */
export type { RenderContext } from "../shared/context.js";

/** Signature every thinking block carries: nothing here verifies it, but clients require one. */
export const THINKING_SIGNATURE = "mashbox-local";
