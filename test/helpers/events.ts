// Comparing output parsers' events across chunkings of the same text.
import type { GenerationEvent } from "../../src/engine/types.js";

/** Same events up to chunking: adjacent text/thinking runs and a call's deltas are concatenated. */
export function merged(events: GenerationEvent[]): GenerationEvent[] {
  const out: GenerationEvent[] = [];
  for (const e of events) {
    const last = out[out.length - 1];
    if (last && (e.type === "text" || e.type === "thinking") && last.type === e.type) last.text += e.text;
    else if (last && e.type === "tool_call_delta" && last.type === "tool_call_delta" && last.index === e.index) last.arguments += e.arguments;
    else out.push({ ...e });
  }
  return out;
}
