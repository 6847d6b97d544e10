// The output stage (src/engine/output.ts) on its own: token pieces in, events out, with a fake
// clock. Stop strings, the family parser chosen by the registry, the thinking budget's
// resubmission, usage and timings, and the end of an answer at a repeated tool call.
import { expect } from "chai";
import { OutputStage, requestParser, type StageStep } from "../../src/engine/output.js";
import { parserFor, parserOf } from "../../src/chat/parsers/index.js";
import { HarmonyParser } from "../../src/chat/parsers/harmony.js";
import { HermesParser } from "../../src/chat/parsers/hermes.js";
import type { GenerationEvent, GenerationRequest, ToolSpec } from "../../src/engine/types.js";
import { merged } from "../helpers/events.js";

const TOOLS: ToolSpec[] = [
  { name: "get_weather", kind: "function", parameters: { type: "object", properties: { city: { type: "string" } } } },
  { name: "read_file", kind: "function" },
];

function clock(): { now: () => number; tick: (ms: number) => void } {
  let t = 1000;
  return { now: () => t, tick: (ms) => (t += ms) };
}

function hermes(tools: ToolSpec[] = TOOLS, starts_in_thinking = false) {
  let n = 0;
  return parserOf("hermes", { tools, starts_in_thinking, new_call_id: () => `call_${n++}` });
}

type Done = Extract<GenerationEvent, { type: "done" }>;

/** Feeds `pieces` as tokens, then a native done; every event, and the steps' flags. */
function run(stage: OutputStage, pieces: string[], end: { text?: string; finish?: "stop" | "length" } = {}) {
  const events: GenerationEvent[] = [];
  const steps: StageStep[] = [];
  for (const p of pieces) {
    const s = stage.token(p);
    steps.push(s);
    events.push(...s.events);
    if (s.ended) return { events, steps, done: events.at(-1) as Done };
  }
  const s = stage.done(end.text ?? "", end.finish ?? "stop", null);
  steps.push(s);
  events.push(...s.events);
  return { events, steps, done: events.at(-1) as Done };
}

const visible = (events: GenerationEvent[]) => merged(events.filter((e) => e.type !== "done"));

