// Property-based requests against a real server (fixture model, scripted output so each answer
// is a few tokens): Responses input items, Anthropic content blocks and the tool definitions of
// every API, with every item / block type at every position and each field either well formed
// or of a wrong JSON type. Every answer must be 200 or 400 (never a 500, never an internal error
// in the log), and inside openapi.json (the harness fails a test on any contract violation,
// streams included). Seeds are fixed and runs bounded, so the suite is the same on every run.
import { expect } from "chai";
import fc from "fast-check";
import { postJson, scriptHeader, startTestServer, type TestServer } from "../helpers/server.js";

// ------------------------------------------------------------------ values

/** A value of some other JSON type than the field wants (or the right type, badly shaped). */
const wrong = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -3, max: 3 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  // Strings that are other types' names: every type at every position.
  fc.constantFrom("", "x", "<tool_call>", "item_reference", "input_image", "image_url", "image", "document", "tool", "namespace", "web_search_call"),
  fc.constant([]),
  fc.constant({}),
  fc.constant([null]),
  fc.constant(["x"]),
  fc.constant([{}]),
  fc.constant({ type: "text" }),
  fc.constant([{ type: "image", source: {} }]),
);
/** An optional field: absent or well formed (wrong values come from `mutated`). */
const field = <T>(good: fc.Arbitrary<T>) => fc.option(good as fc.Arbitrary<unknown>, { nil: undefined, freq: 3 });
/** One object per type: `type` and the fields that type reads (each optional one may be absent). */
function typed(shapes: Record<string, Record<string, fc.Arbitrary<unknown>>>, required: Record<string, string[]> = {}): fc.Arbitrary<Record<string, unknown>> {
  return fc.oneof(
    ...Object.entries(shapes).map(([type, fields]) =>
      fc.record({ type: fc.constant(type), ...fields }, { requiredKeys: ["type", ...(required[type] ?? [])] as never[] }).map(compact),
    ),
  );
}
const text = fc.constantFrom("hi", "", "42", "line\nline");
const id = fc.constantFrom("c1", "c2", "toolu_1", "rs_1", "");
const name = fc.constantFrom("f", "g", "shell", "");

/** Every path below the root of a JSON value: object keys and array indices, at every depth. */
function paths(v: unknown, at: (string | number)[] = [], out: (string | number)[][] = []): (string | number)[][] {
  if (Array.isArray(v)) v.forEach((x, i) => (out.push([...at, i]), paths(x, [...at, i], out)));
  else if (v !== null && typeof v === "object") for (const [k, x] of Object.entries(v)) out.push([...at, k]), paths(x, [...at, k], out);
  return out;
}

/**
 * Well-formed bodies, and the same with one field anywhere in them (an item, a block, a tool,
 * a part, a field of one) given a wrong value or left out: the shapes a careless client sends.
 * `keep`: top-level fields the test itself reads.
 */
function mutated(body: fc.Arbitrary<Record<string, unknown>>, keep: string[]): fc.Arbitrary<Record<string, unknown>> {
  return body.chain((b) => {
    const all = paths(b).filter((p) => !keep.includes(String(p[0])));
    if (all.length === 0) return fc.constant(b);
    return fc.oneof(
      { weight: 1, arbitrary: fc.constant(b) },
      {
        weight: 3,
        arbitrary: fc.tuple(fc.nat(all.length - 1), fc.option(wrong, { nil: undefined, freq: 5 })).map(([i, value]) => {
          const copy = structuredClone(b);
          const path = all[i];
          let parent: any = copy;
          for (const k of path.slice(0, -1)) parent = parent[k];
          const last = path[path.length - 1];
          if (value === undefined && !Array.isArray(parent)) delete parent[last];
          else parent[last] = value ?? null;
          return copy;
        }),
      },
    );
  });
}

/** Drops the undefined keys, so an absent field is absent on the wire. */
function compact(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}

// ------------------------------------------------------------------ Responses

