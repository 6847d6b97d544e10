// How each model family opens a tool call, in one list per family. Under tool_choice auto the
// model may write text, but once its output opens a call in one of these forms the rest is
// decoded under the grammar of a call to a declared tool (tool-grammar.ts, lazyToolCallGrammar;
// the native side finds the opening: native/engine/grammar.h, TriggerScanner), and the output
// parser (parsers/hermes.ts, parsers/harmony.ts) reads the same forms back. docs/ARCHITECTURE.md lists them too.
//
// An opening is literal pieces with up to OPENING_GAP whitespace characters between two of them;
// `at_start` ones count only where nothing but whitespace precedes them in the answer (after a
// closed think block, if any).
import { toolFamily, type ToolFamily } from "./family.js";

export { toolFamily, type ToolFamily };

export type CallForm =
  /** <tool_call>{…}</tool_call>, the Hermes block the Qwen and Hermes templates ask for. */
  | "tag"
  /** The JSON object alone, {"name": …, "arguments": …}: what small models write without the tags. */
  | "bare"
  /** The same object inside a Markdown code fence (```json … ```). */
  | "fence"
  /** harmony's recipient (gpt-oss): `to=functions.NAME … <|message|>{…}`. */
  | "recipient";

export interface CallOpening {
  form: CallForm;
  pieces: string[];
  at_start: boolean;
}

/** Whitespace characters ([ \t\r\n]) allowed between two pieces of an opening. */
export const OPENING_GAP = 8;

const OBJECT_OPEN = ["{", '"name"', ":"];

/**
 * The openings of each family. "hermes": every template but harmony's. ChatML/Qwen2.5/Qwen3 and
 * Hermes templates render the tools themselves and ask for <tool_call>; templates without tool
 * support (SmolLM2) get the same Hermes convention in the system prompt (template.ts). Gemma 3
 * 270M ships no template (chat is refused), so it has no entry.
 */
export const CALL_OPENINGS: Record<ToolFamily, CallOpening[]> = {
  hermes: [
    { form: "tag", pieces: ["<tool_call>"], at_start: false },
    { form: "bare", pieces: OBJECT_OPEN, at_start: true },
    { form: "fence", pieces: ["```json", ...OBJECT_OPEN], at_start: false },
    { form: "fence", pieces: ["```", ...OBJECT_OPEN], at_start: false },
  ],
  harmony: [{ form: "recipient", pieces: ["to=functions."], at_start: false }],
};

/** The think block of a family, as the output parser reads it (none: harmony has channels). */
export const THINK_TAGS: Record<ToolFamily, { open: string; close: string } | null> = {
  hermes: { open: "<think>", close: "</think>" },
  harmony: null,
};

const isWs = (c: string) => c === " " || c === "\n" || c === "\t" || c === "\r";

/**
 * The opening at s[at…]: its length when it matches there, "partial" when s ends inside what could
 * still become a match, 0 when it cannot match there (native/engine/grammar.cpp, same rule).
 */
export function matchOpening(o: CallOpening, s: string, at: number): number | "partial" {
  let i = at;
  for (let k = 0; k < o.pieces.length; k++) {
    if (k > 0) for (let gap = 0; gap < OPENING_GAP && i < s.length && isWs(s[i]); gap++) i++;
    const p = o.pieces[k];
    const have = s.slice(i, i + p.length);
    if (have.length < p.length) return p.startsWith(have) && (have.length > 0 || i === s.length) ? "partial" : 0;
    if (have !== p) return 0;
    i += p.length;
  }
  return i - at;
}
