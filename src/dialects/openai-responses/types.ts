// Wire shapes of the OpenAI Responses API, straight from openapi.json (src/generated): what the
// server reads (the request body has been validated against it before a handler runs) and what
// it writes. An input item's, part's or tool's fields depend on its type; the contract names each
// type's fields as a variant component, and codegen types the object as its own fields and one
// of those variants.
import type { components } from "../../generated/types.js";
import type { RenderContext as SharedRenderContext } from "../shared/context.js";

type S = components["schemas"];
export type ResponsesRequest = S["ResponsesRequest"];
/** One input item. Messages may come without `type` (EasyInputMessage). */
export type InputItem = S["ResponsesInputItem"];
export type ContentPart = S["ResponsesInputPart"];
/**
 * A function, custom or namespace tool: the kinds this server offers. A hosted tool (web_search,
 * local_shell …) is accepted with only the fields every tool has, and has no variant to type it.
 */
export type ToolParam = S["ResponsesTool"];
/** A tool of a namespace. */
export type NamespaceMemberTool = S["ResponsesNamespaceMemberTool"];

export type OutputItem = S["ResponsesOutputItem"];
export type ItemStatus = S["ResponsesMessageItem"]["status"];
export type ResponseUsage = S["ResponsesUsage"];
export type ResponseObject = S["ResponsesResponse"];
export type ToolChoiceParam = NonNullable<S["ResponsesRequest"]["tool_choice"]>;

/** resp_… id and served model id (src/dialects/shared/context.ts), and the creation time. */
export interface RenderContext extends SharedRenderContext {
  /** Unix seconds. */
  created_at: number;
}
