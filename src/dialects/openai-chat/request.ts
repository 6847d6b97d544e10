import type { ChatPrompt, ChatToolCall, ChatTurn, GenerationRequest, ToolChoice, ToolSpec } from "../../engine/types.js";
import { badField, quoted, unsupported } from "../../errors.js";
import { commonGenerationFields, enableThinking, generationRequest } from "../shared/request.js";
import type { ChatCompletionRequest, ChatMessage, RequestContext } from "./types.js";

type Json = Record<string, unknown>;

// Parts a text-only model cannot read: refused by name rather than silently dropped.
const MEDIA_PARTS = new Set(["image_url", "input_image", "input_audio", "audio", "file", "input_file", "image"]);

function contentText(content: ChatMessage["content"], field: string): string {
  if (content === undefined || content === null) return "";
  if (typeof content === "string") return content;
  return content
    .map((part, j) => {
      const where = `${field}[${j}]`;
      if (part.type === "text" || part.type === "input_text") {
        if (typeof part.text !== "string") throw badField(`${where}.text`, "must be a string");
        return part.text;
      }
      if (MEDIA_PARTS.has(part.type)) throw unsupported(where, `${quoted(part.type)} content (the model reads text only)`);
      throw badField(where, `unexpected content part type ${quoted(part.type)}`);
    })
    .join("");
}

function toolCalls(raw: unknown, field: string): ChatToolCall[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw badField(field, "must be a list");
  return raw.map((c: Json, j) => {
    const where = `${field}[${j}]`;
    const fn = c.function as Json | undefined;
    if (c.type !== undefined && c.type !== "function") throw badField(`${where}.type`, 'must be "function"');
    if (!fn || typeof fn.name !== "string") throw badField(`${where}.function.name`, "is required");
    const args = fn.arguments === undefined || fn.arguments === null ? "{}" : fn.arguments;
    return {
      id: typeof c.id === "string" ? c.id : `call_${j}`,
      name: fn.name,
      arguments: typeof args === "string" ? args : JSON.stringify(args),
    };
  });
}

/** messages[] → system text + neutral turns. */
export function chatTurns(messages: ChatMessage[]): { system: string[]; turns: ChatTurn[] } {
  const system: string[] = [];
  const turns: ChatTurn[] = [];
  const names = new Map<string, string>();
  messages.forEach((m, i) => {
    const field = `messages[${i}]`;
    const text = contentText(m.content, `${field}.content`);
    switch (m.role) {
      case "system":
      case "developer":
        system.push(text);
        return;
      case "user":
        turns.push({ role: "user", content: text });
        return;
      case "assistant": {
        const calls = toolCalls(m.tool_calls, `${field}.tool_calls`);
        for (const c of calls) names.set(c.id, c.name);
        const thinking = typeof m.reasoning_content === "string" && m.reasoning_content !== "" ? m.reasoning_content : undefined;
        turns.push({ role: "assistant", content: text, ...(thinking ? { thinking } : {}), ...(calls.length ? { tool_calls: calls } : {}) });
        return;
      }
      case "tool": {
        if (typeof m.tool_call_id !== "string") throw badField(`${field}.tool_call_id`, "is required for tool messages");
        const name = names.get(m.tool_call_id);
        turns.push({ role: "tool", tool_call_id: m.tool_call_id, ...(name ? { name } : {}), content: text });
        return;
      }
      default:
        throw badField(`${field}.role`, `unexpected role ${quoted((m as Json).role)}`);
    }
  });
  return { system, turns };
}

export function toolSpecs(tools: ChatCompletionRequest["tools"]): ToolSpec[] {
  return (tools ?? []).map((t: Json, i) => {
    const where = `tools[${i}]`;
    if (t.type !== "function") throw badField(`${where}.type`, 'only "function" tools are supported');
    const fn = t.function as Json | undefined;
    if (!fn || typeof fn.name !== "string" || fn.name === "") throw badField(`${where}.function.name`, "is required");
    return {
      name: fn.name,
      ...(typeof fn.description === "string" ? { description: fn.description } : {}),
      parameters: (fn.parameters as Record<string, unknown> | undefined) ?? { type: "object", properties: {} },
      kind: "function" as const,
    };
  });
}

export function toolChoice(raw: ChatCompletionRequest["tool_choice"], tools: ToolSpec[]): ToolChoice {
  if (raw === undefined || raw === null || raw === "auto") return { type: "auto" };
  if (raw === "none") return { type: "none" };
  if (raw === "required") {
    if (tools.length === 0) throw badField("tool_choice", '"required" needs at least one tool');
    return { type: "required" };
  }
  if (typeof raw === "object" && raw.type === "function") {
    // Some clients send the Responses shape {"type": "function", "name": …} here.
    const loose = raw as { function?: { name?: unknown }; name?: unknown };
    const name = loose.function?.name ?? loose.name;
    if (typeof name !== "string") throw badField("tool_choice.function.name", "is required");
    if (!tools.some((t) => t.name === name)) throw badField("tool_choice.function.name", `no tool named ${quoted(name)} in tools`);
    return { type: "tool", name };
  }
  throw badField("tool_choice", 'must be "auto", "none", "required" or {"type": "function", "function": {"name": …}}');
}

export function chatPrompt(body: ChatCompletionRequest): ChatPrompt {
  const { system, turns } = chatTurns(body.messages);
  const tools = toolSpecs(body.tools);
  const choice = toolChoice(body.tool_choice, tools);
  const thinking = enableThinking(body as Json);
  // "none": the model is not offered the tools, so no <tool_call> in its output is parsed either.
  const offered = choice.type === "none" ? [] : tools;
  return { system, turns, tools: offered, tool_choice: choice, ...(thinking !== undefined ? { enable_thinking: thinking } : {}) };
}

/** A validated Chat Completions body → the neutral request. */
export function toInternal(body: ChatCompletionRequest, rc: RequestContext): GenerationRequest {
  const json = body as unknown as Json;
  const format = body.response_format;
  if (format && format.type !== "text") throw unsupported("response_format", "structured output (json_object, json_schema)");
  return generationRequest(rc, { kind: "chat", chat: chatPrompt(body) }, commonGenerationFields(json, ["max_completion_tokens", "max_tokens"]));
}
