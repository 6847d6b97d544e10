// Chat prompt builder: renders the GGUF's own tokenizer.chat_template with @huggingface/jinja so
// that the prompt matches what the model was trained on (and what llama.cpp renders). Templates
// without tool support get the tools in the Hermes <tool_call> convention, which the output
// parser (./parser.ts) reads back.
import { Template } from "@huggingface/jinja";
import type { ChatPrompt, ChatToolCall, ChatTurn, ModelInfo, ToolSpec } from "../engine/types.js";
import { ApiError } from "../errors.js";

export type TemplateModel = Pick<ModelInfo, "chat_template" | "bos_token" | "eos_token">;

export interface RenderOptions {
  /** Default true: end with the opening of the assistant turn. */
  add_generation_prompt?: boolean;
  /**
   * The tokenizer adds BOS itself (GGUF add_bos_token): a bos_token the template printed at the
   * start is removed so the prompt does not begin with two (llama.cpp does the same).
   */
  add_bos?: boolean;
}

// Compiling a template costs ~ms; a server renders the same one for every request.
const compiled = new Map<string, Template>();

function compile(source: string): Template {
  let t = compiled.get(source);
  if (!t) {
    t = new Template(source);
    if (compiled.size > 16) compiled.clear();
    compiled.set(source, t);
  }
  return t;
}

/** Whether the template renders a `tools` list itself (Qwen, Llama 3.1, Hermes ...). */
export function templateSupportsTools(template: string | null): boolean {
  return template !== null && /\btools\b/.test(template);
}

/** Whether the template replays assistant thinking from a `reasoning_content` field (Qwen3 ...). */
export function templateSupportsReasoning(template: string | null): boolean {
  return template !== null && /reasoning_content/.test(template);
}

/**
 * True when the rendered prompt leaves a <think> block open (Qwen3-style templates that start the
 * assistant turn inside thinking), so the output parser must start in thinking mode.
 */
export function promptOpensThinking(prompt: string): boolean {
  const open = prompt.lastIndexOf("<think>");
  if (open < 0) return false;
  return prompt.lastIndexOf("</think>") < open && prompt.slice(open + "<think>".length).trim() === "";
}

/** The OpenAI-style function signature a template (or the Hermes block) lists for one tool. */
export function toolSignature(tool: ToolSpec): Record<string, unknown> {
  const parameters =
    tool.kind === "custom"
      ? { type: "object", properties: { input: { type: "string", description: "The raw input, as free text." } }, required: ["input"] }
      : tool.parameters ?? { type: "object", properties: {} };
  return {
    type: "function",
    function: { name: tool.name, ...(tool.description !== undefined ? { description: tool.description } : {}), parameters },
  };
}

/**
 * Arguments as a template expects them: an object when the text is a JSON object. A custom
 * tool's raw input is replayed in the {"input": …} shape it was offered in.
 */
function argumentsValue(call: ChatToolCall, custom: ReadonlySet<string>): unknown {
  if (custom.has(call.name)) return { input: call.arguments };
  try {
    const v = JSON.parse(call.arguments);
    if (v !== null && typeof v === "object" && !Array.isArray(v)) return v;
  } catch {
    // custom tool input or malformed JSON from an earlier turn: replay the text unchanged
  }
  return call.arguments;
}

function hermesCall(call: ChatToolCall, custom: ReadonlySet<string>): string {
  return `<tool_call>\n${JSON.stringify({ name: call.name, arguments: argumentsValue(call, custom) })}\n</tool_call>`;
}

function hermesToolsBlock(tools: ToolSpec[]): string {
  const lines = tools.map((t) => JSON.stringify(toolSignature(t)));
  return [
    "# Tools",
    "",
    "You may call one or more of the functions listed below. Each is described by a JSON signature inside <tools></tools>:",
    "<tools>",
    ...lines,
    "</tools>",
    "",
    "To call a function, answer with a <tool_call></tool_call> block holding one JSON object with the function's name and its arguments, one block per call:",
    "<tool_call>",
    '{"name": "<function name>", "arguments": {<arguments as JSON>}}',
    "</tool_call>",
  ].join("\n");
}

function choiceInstruction(chat: ChatPrompt): string | null {
  if (chat.tool_choice.type === "required") return "You must call at least one of the functions above in this answer.";
  if (chat.tool_choice.type === "tool") return `You must call the function "${chat.tool_choice.name}" in this answer.`;
  return null;
}

type TemplateMessage = Record<string, unknown>;

function customNames(chat: ChatPrompt): Set<string> {
  return new Set(chat.tools.filter((t) => t.kind === "custom").map((t) => t.name));
}

/** Messages for a template that renders tools and tool calls itself. */
function nativeMessages(chat: ChatPrompt, tools: ToolSpec[], reasoning: boolean): TemplateMessage[] {
  const system = [...chat.system];
  const extra = tools.length > 0 ? choiceInstruction(chat) : null;
  if (extra) system.push(extra);
  const out: TemplateMessage[] = [];
  if (system.length > 0) out.push({ role: "system", content: system.join("\n\n") });
  for (const turn of chat.turns) {
    if (turn.role === "user") out.push({ role: "user", content: turn.content });
    else if (turn.role === "tool") out.push({ role: "tool", content: turn.content, tool_call_id: turn.tool_call_id, ...(turn.name ? { name: turn.name } : {}) });
    else {
      const m: TemplateMessage = { role: "assistant", content: turn.content };
      if (reasoning && turn.thinking) m.reasoning_content = turn.thinking;
      if (turn.tool_calls && turn.tool_calls.length > 0) {
        m.tool_calls = turn.tool_calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: argumentsValue(c, customNames(chat)) } }));
      }
      out.push(m);
    }
  }
  return out;
}

