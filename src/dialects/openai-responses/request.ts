import type { ChatPrompt, ChatTurn, GenerationRequest, ToolChoice, ToolSpec } from "../../engine/types.js";
import { badField, quoted, unsupported } from "../../errors.js";
import { commonGenerationFields, generationRequest } from "../shared/request.js";
import type { RequestContext } from "../shared/context.js";
import type { ContentPart, InputItem, NamespaceMemberTool, ResponsesRequest, ToolParam } from "./types.js";

export type { RequestContext };

type ToolOutputType = "function_call_output" | "custom_tool_call_output" | "local_shell_call_output";

// Parts that carry text; everything else in a message is media, refused for a text-only model.
const TEXT_PARTS = new Set(["input_text", "output_text", "text", "summary_text", "reasoning_text"]);

function partsText(content: string | ContentPart[] | null | undefined, field: string): string {
  if (content === undefined || content === null) return "";
  if (typeof content === "string") return content;
  return content
    .map((part, j) => {
      if (TEXT_PARTS.has(part.type)) return part.text ?? "";
      if (part.type === "refusal") return typeof part.refusal === "string" ? part.refusal : "";
      throw unsupported(`${field}[${j}]`, `${quoted(part.type)} content (the model reads text only)`);
    })
    .join("");
}

function oneTool(tool: ToolParam | NamespaceMemberTool, field: string, namespace?: string): ToolSpec | null {
  const ns = namespace !== undefined ? { namespace } : {};
  // The contract allows a null description, which a tool spec does not carry.
  const description = typeof tool.description === "string" ? { description: tool.description } : {};
  if (tool.type === "function") {
    if (!tool.name) throw badField(`${field}.name`, "a function tool needs a name");
    return { name: tool.name, ...description, parameters: tool.parameters ?? { type: "object", properties: {} }, kind: "function", ...ns };
  }
  if (tool.type === "custom") {
    if (!tool.name) throw badField(`${field}.name`, "a custom tool needs a name");
    return { name: tool.name, ...description, kind: "custom", ...ns };
  }
  // Hosted tools (web_search, file_search, local_shell, …) have no implementation here: accepted
  // so that clients which always send them work, but never offered to the model.
  return null;
}

export function toolSpecs(tools: ToolParam[] | null | undefined): ToolSpec[] {
  const out: ToolSpec[] = [];
  (tools ?? []).forEach((tool, i) => {
    if (tool.type === "namespace") {
      (tool.tools ?? []).forEach((inner, j) => {
        const spec = oneTool(inner, `tools[${i}].tools[${j}]`, tool.name);
        if (spec) out.push(spec);
      });
      return;
    }
    const spec = oneTool(tool, `tools[${i}]`);
    if (spec) out.push(spec);
  });
  return out;
}

function toolChoice(body: ResponsesRequest, tools: ToolSpec[]): ToolChoice {
  const choice = body.tool_choice;
  if (choice === undefined || choice === null || choice === "auto") return { type: "auto" };
  if (choice === "none") return { type: "none" };
  if (choice === "required") return { type: "required" };
  if (typeof choice === "object" && (choice.type === "function" || choice.type === "custom")) {
    const name = choice.name ?? choice.function?.name;
    if (!name) throw badField("tool_choice.name", "names no tool");
    if (!tools.some((t) => t.name === name)) throw badField("tool_choice.name", `no tool named ${quoted(name)} in tools`);
    return { type: "tool", name };
  }
  throw unsupported("tool_choice", "only auto, none, required or a function / custom tool can be chosen");
}

function enableThinking(body: ResponsesRequest): boolean | undefined {
  const effort = body.reasoning?.effort;
  if (effort === undefined || effort === null) return undefined;
  return !(effort === "none" || effort === "minimal");
}

/**
 * Builds the neutral chat prompt. `instructions`, then system/developer messages, form the
 * system text. Calls join the assistant turn they follow; reasoning items wait for the next
 * assistant turn (they precede the message or call they explain).
 */