const responsesPart = typed(
  { input_text: { text }, output_text: { text }, summary_text: { text }, reasoning_text: { text }, refusal: { refusal: text } },
  { input_text: ["text"], output_text: ["text"], summary_text: ["text"], reasoning_text: ["text"], refusal: ["refusal"] },
);
const responsesParts = fc.oneof(text, fc.array(responsesPart, { maxLength: 2 }));
const call = { call_id: id, name, id: field(id) };
const responsesItem = fc.oneof(
  fc.record({ role: fc.constantFrom("system", "developer", "user", "assistant"), content: responsesParts }),
  typed(
    {
      message: { role: fc.constantFrom("system", "developer", "user", "assistant"), content: responsesParts },
      function_call: { ...call, arguments: fc.constantFrom("{}", '{"a": 1}', "not json"), namespace: field(name) },
      custom_tool_call: { ...call, input: text },
      local_shell_call: { call_id: id, action: fc.constant({ type: "exec", command: ["ls"] }) },
      function_call_output: { call_id: id, output: responsesParts },
      custom_tool_call_output: { call_id: id, output: responsesParts },
      local_shell_call_output: { call_id: id, output: responsesParts },
      reasoning: { id, summary: fc.array(responsesPart, { maxLength: 2 }), content: field(fc.array(responsesPart, { maxLength: 1 })) },
    },
    { message: ["role", "content"], function_call: ["call_id", "name"], custom_tool_call: ["call_id", "name"], local_shell_call: ["call_id"], function_call_output: ["call_id", "output"], custom_tool_call_output: ["call_id", "output"], local_shell_call_output: ["call_id", "output"], reasoning: ["summary"] },
  ),
);

const schema = fc.constantFrom({ type: "object", properties: { a: { type: "string" } }, required: ["a"] }, { type: "object" }, { type: "object", properties: { n: { type: "integer", minimum: 1 } } });
const responsesFunction = typed(
  { function: { name, description: field(text), parameters: field(schema) }, custom: { name, description: field(text) } },
  { function: ["name"], custom: ["name"] },
);
const responsesTools = fc.array(
  fc.oneof(responsesFunction, typed({ namespace: { name, description: field(text), tools: fc.array(responsesFunction, { minLength: 1, maxLength: 2 }) }, web_search: {} }, { namespace: ["name", "tools"] })),
  { maxLength: 3 },
);
const responsesChoice = fc.oneof(
  fc.constantFrom("auto", "none", "required"),
  fc.record({ type: fc.constantFrom("function", "custom"), name }),
);

const responsesBody = fc
  .record(
    {
      input: fc.oneof({ weight: 1, arbitrary: text }, { weight: 6, arbitrary: fc.array(responsesItem, { minLength: 1, maxLength: 4 }) }),
      tools: field(responsesTools),
      tool_choice: field(responsesChoice),
      instructions: field(text),
      reasoning: field(fc.record({ effort: field(fc.constantFrom("low", "none")), summary: field(fc.constantFrom("auto", "detailed")) }, { requiredKeys: [] }).map(compact)),
      stream: fc.boolean(),
    },
    { requiredKeys: ["input", "stream"] },
  )
  .map(compact);

// ------------------------------------------------------------------ Anthropic

const textBlock = fc.record({ type: fc.constant("text"), text });
const block = typed(
  {
    text: { text },
    thinking: { thinking: text, signature: fc.constant("sig") },
    redacted_thinking: { data: fc.constant("opaque") },
    tool_use: { id, name, input: fc.constant({ a: 1 }) },
    tool_result: { tool_use_id: id, content: field(fc.oneof(text, fc.array(textBlock, { maxLength: 2 }))), is_error: field(fc.boolean()) },
  },
  { text: ["text"], thinking: ["thinking"], redacted_thinking: ["data"], tool_use: ["id", "name", "input"], tool_result: ["tool_use_id"] },
);
const anthropicMessage = fc.record({ role: fc.constantFrom("user", "user", "assistant", "system"), content: fc.oneof(text, fc.array(block, { minLength: 1, maxLength: 3 })) });
const anthropicTool = fc.oneof(
  fc.record({ name, description: field(text), input_schema: field(schema) }, { requiredKeys: ["name"] }).map(compact),
  fc.record({ type: fc.constantFrom("custom", "web_search_20250305"), name }),
);
const anthropicBody = fc
  .record(
    {
      messages: fc.array(anthropicMessage, { minLength: 1, maxLength: 2 }),
      system: field(fc.oneof(text, fc.array(textBlock, { maxLength: 2 }))),
      tools: field(fc.array(anthropicTool, { maxLength: 3 })),
      tool_choice: field(fc.oneof(fc.record({ type: fc.constantFrom("auto", "any", "none") }), fc.record({ type: fc.constant("tool"), name }))),
      stream: fc.boolean(),
      count: fc.boolean(),
    },
    { requiredKeys: ["messages", "stream", "count"] },
  )
  .map(compact);

