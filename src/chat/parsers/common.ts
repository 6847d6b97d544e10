// What every model family's output parser is: one interface the output stage
// (src/engine/output.ts) drives without knowing the family, and the helpers the parsers share.
// A parser turns the released text of one generation (after stop strings) into text, thinking
// and tool-call events, whatever the chunking of the detokenized stream.
import type { GenerationEvent, ToolSpec } from "../types.js";

export interface ParserOptions {
  tools: ToolSpec[];
  /** The prompt already opened the family's thinking (see promptOpensThinking in ../template.ts). */
  starts_in_thinking: boolean;
  new_call_id: () => string;
}

export interface OutputParser {
  /** What the engine appends to end thinking early (thinking.budget_tokens), in the family's syntax. */
  readonly thinking_close: string;
  /** Inside the model's thinking now. */
  readonly in_thinking: boolean;
  /** Calls emitted so far (a generation that made any ends with finish_reason "tool_calls"). */
  readonly tool_calls: number;
  /** Parses more output; events for what is settled, holding back what a tag could still claim. */
  push(text: string): GenerationEvent[];
  /** The generation ended: whatever was held back, settled. */
  finish(): GenerationEvent[];
}

/** Appends text or thinking to `out`, merged with the last event when it is of the same type. */
export function emitText(out: GenerationEvent[], type: "text" | "thinking", text: string): void {
  if (text === "") return;
  const last = out[out.length - 1];
  if (last && last.type === type) last.text += text;
  else out.push({ type, text });
}

/**
 * Length of the longest suffix of `text` that is a proper prefix of one of `needles`: text that
 * must be held back until more arrives (the parsers' tags, the engine's stop strings' reference
 * matcher: a handful of short fixed strings).
 */
export function heldPrefix(text: string, needles: readonly string[]): number {
  let best = 0;
  for (const s of needles) {
    for (let n = Math.min(s.length - 1, text.length); n > best; n--) {
      if (text.endsWith(s.slice(0, n))) {
        best = n;
        break;
      }
    }
  }
  return best;
}
