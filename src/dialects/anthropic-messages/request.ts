import type { ChatPrompt, ChatToolCall, ChatTurn, GenerationRequest, ToolChoice, ToolSpec } from "../../engine/types.js";
import { badField, quoted, unsupported } from "../../errors.js";
import { commonGenerationFields, generationRequest } from "../shared/request.js";
import type { RequestContext } from "../shared/context.js";
import type { CountTokensRequest, MessageParam, MessagesRequest, RequestBlock, TextBlock, ToolParam, ToolResultBlock } from "./types.js";

export type { RequestContext };

// Media blocks are documented as refused: the models served here read text only.
const MEDIA_BLOCKS = new Set(["image", "document", "search_result", "container_upload"]);

function textOfBlocks(blocks: (RequestBlock | TextBlock)[], field: string, allowed: ReadonlySet<string>): string {
  const parts: string[] = [];
  blocks.forEach((block, j) => {
    const where = `${field}[${j}]`;
    // The contract requires text only of system and tool_result blocks; a message's may lack it.
    if (block.type === "text") parts.push(block.text ?? "");
    else if (MEDIA_BLOCKS.has(block.type)) throw unsupported(where, `${quoted(block.type)} content (the model reads text only)`);
    else if (!allowed.has(block.type)) throw badField(where, `unexpected content block type ${quoted(block.type)}`);
  });
  return parts.join("");
}

function toolResultText(block: ToolResultBlock, field: string): string {
  const text =
    block.content === undefined ? "" : typeof block.content === "string" ? block.content : textOfBlocks(block.content, `${field}.content`, new Set());
  // Chat templates have no error flag on a tool turn; the model has to read the failure.
  return block.is_error === true ? `Error: ${text}` : text;
}

/** Client tools only: Anthropic-hosted tools (versioned `type`) have no local implementation. */
function isClientTool(tool: ToolParam): boolean {
  return tool.type === undefined || tool.type === "custom";
}

function toolSpecs(tools: ToolParam[] | undefined): ToolSpec[] {
  return (tools ?? []).filter(isClientTool).map((t) => ({
    name: t.name,
    // The contract allows a null description, which a tool spec does not carry.
    ...(typeof t.description === "string" ? { description: t.description } : {}),
    parameters: t.input_schema ?? { type: "object", properties: {} },
    kind: "function" as const,
  }));
}

function toolChoice(body: CountTokensRequest, tools: ToolSpec[]): ToolChoice {
  const choice = body.tool_choice;
  if (!choice || choice.type === "auto") return { type: "auto" };
  if (choice.type === "none") return { type: "none" };
  if (choice.type === "any") return { type: "required" };
  if (choice.type === "tool") {
    // The contract requires name for type tool (validated before this runs).
    const name = choice.name ?? "";
    if (!tools.some((t) => t.name === name)) throw badField("tool_choice.name", `no tool named ${quoted(name)} in tools`);
    return { type: "tool", name };
  }
  throw badField("tool_choice.type", `must be auto, any, tool or none`);
}

function enableThinking(body: CountTokensRequest): boolean | undefined {
  switch (body.thinking?.type) {
    case undefined:
      return undefined;
    case "disabled":
      return false;
    // "adaptive" leaves the choice to the model; a hybrid model can only decide that while its
    // thinking mode is on, so it maps to enabled.
    case "enabled":
    case "adaptive":
      return true;
    default:
      throw badField("thinking.type", "must be enabled, disabled or adaptive");
  }
}

/** Whether thinking text is to be left out of the answer (thinking.display "omitted"). */
export function omitsThinking(body: MessagesRequest): boolean {
  return body.thinking?.display === "omitted";
}

function stringifyInput(input: unknown): string {
  return JSON.stringify(input ?? {});
}

/**
 * Claude Code's first system block: billing metadata for Anthropic's servers whose last three hex
 * digits change with each conversation's first prompt. Kept in the prompt, it is the first thing
 * the model reads, so no two new conversations would share a cached prefix (docs/PROMPT-RULES.md).
 */
const CLAUDE_CODE_BILLING_HEADER = /^x-anthropic-billing-header: cc_version=\d+\.\d+\.\d+\.[0-9a-f]{3}; cc_entrypoint=[a-z0-9_-]+;$/;

/**
 * Builds the neutral chat prompt. System text from `system` comes first, then `role: "system"`
 * messages in their order (Claude Code sends reminders that way). A user message's tool_result
 * blocks become tool turns placed where they stand, so text after them stays after them. Reads
 * only the fields a count_tokens body has (a Messages body has them too), so both routes share it.
 */
