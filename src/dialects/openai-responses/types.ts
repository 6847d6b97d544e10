// Wire shapes of the OpenAI Responses API as this server reads and writes them. What it writes
// comes straight from openapi.json (src/generated). What it reads is typed here, only the fields
// the dialect acts on: the contract spells an input item's fields by its type with if/then,
// which generated types do not carry; openapi-backend has already validated the body.
import type { components } from "../../generated/types.js";
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

type S = components["schemas"];
export type OutputItem = S["ResponsesOutputItem"];
export type ItemStatus = S["ResponsesMessageItem"]["status"];
export type ResponseUsage = S["ResponsesUsage"];
export type ResponseObject = S["ResponsesResponse"];
export type ToolChoiceParam = NonNullable<S["ResponsesRequest"]["tool_choice"]>;

/** The request body: its fields as the contract types them, but the input items and tools, typed above. */
export type ResponsesRequest = Omit<S["ResponsesRequest"], "input" | "tools"> & {
  input: string | InputItem[];
  tools?: ToolParam[] | null;
};

/** resp_… id and served model id (src/dialects/shared/context.ts), and the creation time. */
export interface RenderContext extends SharedRenderContext {
  /** Unix seconds. */
  created_at: number;
}
