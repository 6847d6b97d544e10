// Wire shapes of the OpenAI Responses API as this server reads and writes them. Only the fields
// the dialect acts on are typed; openapi-backend has already validated the body.
import type { RenderContext as SharedRenderContext } from "../shared/context.js";

export interface ContentPart {
  type: string;
  text?: string;
  [k: string]: unknown;
}

/** One input item. Messages may come without `type` (EasyInputMessage). */
export interface InputItem {
  type?: string;
  id?: string;
  role?: string;
  content?: string | ContentPart[] | null;
  call_id?: string;
  name?: string;
  namespace?: string;
  arguments?: string;
  input?: string;
  output?: string | ContentPart[];
  action?: unknown;
  summary?: ContentPart[] | null;
  [k: string]: unknown;
}

export interface ToolParam {
  type: string;
  name?: string;
  description?: string;
  parameters?: Record<string, unknown> | null;
  /** namespace tools: the tools it groups. */
  tools?: ToolParam[];
  [k: string]: unknown;
}

export type ToolChoiceParam =
  | "auto"
  | "none"
  | "required"
  | { type: string; name?: string; function?: { name: string } };

export interface ResponsesRequest {
  model?: string;
  input: string | InputItem[];
  instructions?: string | null;
  tools?: ToolParam[];
  tool_choice?: ToolChoiceParam;
  parallel_tool_calls?: boolean;
  reasoning?: { effort?: string | null; summary?: string | null } | null;
  stream?: boolean;
  prompt_cache_key?: string;
  include?: string[] | null;
  text?: { format?: { type: string } } | null;
  max_output_tokens?: number | null;
  max_tokens?: number;
  max_completion_tokens?: number;
  [k: string]: unknown;
}

export type OutputItem =
  | { id: string; type: "reasoning"; status: ItemStatus; summary: []; content: Array<{ type: "reasoning_text"; text: string }> }
  | { id: string; type: "message"; status: ItemStatus; role: "assistant"; content: Array<{ type: "output_text"; text: string }> }
  | { id: string; type: "function_call"; status: ItemStatus; call_id: string; name: string; arguments: string; namespace?: string }
  | { id: string; type: "custom_tool_call"; status: ItemStatus; call_id: string; name: string; input: string };

export type ItemStatus = "in_progress" | "completed" | "incomplete";

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export interface ResponseObject {
  id: string;
  object: "response";
  created_at: number;
  status: "in_progress" | "completed" | "incomplete" | "failed";
  model: string;
  output: OutputItem[];
  parallel_tool_calls: boolean;
  tool_choice: ToolChoiceParam;
  tools: ToolParam[];
  usage: ResponseUsage | null;
  incomplete_details?: { reason: "max_output_tokens" };
  error?: { code: string; message: string };
}

/** resp_… id and served model id (src/dialects/shared/context.ts), and the creation time. */
export interface RenderContext extends SharedRenderContext {
  /** Unix seconds. */
  created_at: number;
}
