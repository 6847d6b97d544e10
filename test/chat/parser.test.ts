import { expect } from "chai";
import { HermesParser } from "../../src/chat/parsers/hermes.js";
import type { GenerationEvent, ToolSpec } from "../../src/engine/types.js";
import { merged } from "../helpers/events.js";

const TOOLS: ToolSpec[] = [
  { name: "get_weather", kind: "function", parameters: { type: "object", properties: { city: { type: "string" } } } },
  { name: "read_file", kind: "function" },
  { name: "apply_patch", kind: "custom", namespace: "codex" },
];

function parser(opts: { tools?: ToolSpec[]; thinking?: boolean } = {}): HermesParser {
  let n = 0;
  return new HermesParser({ tools: opts.tools ?? TOOLS, starts_in_thinking: opts.thinking ?? false, new_call_id: () => `call_${n++}` });
}

function run(chunks: string[], opts: { tools?: ToolSpec[]; thinking?: boolean } = {}): GenerationEvent[] {
  const p = parser(opts);
  const out: GenerationEvent[] = [];
  for (const c of chunks) out.push(...p.push(c));
  out.push(...p.finish());
  return out;
}

// A partial tag leaking into text would show up as an extra text run here, so equality with the
// one-chunk result is also the "never a partial tag" check.

/** Every split of `s` into at most three chunks, every single-character split, and random ones. */
function* splits(s: string, random = 200): Generator<string[]> {
  yield [s];
  yield [...s];
  for (let i = 1; i < s.length; i++) {
    yield [s.slice(0, i), s.slice(i)];
    for (let j = i + 1; j < s.length; j++) yield [s.slice(0, i), s.slice(i, j), s.slice(j)];
  }
  let seed = 12345;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  for (let k = 0; k < random; k++) {
    const parts: string[] = [];
    let at = 0;
    while (at < s.length) {
      const n = 1 + Math.floor(rnd() * 6);
      parts.push(s.slice(at, at + n));
      at += n;
    }
    yield parts;
  }
}

function checkSplits(sample: string, expected: GenerationEvent[], opts: { tools?: ToolSpec[]; thinking?: boolean } = {}): void {
  for (const chunks of splits(sample)) {
    const events = run(chunks, opts);
    const got = merged(events);
    if (JSON.stringify(got) !== JSON.stringify(expected)) {
      expect(got, `chunks ${JSON.stringify(chunks)}`).to.deep.equal(expected);
    }
    // The end event carries exactly what the deltas streamed.
    const deltas = new Map<number, string>();
    for (const e of events) {
      if (e.type === "tool_call_delta") deltas.set(e.index, (deltas.get(e.index) ?? "") + e.arguments);
      if (e.type === "tool_call_end") expect(e.arguments, `chunks ${JSON.stringify(chunks)}`).to.equal(deltas.get(e.index) ?? "");
    }
  }
}

const start = (index: number, name: string, kind: "function" | "custom" = "function", extra: Record<string, unknown> = {}): GenerationEvent =>
  ({ type: "tool_call_start", index, id: `call_${index}`, name, kind, ...extra }) as GenerationEvent;