describe("output stage", () => {
  it("passes plain text through when there is no parser, and counts usage and timings", () => {
    const c = clock();
    const stage = new OutputStage({ stop: [], parser: null, now: c.now });
    expect(stage.start({ prompt_tokens: 10, cached_tokens: 4, queue_ms: 3 })).to.equal(true);
    c.tick(50); // prompt phase
    const events: GenerationEvent[] = [];
    for (const p of ["Hel", "lo", " world"]) {
      events.push(...stage.token(p).events);
      c.tick(10);
    }
    const end = stage.done("", "length", null);
    expect(end.ended).to.equal(false);
    expect(visible([...events, ...end.events])).to.deep.equal([{ type: "text", text: "Hello world" }]);
    const done = end.events.at(-1) as Done;
    expect(done.finish_reason).to.equal("length");
    expect(done.usage).to.deep.equal({ prompt_tokens: 10, cached_tokens: 4, completion_tokens: 3, reasoning_tokens: 0 });
    // First token at +50 ms; the last at +70 ms: two decode steps after the first.
    expect(done.timings).to.deep.include({ prompt_n: 6, prompt_ms: 50, predicted_n: 3, predicted_ms: 20, predicted_per_second: 100, cache_n: 4, queue_ms: 3 });
  });

  it("prefers the native scheduler's timings when it gives them", () => {
    const stage = new OutputStage({ stop: [], parser: null, now: clock().now });
    stage.start({ prompt_tokens: 5, cached_tokens: 0, queue_ms: 0 });
    stage.token("a");
    stage.token("b");
    const done = stage.done("", "stop", { prompt_ms: 100, predicted_ms: 40 }).events.at(-1) as Done;
    expect(done.timings).to.deep.include({ prompt_ms: 100, predicted_ms: 40, prompt_per_second: 50, predicted_per_second: 25 });
  });

  it("ends at a stop string split across pieces and releases nothing after it", () => {
    const stage = new OutputStage({ stop: ["END"], parser: null, now: clock().now });
    const r = run(stage, ["abc E", "N", "Dxyz", "more"]);
    expect(visible(r.events)).to.deep.equal([{ type: "text", text: "abc " }]);
    expect(r.done).to.deep.include({ finish_reason: "stop_sequence", stop_sequence: "END" });
    expect(r.steps.at(-1)!.ended).to.equal(true);
    expect(r.steps).to.have.length(3);
    expect(stage.finished).to.equal(true);
  });

  it("flushes text held back for a stop string that never completed", () => {
    const stage = new OutputStage({ stop: ["END"], parser: null, now: clock().now });
    const r = run(stage, ["abc E", "N"]);
    expect(visible(r.events)).to.deep.equal([{ type: "text", text: "abc EN" }]);
    expect(r.done.finish_reason).to.equal("stop");
  });

  it("runs the family parser after the stop matcher: thinking, text and a tool call", () => {
    const stage = new OutputStage({ stop: [], parser: hermes(), now: clock().now });
    const r = run(stage, ["<thi", "nk>hmm", "</think>", "Let me check.", "<tool_call>", '{"name": "get_weather", ', '"arguments": {"city": "Paris"}}', "</tool_call>"]);
    expect(visible(r.events)).to.deep.equal([
      { type: "thinking", text: "hmm" },
      { type: "text", text: "Let me check." },
      { type: "tool_call_start", index: 0, id: "call_0", name: "get_weather", kind: "function" },
      { type: "tool_call_delta", index: 0, arguments: '{"city": "Paris"}' },
      { type: "tool_call_end", index: 0, arguments: '{"city": "Paris"}' },
    ]);
    expect(r.done.finish_reason).to.equal("tool_calls");
    expect(r.done.usage.reasoning_tokens).to.equal(1);
  });

  it("a stop string inside a tool call's text still ends the answer there", () => {
    const stage = new OutputStage({ stop: ["Paris"], parser: hermes(), now: clock().now });
    const r = run(stage, ["Hi ", '<tool_call>{"name": "get_weather", "arguments": {"city": "', "Paris", '"}}</tool_call>']);
    expect(r.done).to.deep.include({ finish_reason: "tool_calls", stop_sequence: "Paris" });
    expect(r.steps.at(-1)!.ended).to.equal(true);
  });

  it("closes the think block at the thinking budget and asks for a resubmission", () => {
    const stage = new OutputStage({ stop: [], parser: hermes(TOOLS, true), thinking_budget: 2, now: clock().now });
    expect(stage.start({ prompt_tokens: 7, cached_tokens: 0, queue_ms: 1 })).to.equal(true);
    const a = stage.token("one ");
    expect(a.resubmit).to.equal(null);
    const b = stage.token("two ");
    expect(b.resubmit).to.deep.equal({ continuation: "one two \n</think>\n\n", literal: [0, 8], completion_tokens: 2 });
    expect(stage.resumed).to.equal(true);
    // The resubmitted request's start is the same answer: its prompt numbers are ignored.
    expect(stage.start({ prompt_tokens: 99, cached_tokens: 98, queue_ms: 0 })).to.equal(false);
    const rest = run(stage, ["The", " answer."]);
    expect(visible([...a.events, ...b.events, ...rest.events])).to.deep.equal([
      { type: "thinking", text: "one two" },
      { type: "text", text: "The answer." },
    ]);
    expect(rest.done.usage).to.deep.include({ prompt_tokens: 7, completion_tokens: 4, reasoning_tokens: 2 });
    expect(stage.output).to.equal("one two \n</think>\n\nThe answer.");
  });

  it("harmony: the budget closes analysis and opens final, the model's text kept literal", () => {
    // harmony: the budget closes analysis and opens final; thinking never resumes, so one cut.
    const p = parserFor("<|start|>{{ x }}<|channel|>y<|message|>", { tools: [], starts_in_thinking: false, new_call_id: () => "x" });
    expect(p).to.be.instanceOf(HarmonyParser);
    const stage = new OutputStage({ stop: [], parser: p, thinking_budget: 1, now: clock().now });
    const s = stage.token("<|channel|>analysis<|message|>think");
    expect(s.resubmit!.continuation).to.equal("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>");
    expect(s.resubmit!.literal).to.deep.equal([0, "<|channel|>analysis<|message|>think".length]);
    const r = run(stage, ["Done."]);
    expect(visible([...s.events, ...r.events])).to.deep.equal([
      { type: "thinking", text: "think" },
      { type: "text", text: "Done." },
    ]);
  });

  it("cancel ends with finish_reason cancelled and drops what the parser held back", () => {
    const stage = new OutputStage({ stop: [], parser: hermes(), now: clock().now });
    const a = stage.token("Hello <tool_");
    const events = stage.cancel();
    expect(visible([...a.events, ...events])).to.deep.equal([{ type: "text", text: "Hello" }]);
    expect((events.at(-1) as Done).finish_reason).to.equal("cancelled");
    expect(stage.cancel()).to.deep.equal([]); // once
  });

  it("carries the previous attempt's prompt side until its own start", () => {
    const first = new OutputStage({ stop: [], parser: null, now: clock().now });
    first.start({ prompt_tokens: 12, cached_tokens: 2, queue_ms: 5 });
    const second = new OutputStage({ stop: [], parser: null, now: clock().now }, first.prompt);
    expect((second.cancel().at(-1) as Done).usage).to.deep.include({ prompt_tokens: 12, cached_tokens: 2 });
  });

  describe("a repeated tool call", () => {
    const call = (args: string) => `<tool_call>{"name": "get_weather", "arguments": ${args}}</tool_call>\n`;

    it("ends the answer at a call identical to an earlier one, which is dropped", () => {
      const stage = new OutputStage({ stop: [], parser: hermes(), now: clock().now });
      const text = call('{"city": "Paris"}') + call('{"city": "Paris"}') + call('{"city": "Paris"}');
      const r = run(stage, [...text]);
      expect(r.steps.at(-1)!.ended).to.equal(true);
      expect(r.done.finish_reason).to.equal("tool_calls");
      const starts = r.events.filter((e) => e.type === "tool_call_start");
      const ends = r.events.filter((e) => e.type === "tool_call_end");
      expect(starts).to.have.length(1);
      expect(ends).to.deep.equal([{ type: "tool_call_end", index: 0, arguments: '{"city": "Paris"}' }]);
      // It stopped at the second call: the third was never read.
      expect(r.done.usage.completion_tokens).to.equal(call('{"city": "Paris"}').length * 2 - 1);
    });

    it("keeps calls that differ in name or arguments, streamed as they come", () => {
      const stage = new OutputStage({ stop: [], parser: hermes(), now: clock().now });
      const text = call('{"city": "Paris"}') + call('{"city": "Pau"}') + '<tool_call>{"name": "read_file", "arguments": {"city": "Paris"}}</tool_call>';
      const r = run(stage, [...text]);
      expect(r.steps.some((s) => s.ended)).to.equal(false);
      const ends = r.events.filter((e) => e.type === "tool_call_end");
      expect(ends.map((e) => (e as { arguments: string }).arguments)).to.deep.equal(['{"city": "Paris"}', '{"city": "Pau"}', '{"city": "Paris"}']);
      // The second call's arguments were held only while they could still be the first's: its
      // start and deltas come out, in order, before its end.
      const second = r.events.filter((e) => "index" in e && e.index === 1).map((e) => e.type);
      expect(second[0]).to.equal("tool_call_start");
      expect(second.at(-1)).to.equal("tool_call_end");
      expect(merged(r.events.filter((e) => e.type === "tool_call_delta" && e.index === 1))).to.deep.equal([{ type: "tool_call_delta", index: 1, arguments: '{"city": "Pau"}' }]);
      expect(r.done.finish_reason).to.equal("tool_calls");
    });

    it("a repeat spelled differently (key order, spacing) is kept, and the answer ends after it", () => {
      const stage = new OutputStage({ stop: [], parser: hermes(), now: clock().now });
      const a = '{"city": "Paris", "unit": "c"}';
      const b = '{"unit":"c","city":"Paris"}';
      const r = run(stage, [...(call(a) + call(b) + call(a))]);
      expect(r.steps.at(-1)!.ended).to.equal(true);
      expect(r.events.filter((e) => e.type === "tool_call_end").map((e) => (e as { arguments: string }).arguments)).to.deep.equal([a, b]);
    });

    it("a repeat that the generation's end completes is dropped too", () => {
      const stage = new OutputStage({ stop: [], parser: hermes(), now: clock().now });
      const r = run(stage, [call('{"city": "Paris"}'), '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}']);
      expect(r.events.filter((e) => e.type === "tool_call_start")).to.have.length(1);
      expect(r.done.finish_reason).to.equal("tool_calls");
    });
  });

  describe("the parser registry", () => {
    const opts = { tools: [], starts_in_thinking: false, new_call_id: () => "x" };

    it("chooses the family from the template", () => {
      expect(parserFor("{{ messages }}<|im_start|>", opts)).to.be.instanceOf(HermesParser);
      expect(parserFor(null, opts)).to.be.instanceOf(HermesParser);
      expect(parserFor("<|start|>assistant<|channel|>final<|message|>", opts)).to.be.instanceOf(HarmonyParser);
    });

    it("a request's parser: none for raw text; no tools under tool_choice none; call ids from the request id", () => {
      const base = { id: "chatcmpl-abc123", sampling: { temperature: 0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 }, max_tokens: null, stop: [] };
      const text: GenerationRequest = { ...base, input: { kind: "text", text: "x" } };
      expect(requestParser(text, null, false)).to.equal(null);
      const chat = (type: "auto" | "none"): GenerationRequest => ({ ...base, input: { kind: "chat", chat: { system: [], turns: [], tools: TOOLS, tool_choice: { type } } } });
      const call = '<tool_call>{"name": "read_file", "arguments": {}}</tool_call>';
      const auto = requestParser(chat("auto"), "hermes", false)!;
      expect(auto.push(call)[0]).to.deep.include({ type: "tool_call_start", id: "call_atcmplabc123_0" });
      const none = requestParser(chat("none"), "hermes", false)!;
      expect(merged([...none.push(call), ...none.finish()])).to.deep.equal([{ type: "text", text: call }]);
    });
  });
});