// ------------------------------------------------------------------ Chat tools

const chatTool = fc.record({ type: fc.constant("function"), function: fc.record({ name, description: field(text), parameters: field(schema) }, { requiredKeys: ["name"] }).map(compact) });
const chatBody = fc
  .record(
    {
      tools: field(fc.array(chatTool, { maxLength: 3 })),
      tool_choice: field(fc.oneof(fc.constantFrom("auto", "none", "required"), fc.record({ type: fc.constant("function"), function: fc.record({ name }) }))),
      content: fc.oneof(text, fc.array(typed({ text: { text }, input_text: { text } }, { text: ["text"], input_text: ["text"] }), { maxLength: 2 })),
      stream: fc.boolean(),
    },
    { requiredKeys: ["content", "stream"] },
  )
  .map(compact);

// ------------------------------------------------------------------ the suite

describe("fuzzed request shapes against a real server: 200 or 400, never 500", function () {
  this.timeout(120000);
  let s: TestServer;
  const statuses = new Map<string, number>();
  before(async () => {
    s = await startTestServer({ ctx: 1024 });
  });
  after(async () => {
    await s?.close();
  });

  async function send(path: string, body: Record<string, unknown>): Promise<void> {
    const before = s.logs.filter((l) => l.startsWith("internal error")).length;
    const r = await postJson(s.url + path, body, scriptHeader("ok"));
    // Read the whole answer: the contract tap checks a stream event by event as it passes.
    const answer = await r.text();
    const where = `${path} ${JSON.stringify(body)}\n→ ${r.status} ${answer.slice(0, 400)}`;
    expect([200, 400], where).to.include(r.status);
    expect(s.logs.filter((l) => l.startsWith("internal error")).length, `internal error logged for ${where}`).to.equal(before);
    const key = `${path} ${r.status}`;
    statuses.set(key, (statuses.get(key) ?? 0) + 1);
  }

  const settings = (seed: number) => ({ seed, numRuns: 200, endOnFailure: true });

  it("Responses: input items of every type at every position, tools (namespaces included) and tool_choice", async () => {
    await fc.assert(
      fc.asyncProperty(mutated(responsesBody, ["stream"]), async (body) => send("/v1/responses", { max_output_tokens: 2, ...body })),
      settings(2112),
    );
  });

  it("Messages and count_tokens: content blocks of every type at every position, system blocks, tools and tool_choice", async () => {
    await fc.assert(
      fc.asyncProperty(mutated(anthropicBody, ["stream", "count"]), async ({ count, stream, ...body }) =>
        count ? send("/v1/messages/count_tokens", body) : send("/v1/messages", { max_tokens: 2, stream, ...body }),
      ),
      settings(4221),
    );
  });

  it("Chat Completions: tool definitions, tool_choice and content parts", async () => {
    await fc.assert(
      fc.asyncProperty(mutated(chatBody, ["stream"]), async ({ content, ...body }) => send("/v1/chat/completions", { max_tokens: 2, messages: [{ role: "user", content }], ...body })),
      settings(1337),
    );
  });

  it("took both answers on every route (the generators reach handlers, not only the contract's refusals)", () => {
    for (const path of ["/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions"]) {
      expect(statuses.get(`${path} 200`) ?? 0, `${path}: ${JSON.stringify([...statuses])}`).to.be.at.least(3);
      expect(statuses.get(`${path} 400`) ?? 0, `${path}: ${JSON.stringify([...statuses])}`).to.be.at.least(3);
    }
  });
});
