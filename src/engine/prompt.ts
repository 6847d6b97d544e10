// What the model is given for a request: the prompt text (the model's chat template for chat
// input, the raw text otherwise) and the grammar its output must match, if any.
import { renderChatPromptParts, promptOpensThinking } from "../chat/template.js";
import { autoTools, forcedTools } from "../chat/tool-grammar.js";
import { CALL_OPENINGS, THINK_TAGS, toolFamily, type ToolFamily } from "../chat/tool-forms.js";
import { statePointChars } from "./prompt-cache.js";
import { toolSchemaError, type GrammarPool } from "./grammar-pool.js";
import { ApiError } from "../errors.js";
import type { GenerationRequest, ModelInfo, ToolSpec } from "./types.js";
import type { LazyGrammar } from "./native.js";

export interface PreparedPrompt {
  /** Tokenized with parse_special, except `literal`. */
  text: string;
  /**
   * [begin, end, ...] in characters of text: control-token texts the request wrote, kept plain
   * text (src/chat/template.ts). A raw /v1/completions prompt has none: its writer writes the
   * whole prompt, control tokens included, as with llama-server's /completion.
   */
  literal: number[];
  add_special: boolean;
  /** The template opened a think block: the answer starts inside it. */
  starts_in_thinking: boolean;
  /** Output grammar (native/engine/grammar.h); undefined = free. */
  grammar: string | undefined;
  /** tool_choice auto with tools: free output until it opens a call, then a valid call. */
  lazy_grammar?: LazyGrammar;
  /** Where the part a new conversation of this client shares ends, in characters (prompt-cache.ts). */
  state_point_chars: number;
  /** The model family of the chat template (src/chat/family.ts): its output parser; null for raw text. */
  family: ToolFamily | null;
}

/**
 * A forced tool choice (required / any / a named tool) constrains decoding to one well-formed
 * call (src/chat/tool-grammar.ts); the prompt still asks for it (src/chat/template.ts).
 * Thinking is switched off for that turn rather than allowed as a free <think> prefix: an
 * unconstrained think block has no end but max_tokens, and a small model may never close it, so
 * the call would never come (Anthropic likewise refuses thinking with forced tools).
 * A request's own grammar replaces the forced-call one.
 *
 * tool_choice auto with tools: the model may answer in text, but once its output opens a call
 * (src/chat/tool-forms.ts) the rest is a call to a declared tool with valid arguments (a lazy
 * grammar; a request's own grammar narrows it while the two agree). A tool whose schema that
 * grammar cannot take is the same 400 as for a forced call.
 */
export async function preparePrompt(
  input: GenerationRequest["input"],
  model: ModelInfo,
  grammars: GrammarPool,
  grammar?: string,
): Promise<PreparedPrompt> {
  if (input.kind === "text") return { text: input.text, literal: [], add_special: true, starts_in_thinking: false, grammar, state_point_chars: 0, family: null };
  // A base model (Gemma 3 270M) ships no template: guessing one (ChatML) would feed it markup it
  // never saw, so the chat routes refuse and say what works instead.
  if (!model.chat_template?.trim()) throw new ApiError("no_chat_template");
  const forced = forcedTools(input.chat);
  const chat = forced ? { ...input.chat, enable_thinking: false } : input.chat;
  let text: string;
  let literal: number[];
  try {
    ({ text, literal } = renderChatPromptParts(chat, model, { add_generation_prompt: true }));
  } catch (e) {
    // The template prints each tool's schema; one nested thousands deep exhausts the stack.
    if (e instanceof RangeError) throw toolSchemaError([deepestTool(chat.tools)], "it is nested too deeply to print into the prompt");
    throw e;
  }
  const starts_in_thinking = promptOpensThinking(text);
  const family = toolFamily(model.chat_template);
  if (forced && grammar === undefined) grammar = await grammars.build(forced, starts_in_thinking, family === "harmony");
  let lazy_grammar: LazyGrammar | undefined;
  const auto = forced ? null : autoTools(chat);
  if (auto) {
    const think = THINK_TAGS[family];
    lazy_grammar = {
      grammar: await grammars.build(auto, starts_in_thinking, family === "harmony", family, chat.parallel_tool_calls !== false),
      triggers: CALL_OPENINGS[family].map((o) => ({ pieces: o.pieces, at_start: o.at_start })),
      ...(think ? { think_open: think.open, think_close: think.close } : {}),
      starts_in_thinking,
    };
  }
  return { text, literal, add_special: true, starts_in_thinking, grammar, ...(lazy_grammar ? { lazy_grammar } : {}), state_point_chars: statePointChars(chat, model, text), family };
}

/** The name of the tool whose parameters nest deepest (counted without recursion). */
function deepestTool(tools: ToolSpec[]): string {
  let best = { name: tools[0]?.name ?? "?", depth: -1 };
  for (const t of tools) {
    let depth = 0;
    const stack: [unknown, number][] = [[t.parameters, 1]];
    while (stack.length > 0) {
      const [v, d] = stack.pop()!;
      if (v === null || typeof v !== "object") continue;
      depth = Math.max(depth, d);
      for (const child of Object.values(v)) stack.push([child, d + 1]);
    }
    if (depth > best.depth) best = { name: t.name, depth };
  }
  return best.name;
}