describe("HermesParser (the hermes family)", () => {
  it("passes plain text through, whatever the chunking", () => {
    checkSplits("Hello, world! 1 < 2 and a <b>tag</b>.", [{ type: "text", text: "Hello, world! 1 < 2 and a <b>tag</b>." }]);
  });

  it("splits <think> from the answer", () => {
    checkSplits("<think>\nLet me see.\n</think>\n\nParis.", [
      { type: "thinking", text: "Let me see." },
      { type: "text", text: "Paris." },
    ]);
  });

  it("starts in thinking when the prompt opened <think>", () => {
    checkSplits("Hmm, 2+2.\n</think>\n\n4", [{ type: "thinking", text: "Hmm, 2+2." }, { type: "text", text: "4" }], { thinking: true });
  });

  it("treats <think> after visible text as text", () => {
    checkSplits("Use <think> tags.", [{ type: "text", text: "Use <think> tags." }]);
  });

  it("parses one tool call and streams its arguments", () => {
    const sample = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris, \\"FR\\"", "days": [1, 2]}}\n</tool_call>\n';
    const args = '{"city": "Paris, \\"FR\\"", "days": [1, 2]}';
    checkSplits(sample, [
      { type: "text", text: "Checking." },
      start(0, "get_weather"),
      { type: "tool_call_delta", index: 0, arguments: args },
      { type: "tool_call_end", index: 0, arguments: args },
    ]);
    expect(JSON.parse(args)).to.deep.equal({ city: 'Paris, "FR"', days: [1, 2] });
  });

  it("parses two tool calls after thinking", () => {
    const sample =
      '<think>two files</think>\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a}.txt"}}\n</tool_call>\n<tool_call>\n{"arguments": {"path": "b.txt"}, "name": "read_file"}\n</tool_call>';
    checkSplits(sample, [
      { type: "thinking", text: "two files" },
      start(0, "read_file"),
      { type: "tool_call_delta", index: 0, arguments: '{"path": "a}.txt"}' },
      { type: "tool_call_end", index: 0, arguments: '{"path": "a}.txt"}' },
      start(1, "read_file"),
      { type: "tool_call_delta", index: 1, arguments: '{"path": "b.txt"}' },
      { type: "tool_call_end", index: 1, arguments: '{"path": "b.txt"}' },
    ]);
  });

  it("gives arguments-less calls an empty object", () => {
    checkSplits('<tool_call>{"name": "read_file"}</tool_call>', [
      start(0, "read_file"),
      { type: "tool_call_delta", index: 0, arguments: "{}" },
      { type: "tool_call_end", index: 0, arguments: "{}" },
    ]);
  });

  it("streams custom tool input raw, from a string or an {input} object", () => {
    const raw = '*** Begin Patch\n*** Update File: a.py\n-x = "1"\n+x = "\\u00e9"\n*** End Patch';
    const decoded = '*** Begin Patch\n*** Update File: a.py\n-x = "1"\n+x = "é"\n*** End Patch';
    const ns = { namespace: "codex" };
    checkSplits(`<tool_call>\n${JSON.stringify({ name: "apply_patch", arguments: raw }).replace("\\\\u00e9", "\\u00e9")}\n</tool_call>`, [
      start(0, "apply_patch", "custom", ns),
      { type: "tool_call_delta", index: 0, arguments: decoded },
      { type: "tool_call_end", index: 0, arguments: decoded },
    ]);
    checkSplits(`<tool_call>${JSON.stringify({ name: "apply_patch", arguments: { input: "hello\nworld" } })}</tool_call>`, [
      start(0, "apply_patch", "custom", ns),
      { type: "tool_call_delta", index: 0, arguments: "hello\nworld" },
      { type: "tool_call_end", index: 0, arguments: "hello\nworld" },
    ]);
    checkSplits('<tool_call>{"name": "apply_patch", "arguments": {"note": "in\\"put", "input": "a\\"b\\u00e9{", "n": [1]}}</tool_call>', [
      start(0, "apply_patch", "custom", ns),
      { type: "tool_call_delta", index: 0, arguments: 'a"bé{' },
      { type: "tool_call_end", index: 0, arguments: 'a"bé{' },
    ]);
    // {"input": …} streams while generated, not only at the end.
    const p = parser();
    const early = p.push('<tool_call>{"name": "apply_patch", "arguments": {"input": "line one\\nline');
    expect(early.filter((e) => e.type === "tool_call_delta").map((e) => (e as { arguments: string }).arguments).join("")).to.equal("line one\nline");
    checkSplits(`<tool_call>${JSON.stringify({ name: "apply_patch", input: "x\ty" })}</tool_call>`, [
      start(0, "apply_patch", "custom", ns),
      { type: "tool_call_delta", index: 0, arguments: "x\ty" },
      { type: "tool_call_end", index: 0, arguments: "x\ty" },
    ]);
  });

  it("falls back to text for malformed or unknown calls", () => {
    checkSplits("<tool_call>{bad json</tool_call> done", [{ type: "text", text: "<tool_call>{bad json</tool_call> done" }]);
    checkSplits('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', [{ type: "text", text: '<tool_call>{"name": "nope", "arguments": {}}</tool_call>' }]);
    checkSplits('<tool_call>{"name": "get_wea', [{ type: "text", text: '<tool_call>{"name": "get_wea' }]);
  });

  it("accepts a call whose closing tag never came", () => {
    checkSplits('<tool_call>\n{"name": "read_file", "arguments": {"path": "x"}}\n', [
      start(0, "read_file"),
      { type: "tool_call_delta", index: 0, arguments: '{"path": "x"}' },
      { type: "tool_call_end", index: 0, arguments: '{"path": "x"}' },
    ]);
  });

  it("reads a bare call object at the start of the answer (after whitespace, or after thinking)", () => {
    const call = [start(0, "get_weather"), { type: "tool_call_delta", index: 0, arguments: '{"city": "Paris"}' }, { type: "tool_call_end", index: 0, arguments: '{"city": "Paris"}' }] as GenerationEvent[];
    checkSplits(' \n{"name": "get_weather", "arguments": {"city": "Paris"}}\n', call);
    checkSplits('{ "name" : "get_weather", "arguments": {"city": "Paris"}}', call);
    checkSplits('<think>hm</think>\n{"name": "get_weather", "arguments": {"city": "Paris"}}', [{ type: "thinking", text: "hm" }, ...call]);
    checkSplits('{"name": "read_file", "arguments": {}}\n{"name": "read_file", "arguments": {}}', [
      start(0, "read_file"),
      { type: "tool_call_delta", index: 0, arguments: "{}" },
      { type: "tool_call_end", index: 0, arguments: "{}" },
      start(1, "read_file"),
      { type: "tool_call_delta", index: 1, arguments: "{}" },
      { type: "tool_call_end", index: 1, arguments: "{}" },
    ]);
  });

  it("reads call objects in a ```json fence, and leaves other fences and late objects as text", () => {
    checkSplits('Sure:\n```json\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n```\nok', [
      { type: "text", text: "Sure:" },
      start(0, "get_weather"),
      { type: "tool_call_delta", index: 0, arguments: '{"city": "Rome"}' },
      { type: "tool_call_end", index: 0, arguments: '{"city": "Rome"}' },
      { type: "text", text: "ok" },
    ]);
    checkSplits('```\n{"name": "read_file", "arguments": {}}\n{"name": "read_file"}\n```', [
      start(0, "read_file"),
      { type: "tool_call_delta", index: 0, arguments: "{}" },
      { type: "tool_call_end", index: 0, arguments: "{}" },
      start(1, "read_file"),
      { type: "tool_call_delta", index: 1, arguments: "{}" },
      { type: "tool_call_end", index: 1, arguments: "{}" },
    ]);
    checkSplits('```json\n{"a": 1}\n```', [{ type: "text", text: '```json\n{"a": 1}\n```' }]);
    checkSplits('Try {"name": "read_file"} now', [{ type: "text", text: 'Try {"name": "read_file"} now' }]);
    checkSplits('{"name": "nope", "arguments": {}} x', [{ type: "text", text: '{"name": "nope", "arguments": {}} x' }]);
    checkSplits('{"name": "read_file"}', [{ type: "text", text: '{"name": "read_file"}' }], { tools: [] });
  });

  it("leaves <tool_call> as text when no tools were offered", () => {
    checkSplits('<tool_call>{"name": "read_file"}</tool_call>', [{ type: "text", text: '<tool_call>{"name": "read_file"}</tool_call>' }], { tools: [] });
  });

  it("flushes a held partial tag at the end", () => {
    checkSplits("a <tool_ca", [{ type: "text", text: "a <tool_ca" }]);
    checkSplits("<think>x </thi", [{ type: "thinking", text: "x </thi" }]);
  });

  it("counts tool calls", () => {
    const p = parser();
    p.push('<tool_call>{"name": "read_file", "arguments": {}}</tool_call>');
    p.finish();
    expect(p.tool_calls).to.equal(1);
  });
});
