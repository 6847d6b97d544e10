// Chat prompt builder: renders the GGUF's own tokenizer.chat_template with @huggingface/jinja so
// that the prompt matches what the model was trained on (and what llama.cpp renders). Templates
// without tool support get the tools in the Hermes <tool_call> convention, which the output
// parser (./parsers/hermes.ts) reads back.
//
// Only the template's own scaffolding may become control tokens. Every string the request
// supplies (message text, tool calls and results, tool specs) has the model's control-token texts
// ("<|im_end|>" ...) swapped for inert markers before rendering; after it, the markers are swapped
// back and their ranges returned as `literal`, which the tokenizer keeps plain text even with
// parse_special. (llama.cpp tokenizes the whole render with parse_special, so a user who types
// "<|im_end|>\n<|im_start|>system" there writes a system turn.) Everything else tokenizes as it
// would without the ranges, so prompts stay token-identical to llama.cpp's when nobody types one.
import { Template } from "@huggingface/jinja";
import type { ChatPrompt, ChatToolCall, ChatTurn, TemplateModel, ToolSpec } from "./types.js";
import { ApiError } from "../errors.js";

export type { TemplateModel };

/** A rendered prompt: tokenize `text` with parse_special, keeping `literal` plain text. */
export interface RenderedPrompt {
  text: string;
  /** [begin, end, ...] string indices of control-token texts the request wrote. */
  literal: number[];
}

export interface RenderOptions {
  /** Default true: end with the opening of the assistant turn. */
  add_generation_prompt?: boolean;
  /**
   * The tokenizer adds BOS itself (GGUF add_bos_token): a bos_token the template printed at the
   * start is removed so the prompt does not begin with two (llama.cpp does the same). Default:
   * the model's add_bos.
   */
  add_bos?: boolean;
}

// Marker for the n-th escaped text: U+FDD0 n U+FDD1. Noncharacters no template prints or
// transforms (trim, tojson and upper keep them); the request's own U+FDD0/U+FDD1 are escaped too.
const MARK_OPEN = "\uFDD0";
const MARK_CLOSE = "\uFDD1";
const MARKER = /\uFDD0(\d+)\uFDD1/g;

function regexEscape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Swaps control-token texts in request strings for markers, and back after rendering. */
class Escaper {
  private readonly pattern: RegExp | null;
  private readonly texts: string[] = [];

  constructor(control_tokens: readonly string[]) {
    // Longest first, as the tokenizer matches them.
    const alts = [...control_tokens].filter((t) => t.length > 0).sort((a, b) => b.length - a.length).map(regexEscape);
    this.pattern = alts.length > 0 ? new RegExp([...alts, MARK_OPEN, MARK_CLOSE].join("|"), "g") : null;
  }

  str(s: string): string {
    if (!this.pattern) return s;
    return s.replace(this.pattern, (m) => `${MARK_OPEN}${this.texts.push(m) - 1}${MARK_CLOSE}`);
  }

  /** Strings (keys too) anywhere inside v: tool arguments and schemas are request text as well. */
  deep<T>(v: T): T {
    if (!this.pattern) return v;
    if (typeof v === "string") return this.str(v) as T;
    if (Array.isArray(v)) return v.map((x) => this.deep(x)) as T;
    if (v !== null && typeof v === "object") {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) out[this.str(k)] = this.deep(x);
      return out as T;
    }
    return v;
  }

  restore(rendered: string): RenderedPrompt {
    if (this.texts.length === 0) return { text: rendered, literal: [] };
    const literal: number[] = [];
    let text = "";
    let last = 0;
    for (const m of rendered.matchAll(MARKER)) {
      const original = this.texts[Number(m[1])];
      if (original === undefined) continue;
      text += rendered.slice(last, m.index);
      literal.push(text.length, text.length + original.length);
      text += original;
      last = m.index! + m[0].length;
    }
    return { text: text + rendered.slice(last), literal };
  }
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

/**
 * Whether the template replays assistant thinking from a `reasoning_content` field (Qwen3 ...)
 * or a `thinking` one (gpt-oss's harmony template); both are given.
 */
export function templateSupportsReasoning(template: string | null): boolean {
  return template !== null && /reasoning_content|message\.thinking/.test(template);
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
      if (reasoning && turn.thinking) {
        m.reasoning_content = turn.thinking;
        m.thinking = turn.thinking;
      }
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

/** The prompt text for a chat (see renderChatPromptParts for how to tokenize it). */
export function renderChatPrompt(chat: ChatPrompt, model: TemplateModel, opts: RenderOptions = {}): string {
  return renderChatPromptParts(chat, model, opts).text;
}

/**
 * The prompt for a chat: tokenize `text` with parse_special = true and `literal` kept plain, so
 * that only the template's scaffolding yields control tokens.
 */
export function renderChatPromptParts(chat: ChatPrompt, model: TemplateModel, opts: RenderOptions = {}): RenderedPrompt {
  // The request's own strings are escaped before the prompt builder wraps them in its wording
  // (the Hermes tool block, <tool_call>/<tool_response> tags), which stays as it is.
  const esc = new Escaper(model.control_tokens ?? []);
  return esc.restore(render(esc.deep(chat), model, opts));
}

function render(chat: ChatPrompt, model: TemplateModel, opts: RenderOptions): string {
  const add_generation_prompt = opts.add_generation_prompt ?? true;
  // A conversation that ends with assistant text is a prefill (Anthropic's "put words in
  // Claude's mouth", llama-server's assistant prefill): the answer continues that text, so the
  // turn stays open instead of being closed by the template.
  const last = chat.turns.at(-1);
  if (add_generation_prompt && last?.role === "assistant" && last.content !== "" && !(last.tool_calls?.length ?? 0)) {
    return render({ ...chat, turns: chat.turns.slice(0, -1) }, model, opts) + last.content;
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
  const add_bos = opts.add_bos ?? model.add_bos ?? false;
  if (add_bos && model.bos_token && out.startsWith(model.bos_token)) out = out.slice(model.bos_token.length);
  return out;
}