/**
 * Messages for a template that knows only role/content: tools go into the system prompt,
 * calls become <tool_call> blocks, and consecutive tool results one user turn of
 * <tool_response> blocks (a role every template accepts).
 */
function hermesMessages(chat: ChatPrompt, tools: ToolSpec[], reasoning: boolean): TemplateMessage[] {
  const system = [...chat.system];
  if (tools.length > 0) {
    system.push(hermesToolsBlock(tools));
    const extra = choiceInstruction(chat);
    if (extra) system.push(extra);
  }
  const out: TemplateMessage[] = [];
  if (system.length > 0) out.push({ role: "system", content: system.join("\n\n") });
  let responses: string[] = [];
  const flush = () => {
    if (responses.length > 0) out.push({ role: "user", content: responses.join("\n") });
    responses = [];
  };
  for (const turn of chat.turns as ChatTurn[]) {
    if (turn.role === "tool") {
      responses.push(`<tool_response>\n${turn.content}\n</tool_response>`);
      continue;
    }
    flush();
    if (turn.role === "user") out.push({ role: "user", content: turn.content });
    else {
      const calls = (turn.tool_calls ?? []).map((c) => hermesCall(c, customNames(chat)));
      const content = [turn.content, ...calls].filter((s) => s !== "").join("\n");
      const m: TemplateMessage = { role: "assistant", content };
      if (reasoning && turn.thinking) m.reasoning_content = turn.thinking;
      out.push(m);
    }
  }
  flush();
  return out;
}

/** ChatML, for a GGUF that carries no template. */
function chatml(messages: TemplateMessage[], add_generation_prompt: boolean): string {
  let s = messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("");
  if (add_generation_prompt) s += "<|im_start|>assistant\n";
  return s;
}

/** The messages with the system turn merged into the first user turn; null when there is none. */
function foldSystem(messages: TemplateMessage[]): TemplateMessage[] | null {
  if (messages.length === 0 || messages[0].role !== "system") return null;
  const system = String(messages[0].content);
  const rest = messages.slice(1);
  const i = rest.findIndex((m) => m.role === "user");
  if (i < 0) return [{ role: "user", content: system }, ...rest];
  return rest.map((m, j) => (j === i ? { ...m, content: `${system}\n\n${String(m.content)}` } : m));
}

/** The prompt text for a chat; tokenize it with parse_special = true. */
export function renderChatPrompt(chat: ChatPrompt, model: TemplateModel, opts: RenderOptions = {}): string {
  const add_generation_prompt = opts.add_generation_prompt ?? true;
  // A conversation that ends with assistant text is a prefill (Anthropic's "put words in
  // Claude's mouth", llama-server's assistant prefill): the answer continues that text, so the
  // turn stays open instead of being closed by the template.
  const last = chat.turns.at(-1);
  if (add_generation_prompt && last?.role === "assistant" && last.content !== "" && !(last.tool_calls?.length ?? 0)) {
    return renderChatPrompt({ ...chat, turns: chat.turns.slice(0, -1) }, model, opts) + last.content;
  }
  const template = model.chat_template;
  // tool_choice "none": the model is not told about the tools at all.
  const tools = chat.tool_choice.type === "none" ? [] : chat.tools;
  const reasoning = templateSupportsReasoning(template);
  const native = templateSupportsTools(template);
  const messages = native ? nativeMessages(chat, tools, reasoning) : hermesMessages(chat, tools, reasoning);
  if (template === null || template.trim() === "") return chatml(messages, add_generation_prompt);
  const ctx: Record<string, unknown> = {
    messages,
    add_generation_prompt,
    bos_token: model.bos_token ?? "",
    eos_token: model.eos_token ?? "",
  };
  if (native && tools.length > 0) ctx.tools = tools.map(toolSignature);
  if (chat.enable_thinking !== undefined) ctx.enable_thinking = chat.enable_thinking;
  let out: string;
  try {
    out = compile(template).render(ctx);
  } catch (err) {
    // Some templates have no system role (Gemma ...): the system text then opens the first
    // user turn, as llama.cpp's template polyfill does.
    const folded = foldSystem(messages);
    try {
      if (!folded) throw err;
      out = compile(template).render({ ...ctx, messages: folded });
    } catch (err2) {
      // Templates reject conversations they cannot express (raise_exception: roles must
      // alternate ...): that is the request's shape, so a 400.
      throw new ApiError("invalid_request", `The model's chat template refused this conversation: ${(err2 as Error).message}`);
    }
  }
  if (opts.add_bos && model.bos_token && out.startsWith(model.bos_token)) out = out.slice(model.bos_token.length);
  return out;
}
