// Reading and comparing the events of generations.
import { expect } from "chai";
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

/** A generation's text and done event; an error event fails the test. */
export async function collect(it: AsyncIterable<GenerationEvent>) {
  const events: GenerationEvent[] = [];
  for await (const e of it) events.push(e);
  const text = events.map((e) => (e.type === "text" ? e.text : "")).join("");
  const done = events.find((e) => e.type === "done") as Extract<GenerationEvent, { type: "done" }> | undefined;
  const error = events.find((e) => e.type === "error");
  expect(error, JSON.stringify(error)).to.equal(undefined);
  return { text, done: done! };
}