export function chatPrompt(body: CountTokensRequest): ChatPrompt {
  const system: string[] = [];
  if (typeof body.system === "string") {
    if (body.system !== "") system.push(body.system);
  } else if (Array.isArray(body.system)) {
    body.system.forEach((block, i) => {
      if (block.type !== "text") throw badField(`system[${i}]`, "system blocks must be text");
      if (i === 0 && CLAUDE_CODE_BILLING_HEADER.test(block.text)) return;
      system.push(block.text);
    });
  }

  const turns: ChatTurn[] = [];
  // Tool names by call id, so a tool turn can name the tool it answers.
  const callNames = new Map<string, string>();

  body.messages.forEach((message: MessageParam, i) => {
    const field = `messages[${i}].content`;
    const content = message.content;
    if (message.role === "system") {
      const text = typeof content === "string" ? content : textOfBlocks(content, field, new Set());
      system.push(text);
      return;
    }
    if (message.role === "user") {
      if (typeof content === "string") {
        turns.push({ role: "user", content });
        return;
      }
      let pending: string[] = [];
      let sawText = false;
      const flush = () => {
        if (sawText) turns.push({ role: "user", content: pending.join("") });
        pending = [];
        sawText = false;
      };
      content.forEach((block, j) => {
        const where = `${field}[${j}]`;
        if (block.type === "text") {
          pending.push(block.text ?? "");
          sawText = true;
        } else if (block.type === "tool_result") {
          flush();
          const name = callNames.get(block.tool_use_id);
          turns.push({ role: "tool", tool_call_id: block.tool_use_id, ...(name ? { name } : {}), content: toolResultText(block, where) });
        } else if (MEDIA_BLOCKS.has(block.type)) {
          throw unsupported(where, `${quoted(block.type)} content (the model reads text only)`);
        } else {
          throw badField(where, `unexpected content block type ${quoted(block.type)} in a user message`);
        }
      });
      flush();
      return;
    }
    if (message.role === "assistant") {
      if (typeof content === "string") {
        turns.push({ role: "assistant", content });
        return;
      }
      const text: string[] = [];
      const thinking: string[] = [];
      const calls: ChatToolCall[] = [];
      content.forEach((block, j) => {
        const where = `${field}[${j}]`;
        switch (block.type) {
          case "text":
            text.push(block.text ?? "");
            break;
          case "thinking":
            thinking.push(block.thinking ?? "");
            break;
          case "redacted_thinking":
            // Opaque to us: there is no text to replay.
            break;
          case "tool_use": {
            callNames.set(block.id, block.name);
            calls.push({ id: block.id, name: block.name, arguments: stringifyInput(block.input) });
            break;
          }
          default:
            if (MEDIA_BLOCKS.has(block.type)) throw unsupported(where, `${quoted(block.type)} content (the model reads text only)`);
            throw badField(where, `unexpected content block type ${quoted(block.type)} in an assistant message`);
        }
      });
      const turn: ChatTurn = { role: "assistant", content: text.join("") };
      if (thinking.length > 0) turn.thinking = thinking.join("");
      if (calls.length > 0) turn.tool_calls = calls;
      turns.push(turn);
      return;
    }
    throw badField(`messages[${i}].role`, "must be user, assistant or system");
  });

  const tools = toolSpecs(body.tools);
  const thinking = enableThinking(body);
  const budget = thinking === true ? body.thinking?.budget_tokens : undefined;
  return {
    system,
    turns,
    tools,
    tool_choice: toolChoice(body, tools),
    ...(body.tool_choice && "disable_parallel_tool_use" in body.tool_choice && body.tool_choice.disable_parallel_tool_use === true ? { parallel_tool_calls: false } : {}),
    ...(thinking !== undefined ? { enable_thinking: thinking } : {}),
    ...(typeof budget === "number" && budget > 0 ? { thinking_budget: budget } : {}),
  };
}

/** Messages request → neutral GenerationRequest. Throws ApiError (400) naming the bad field. */
export function toInternal(body: MessagesRequest, ctx: RequestContext): GenerationRequest {
  if (body.output_config?.format !== undefined && body.output_config.format !== null) {
    throw unsupported("output_config.format", "structured output");
  }
  return generationRequest(ctx, { kind: "chat", chat: chatPrompt(body) }, commonGenerationFields(body as Record<string, unknown>));
}