export function chatPrompt(body: ResponsesRequest): ChatPrompt {
  const system: string[] = [];
  if (typeof body.instructions === "string" && body.instructions !== "") system.push(body.instructions);
  const turns: ChatTurn[] = [];
  const callNames = new Map<string, string>();
  let pendingThinking: string[] = [];

  const claimThinking = (turn: Extract<ChatTurn, { role: "assistant" }>) => {
    if (pendingThinking.length === 0) return;
    turn.thinking = (turn.thinking ?? "") + pendingThinking.join("");
    pendingThinking = [];
  };
  const assistantForCall = (): Extract<ChatTurn, { role: "assistant" }> => {
    const last = turns[turns.length - 1];
    if (last?.role === "assistant") {
      claimThinking(last);
      return last;
    }
    const turn: Extract<ChatTurn, { role: "assistant" }> = { role: "assistant", content: "" };
    claimThinking(turn);
    turns.push(turn);
    return turn;
  };
  const addCall = (id: string, name: string, args: string) => {
    const turn = assistantForCall();
    callNames.set(id, name);
    (turn.tool_calls ??= []).push({ id, name, arguments: args });
  };
  const addOutput = (item: Extract<InputItem, { type: ToolOutputType }>, field: string) => {
    const id = item.call_id ?? item.id;
    if (typeof id !== "string") throw badField(`${field}.call_id`, "is required");
    const name = callNames.get(id);
    turns.push({ role: "tool", tool_call_id: id, ...(name ? { name } : {}), content: partsText(item.output, `${field}.output`) });
  };

  const input: InputItem[] = typeof body.input === "string" ? [{ type: "message", role: "user", content: body.input }] : body.input;
  input.forEach((item, i) => {
    const field = `input[${i}]`;
    const type: unknown = item.type;
    // An item without type is a message (EasyInputMessage) when it has a role.
    if (type === undefined && item.role === undefined) throw badField(`${field}.type`, `unknown input item type ${quoted(type)}`);
    switch (item.type) {
      case undefined:
      case "message": {
        const text = partsText(item.content, `${field}.content`);
        if (item.role === "system" || item.role === "developer") system.push(text);
        else if (item.role === "user") turns.push({ role: "user", content: text });
        else if (item.role === "assistant") {
          const turn: Extract<ChatTurn, { role: "assistant" }> = { role: "assistant", content: text };
          claimThinking(turn);
          turns.push(turn);
        } else throw badField(`${field}.role`, "must be system, developer, user or assistant");
        break;
      }
      case "function_call":
        if (typeof item.call_id !== "string" || typeof item.name !== "string") throw badField(field, "a function_call needs call_id and name");
        addCall(item.call_id, item.name, item.arguments ?? "{}");
        break;
      case "custom_tool_call":
        if (typeof item.call_id !== "string" || typeof item.name !== "string") throw badField(field, "a custom_tool_call needs call_id and name");
        addCall(item.call_id, item.name, item.input ?? "");
        break;
      case "local_shell_call": {
        const id = item.call_id ?? item.id;
        if (typeof id !== "string") throw badField(`${field}.call_id`, "is required");
        addCall(id, "local_shell", JSON.stringify(item.action ?? {}));
        break;
      }
      case "function_call_output":
      case "custom_tool_call_output":
      case "local_shell_call_output":
        addOutput(item, field);
        break;
      case "reasoning": {
        // Full reasoning text when the client kept it, else its summary.
        const content = Array.isArray(item.content) ? partsText(item.content, `${field}.content`) : "";
        const text = content !== "" ? content : partsText(item.summary ?? [], `${field}.summary`);
        if (text !== "") pendingThinking.push(text);
        break;
      }
      case "item_reference":
        throw unsupported(field, "item_reference (this server stores no responses)");
      default:
        throw badField(`${field}.type`, `unknown input item type ${quoted(type)}`);
    }
  });

  const tools = toolSpecs(body.tools);
  const thinking = enableThinking(body);
  return { system, turns, tools, tool_choice: toolChoice(body, tools), ...(body.parallel_tool_calls === false ? { parallel_tool_calls: false } : {}), ...(thinking !== undefined ? { enable_thinking: thinking } : {}) };
}

/** Responses request → neutral GenerationRequest. Throws ApiError (400) naming the bad field. */
export function toInternal(body: ResponsesRequest, ctx: RequestContext): GenerationRequest {
  const format = body.text?.format;
  if (format && format.type !== "text") throw unsupported("text.format", `${quoted(format.type)} (structured output)`);
  (body.include ?? []).forEach((entry, i) => {
    if (typeof entry === "string" && entry.includes("logprobs")) throw unsupported(`include[${i}]`, "log probabilities");
  });
  const common = commonGenerationFields(body as Record<string, unknown>, ["max_output_tokens", "max_completion_tokens", "max_tokens"]);
  return generationRequest(ctx, { kind: "chat", chat: chatPrompt(body) }, common);
}
