// The JSON Schema -> grammar converter (src/chat/tool-grammar.ts), checked with the native grammar
// engine itself (native/build/engine/mb_grammar, built by `npm run build:native`): every valid
// instance in the converter's fixed layout must be a complete sentence of the grammar, every
// invalid one must not be. The forced-call grammar's sentences must also parse back into exactly
// one call through the real output parser.
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { HermesParser } from "../../src/chat/parsers/hermes.js";
import { autoTools, forcedTools, gbnfLiteral, lazyToolCallGrammar, MAX_AUTO_CALLS, schemaGrammar, toolCallGrammar, ToolSchemaError } from "../../src/chat/tool-grammar.js";
import { CALL_OPENINGS } from "../../src/chat/tool-forms.js";
import type { GenerationEvent, ToolSpec } from "../../src/engine/types.js";
import { capturedRequests } from "../clients/captured.js";

const TOOL = resolve("native/build/engine/mb_grammar");
const dir = mkdtempSync(join(tmpdir(), "mb-grammar-"));
let nfile = 0;

/** "1" complete sentence, "p" a valid prefix only, "0" rejected — one per input. */
function check(grammar: string, inputs: string[]): string[] {
  if (!existsSync(TOOL)) throw new Error(`${TOOL} is missing: run \`npm run build:native\``);
  const file = join(dir, `g${nfile++}.gbnf`);
  writeFileSync(file, grammar);
  const r = spawnSync(TOOL, ["check", file], { input: inputs.map((s) => Buffer.from(s, "utf8").toString("hex")).join("\n") + "\n", encoding: "utf8" });
  if (r.status !== 0) throw new Error(`grammar rejected (${r.status}): ${r.stderr}\n${grammar}`);
  return r.stdout.trim().split("\n");
}

/** JSON in the grammar's layout: ", " between items, ": " after keys. */
function layout(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(layout).join(", ")}]`;
  if (v !== null && typeof v === "object") return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${layout(x)}`).join(", ")}}`;
  return JSON.stringify(v);
}

function expectSchema(schema: unknown, valid: unknown[], invalid: unknown[], rawInvalid: string[] = []): void {
  const g = schemaGrammar(schema);
  const inputs = [...valid.map(layout), ...invalid.map(layout), ...rawInvalid];
  const out = check(g, inputs);
  valid.forEach((v, i) => expect(out[i], `valid ${layout(v)}\n${g}`).to.equal("1"));
  inputs.slice(valid.length).forEach((s, i) => expect(out[valid.length + i], `invalid ${s}\n${g}`).to.not.equal("1"));
}

describe("tool grammar: JSON Schema -> grammar", () => {
  it("escapes grammar literals (quotes, backslashes, control bytes; UTF-8 as is)", () => {
    expect(gbnfLiteral('a"b\\c\n\t\x01é')).to.equal('"a\\"b\\\\c\\n\\t\\x01é"');
    expect(check(`root ::= ${gbnfLiteral('a"b\\c\n\t\x01é')}`, ['a"b\\c\n\t\x01é', "ab"])).to.deep.equal(["1", "0"]);
  });

  it("strings: escapes, UTF-8, length bounds; control characters and broken escapes rejected", () => {
    expectSchema({ type: "string" }, ["", "plain", 'q"uote', "back\\slash", "new\nline", "tab\t", "é€😀", "\u0001"], [1, null], [
      '"raw\nnewline"',
      '"bad \\x escape"',
      '"unterminated',
      '"\\u12"',
      "'single'",
    ]);
    expectSchema({ type: "string", minLength: 2, maxLength: 4 }, ["ab", "abcd", "é😀"], ["a", "abcde"]);
    expectSchema({ type: "string", maxLength: 0 }, [""], ["a"]);
  });

  it("numbers and integers: JSON syntax only, integer bounds where they are cheap to spell", () => {
    expectSchema({ type: "number" }, [0, -1, 3.25, 1e21, -0.5, 12345678], ["1"], ["01", "1.", ".5", "+1", "1e", "NaN", "1e999"]);
    expectSchema({ type: "integer" }, [0, -7, 42], [1.5, "3"], ["1e3", "-"]);
    expectSchema({ type: "integer", minimum: 0 }, [0, 9, 100], [-1]);
    expectSchema({ type: "integer", minimum: 1 }, [1, 250], [0, -3]);
    expectSchema({ type: "integer", minimum: 1, maximum: 12 }, [1, 7, 10, 12], [0, 13, 100]);
    expectSchema({ type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 3 }, [1, 2], [0, 3]);
  });

  it("enum / const of any JSON values, boolean, null, type arrays, nullable", () => {
    expectSchema({ enum: ["c", "f", 3, null, true, { a: [1] }] }, ["c", "f", 3, null, true, { a: [1] }], ["C", 4, false, { a: [2] }]);
    expectSchema({ const: "only" }, ["only"], ["other"]);
    expectSchema({ type: "boolean" }, [true, false], [null, "true"]);
    expectSchema({ type: "null" }, [null], [false]);
    expectSchema({ type: ["string", "null"] }, ["x", null], [1]);
    expectSchema({ type: "integer", nullable: true }, [1, null], ["1"]);
  });

  it("objects: required in order, optional ones optionally, no extra keys, commas right", () => {
    const schema = {
      type: "object",
      properties: { a: { type: "integer" }, b: { type: "string" }, c: { type: "boolean" }, d: { type: "null" } },
      required: ["b", "d"],
    };
    expectSchema(
      schema,
      [{ b: "x", d: null }, { a: 1, b: "x", d: null }, { a: 1, b: "x", c: true, d: null }, { b: "", c: false, d: null }],
      [{ a: 1, d: null }, { b: "x" }, { b: "x", d: null, e: 1 }, {}, { d: null, b: "x" }],
      ['{"b": "x", "d": null,}', '{, "b": "x", "d": null}', '{"b":"x", "d": null}'],
    );
    // All optional: any in-order subset, including none.
    const opt = { type: "object", properties: { x: { type: "integer" }, y: { type: "integer" }, z: { type: "integer" } } };
    expectSchema(opt, [{}, { x: 1 }, { y: 2 }, { z: 3 }, { x: 1, z: 3 }, { x: 1, y: 2, z: 3 }, { y: 2, z: 3 }], [{ w: 1 }], ['{, "x": 1}', '{"x": 1, }']);
    // A required key without a property schema still has to be there (any value).
    expectSchema({ type: "object", required: ["k"] }, [{ k: 1 }, { k: { deep: [1, "x"] } }], [{}]);
    // Empty properties: exactly {}; free-form object when no properties are declared.
    expectSchema({ type: "object", properties: {} }, [{}], [{ a: 1 }]);
    expectSchema({ type: "object" }, [{}, { any: [1, { b: null }] }], [[]]);
    expectSchema({ type: "object", additionalProperties: false }, [{}], [{ a: 1 }]);
    expectSchema({ type: "object", additionalProperties: { type: "integer" } }, [{}, { a: 1, b: 2 }], [{ a: "x" }]);
    // Keys that need escaping.
    expectSchema({ type: "object", properties: { 'we"ird\\key': { type: "integer" }, "é": { type: "integer" } }, required: ['we"ird\\key'] }, [{ 'we"ird\\key': 1, "é": 2 }], [{ "é": 2 }]);
  });

  it("arrays: items, minItems/maxItems, tuples", () => {
    expectSchema({ type: "array", items: { type: "integer" } }, [[], [1], [1, 2, 3]], [["a"]], ["[1,2]", "[1, ]"]);
    expectSchema({ type: "array", items: { enum: ["a", "b"] }, minItems: 1, maxItems: 3 }, [["a"], ["a", "b", "a"]], [[], ["a", "a", "a", "a"], ["c"]]);
    expectSchema({ type: "array", items: { type: "integer" }, minItems: 2 }, [[1, 2], [1, 2, 3, 4, 5]], [[1]]);
    expectSchema({ type: "array", maxItems: 0 }, [[]], [[1]]);
    expectSchema({ type: "array", prefixItems: [{ type: "integer" }, { type: "string" }] }, [[1, "a"]], [["a", 1], [1]]);
    expectSchema({ type: "array" }, [[], [1, "x", null, [true]]], [{}]);
  });

  it("anyOf / oneOf / allOf and $ref (including recursive refs)", () => {
    expectSchema({ anyOf: [{ type: "integer" }, { type: "string", maxLength: 2 }] }, [1, "ab"], ["abc", null]);
    expectSchema({ oneOf: [{ const: 1 }, { const: 2 }] }, [1, 2], [3]);
    expectSchema(
      { allOf: [{ type: "object", properties: { a: { type: "integer" } }, required: ["a"] }, { properties: { b: { type: "string" } }, required: ["b"] }] },
      [{ a: 1, b: "x" }],
      [{ a: 1 }, { b: "x" }],
    );
    const tree = {
      type: "object",
      properties: { root: { $ref: "#/$defs/node" } },
      required: ["root"],
      $defs: {
        node: {
          type: "object",
          properties: { name: { type: "string" }, children: { type: "array", items: { $ref: "#/$defs/node" } } },
          required: ["name"],
        },
      },
    };
    expectSchema(tree, [{ root: { name: "a" } }, { root: { name: "a", children: [{ name: "b", children: [] }, { name: "c" }] } }], [{ root: { children: [] } }]);
    expectSchema({ definitions: { u: { enum: ["c", "f"] } }, type: "object", properties: { unit: { $ref: "#/definitions/u" } }, required: ["unit"] }, [{ unit: "c" }], [{ unit: "k" }]);
    // An unresolvable $ref or an unknown keyword set falls back to any JSON value.
    expectSchema({ $ref: "#/$defs/missing" }, [1, "x", { a: [null] }], [], ["{a}"]);
    expectSchema({ type: "mystery" }, [1, [2]], [], ["tru"]);
  });
});

describe("tool grammar: forced tool calls", () => {
  const weather: ToolSpec = {
    name: "get_weather",
    kind: "function",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 30 }, unit: { enum: ["c", "f"] }, days: { type: "integer", minimum: 1, maximum: 7 } },
      required: ["city"],
    },
  };
  const search: ToolSpec = { name: "search", kind: "function", parameters: { type: "object", properties: { q: { type: "string" } }, required: ["q"] } };
  const shell: ToolSpec = { name: "shell", kind: "custom" };
  const call = (name: string, args: unknown) => `<tool_call>\n${layout({ name, arguments: args })}\n</tool_call>`;

  it("forcedTools: required = every offered tool, a named choice = that tool, otherwise none", () => {
    const tools = [weather, search, shell];
    expect(forcedTools({ tools, tool_choice: { type: "required" } })!.map((t) => t.name)).to.deep.equal(["get_weather", "search", "shell"]);
    expect(forcedTools({ tools, tool_choice: { type: "tool", name: "search" } })!.map((t) => t.name)).to.deep.equal(["search"]);
    expect(forcedTools({ tools, tool_choice: { type: "auto" } })).to.equal(null);
    expect(forcedTools({ tools, tool_choice: { type: "none" } })).to.equal(null);
    expect(forcedTools({ tools: [], tool_choice: { type: "required" } })).to.equal(null);
    expect(forcedTools({ tools, tool_choice: { type: "tool", name: "nope" } })).to.equal(null);
  });

  it("accepts exactly one Hermes call to an allowed tool, and the parser reads it back", () => {
    const g = toolCallGrammar([weather, search, shell]);
    const good = [
      call("get_weather", { city: "Paris" }),
      call("get_weather", { city: "Paris", unit: "f", days: 3 }),
      call("search", { q: 'with "quotes" and \\ and é' }),
      call("shell", { input: "ls -la\n" }),
    ];
    const bad = [
      call("other", { city: "Paris" }),
      call("get_weather", { unit: "c" }),
      call("get_weather", { city: "Paris", days: 9 }),
      call("shell", "raw"),
      "Sure! " + call("search", { q: "x" }),
      call("search", { q: "x" }) + "\n" + call("search", { q: "y" }),
      call("search", { q: "x" }).replace("\n</tool_call>", "</tool_call>"),
      '<tool_call>\n{"name":"search", "arguments": {"q": "x"}}\n</tool_call>',
    ];
    const out = check(g, [...good, ...bad, call("search", { q: "x" }).slice(0, 30)]);
    expect(out.slice(0, good.length)).to.deep.equal(good.map(() => "1"));
    expect(out.slice(good.length, good.length + bad.length)).to.deep.equal(bad.map(() => "0"));
    expect(out[out.length - 1]).to.equal("p");

    for (const text of good) {
      let n = 0;
      const p = new HermesParser({ tools: [weather, search, shell], starts_in_thinking: false, new_call_id: () => `call_${n++}` });
      const evs: GenerationEvent[] = [...p.push(text), ...p.finish()];
      const ends = evs.filter((e) => e.type === "tool_call_end");
      expect(ends, text).to.have.length(1);
      expect(evs.filter((e) => e.type === "text")).to.have.length(0);
    }
  });

  it("a named tool allows only that tool; a think block left open is closed first", () => {
    const g = toolCallGrammar([search]);
    expect(check(g, [call("search", { q: "x" }), call("get_weather", { city: "x" })])).to.deep.equal(["1", "0"]);
    const t = toolCallGrammar([search], { starts_in_thinking: true });
    expect(check(t, ["</think>\n\n" + call("search", { q: "x" }), call("search", { q: "x" })])).to.deep.equal(["1", "0"]);
  });

  it("refuses a tool whose schema can never end (recursion through required properties, non-empty arrays), naming the tool", () => {
    const tool = (parameters: Record<string, unknown>): ToolSpec => ({ name: "loop", kind: "function", parameters });
    const mutual = {
      type: "object",
      properties: { a: { $ref: "#/$defs/A" } },
      required: ["a"],
      $defs: {
        A: { type: "object", properties: { b: { $ref: "#/$defs/B" } }, required: ["b"] },
        B: { type: "object", properties: { a: { $ref: "#/$defs/A" } }, required: ["a"] },
      },
    };
    const unending = [
      mutual,
      // The cycle behind an optional property is still a trap: a model that starts it cannot stop.
      { ...mutual, required: [] },
      // Three rules long, through a non-empty array.
      {
        $defs: {
          X: { type: "object", properties: { y: { $ref: "#/$defs/Y" } }, required: ["y"] },
          Y: { type: "array", items: { $ref: "#/$defs/Z" }, minItems: 1 },
          Z: { anyOf: [{ $ref: "#/$defs/X" }, { type: "array", items: { $ref: "#/$defs/X" }, minItems: 2 }] },
        },
        type: "object",
        properties: { x: { $ref: "#/$defs/X" } },
      },
      // A self-reference one level in ({"n": <itself>}): not left-recursive, still endless.
      { type: "object", properties: { n: { $ref: "#" } }, required: ["n"] },
    ];
    for (const schema of unending) {
      expect(() => toolCallGrammar([search, tool(schema)]), JSON.stringify(schema)).to.throw(ToolSchemaError, /'#(\/\$defs\/[A-Z])?' can never end/).with.property("tool", "loop");
    }
    // Recursion with a way out is fine: an optional property, an array that may be empty, an anyOf with a leaf.
    const finite = [
      { type: "object", properties: { n: { $ref: "#" } } },
      { type: "object", properties: { kids: { type: "array", items: { $ref: "#" } } }, required: ["kids"] },
      { $defs: { e: { anyOf: [{ type: "integer" }, { type: "object", properties: { l: { $ref: "#/$defs/e" } }, required: ["l"] }] } }, $ref: "#/$defs/e" },
    ];
    for (const schema of finite) expect(() => toolCallGrammar([tool(schema)]), JSON.stringify(schema)).to.not.throw();
    const g = toolCallGrammar([tool(finite[1])]);
    expect(check(g, [call("loop", { kids: [{ kids: [] }] })])).to.deep.equal(["1"]);
  });

  it("tools without parameters take {}", () => {
    const g = toolCallGrammar([{ name: "now", kind: "function" }]);
    expect(check(g, [call("now", {}), call("now", { a: 1 })])).to.deep.equal(["1", "0"]);
  });
});

/** The function/custom tools of a captured wire request, as the dialects offer them. */
function wireTools(path: string, body: Record<string, any>): ToolSpec[] {
  const tools: any[] = Array.isArray(body.tools) ? body.tools : [];
  if (path === "/v1/messages")
    return tools.filter((t) => t.type === undefined || t.type === "custom").map((t) => ({ name: t.name, parameters: t.input_schema, kind: "function" as const }));
  if (path === "/v1/chat/completions")
    return tools.filter((t) => t.type === "function").map((t) => ({ name: t.function.name, parameters: t.function.parameters, kind: "function" as const }));
  const flat = tools.flatMap((t) => (t.type === "namespace" ? t.tools ?? [] : [t]));
  return flat
    .filter((t) => t.type === "function" || t.type === "custom")
    .map((t) => (t.type === "custom" ? { name: t.name, kind: "custom" as const } : { name: t.name, parameters: t.parameters, kind: "function" as const }));
}

describe("tool grammar: the tools real clients send", () => {
  it("every captured request's tool set converts to a grammar that compiles", () => {
    const captured = capturedRequests((r) => r.body !== null && Array.isArray(r.body.tools) && r.body.tools.length > 0);
    const sets = new Map<string, ToolSpec[]>();
    for (const r of captured) {
      const tools = wireTools(r.path, r.body!);
      if (tools.length > 0) sets.set(JSON.stringify(tools), tools);
    }
    expect(sets.size).to.be.greaterThan(3);
    let schemas = 0;
    for (const tools of sets.values()) {
      schemas += tools.length;
      const g = toolCallGrammar(forcedTools({ tools, tool_choice: { type: "required" } })!);
      // Compiles, and the fixed opening plus any offered name are a valid prefix.
      const out = check(g, tools.map((t) => `<tool_call>\n{"name": ${JSON.stringify(t.name)}, "arguments": `));
      expect(out, tools.map((t) => t.name).join(", ")).to.deep.equal(tools.map(() => "p"));
    }
    expect(schemas).to.be.greaterThan(20);
  });
});

describe("tool grammar: tool_choice auto (lazy call grammar)", () => {
  const weather: ToolSpec = {
    name: "get_weather",
    kind: "function",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 30 } }, required: ["city"], additionalProperties: false },
  };
  const shell: ToolSpec = { name: "shell", kind: "custom" };
  const obj = '{"name": "get_weather", "arguments": {"city": "Paris"}}';

  it("autoTools: the offered tools under auto only", () => {
    expect(autoTools({ tools: [weather, weather, shell], tool_choice: { type: "auto" } })!.map((t) => t.name)).to.deep.equal(["get_weather", "shell"]);
    expect(autoTools({ tools: [weather], tool_choice: { type: "required" } })).to.equal(null);
    expect(autoTools({ tools: [], tool_choice: { type: "auto" } })).to.equal(null);
  });

  it("hermes: every form from its opening on, declared tools only, valid arguments, one call when asked", () => {
    const g = lazyToolCallGrammar([weather, shell], "hermes");
    const good = [
      `<tool_call>\n${obj}\n</tool_call>`,
      `<tool_call>${obj}</tool_call>\n<tool_call>\n{"name": "shell", "arguments": {"input": "ls"}}\n</tool_call>\n`,
      obj,
      `{ "name" :\n "get_weather", "arguments": {"city": "Paris"}}\n${obj}`,
      `\`\`\`json\n${obj}\n\`\`\``,
      `\`\`\`\n{\n  "name": "get_weather", "arguments": {"city": "Rome"}}\n${obj}\n\`\`\`\n`,
    ];
    const bad = [
      obj.replace("get_weather", "say"),
      obj.replace('"city": "Paris"', '"town": "Paris"'),
      `Sure! ${obj}`, // text before is not the grammar's: it starts at the opening
      `${obj} done`,
      `\`\`\`json\n${obj}`.replace("\n{", "\n\n\n\n\n\n\n\n\n{"), // more whitespace than an opening allows
    ];
    const out = check(g, [...good, ...bad, `\`\`\`json\n${obj}`]);
    expect(out.slice(0, good.length), g).to.deep.equal(good.map(() => "1"));
    expect(out.slice(good.length, good.length + bad.length)).to.deep.equal(bad.map(() => "0"));
    expect(out[out.length - 1]).to.equal("p"); // a fence still open
    // Each opening (as the native scan matches it) is a valid start of the grammar.
    const openings = CALL_OPENINGS.hermes.map((o) => o.pieces.join(o.form === "fence" ? "\n" : ""));
    expect(check(g, openings)).to.deep.equal(openings.map(() => "p"));
    // A model that keeps writing calls is stopped at MAX_AUTO_CALLS, in every form.
    const calls = (n: number, wrap: (o: string) => string) => Array.from({ length: n }, () => wrap(obj)).join("\n");
    const tag = (o: string) => `<tool_call>\n${o}\n</tool_call>`;
    expect(check(g, [calls(MAX_AUTO_CALLS, tag), calls(MAX_AUTO_CALLS + 1, tag), calls(MAX_AUTO_CALLS, (o) => o), calls(MAX_AUTO_CALLS + 1, (o) => o), "```json\n" + calls(MAX_AUTO_CALLS + 1, (o) => o) + "\n```"]))
      .to.deep.equal(["1", "0", "1", "0", "0"]);
    const one = lazyToolCallGrammar([weather], "hermes", { parallel: false });
    expect(check(one, [obj, `${obj}\n${obj}`, `<tool_call>${obj}</tool_call><tool_call>${obj}</tool_call>`])).to.deep.equal(["1", "0", "0"]);
  });

  it("harmony: the recipient, then a declared name and its JSON arguments, compact as gpt-oss writes them", () => {
    const g = lazyToolCallGrammar([weather], "harmony");
    const out = check(g, [
      'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}',
      'to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}',
      'to=functions.say <|constrain|>json<|message|>{"city":"Paris"}',
      "to=functions.get_weather <|constrain|>json<|message|>{}",
    ]);
    expect(out).to.deep.equal(["1", "1", "0", "0"]);
    const custom = lazyToolCallGrammar([shell], "harmony");
    expect(check(custom, ['to=functions.shell <|constrain|>json<|message|>{"input":"ls"}', 'to=functions.shell <|constrain|>json<|message|>{"input": "ls"}'])).to.deep.equal(["1", "0"]);
  });

  it("every captured request's tool set converts to a lazy grammar that compiles", () => {
    const captured = capturedRequests((r) => r.body !== null && Array.isArray(r.body.tools) && r.body.tools.length > 0);
    const sets = new Map<string, ToolSpec[]>();
    for (const r of captured) {
      const tools = wireTools(r.path, r.body!);
      if (tools.length > 0) sets.set(JSON.stringify(tools), tools);
    }
    for (const tools of sets.values()) {
      const auto = autoTools({ tools, tool_choice: { type: "auto" } })!;
      const g = lazyToolCallGrammar(auto, "hermes");
      const out = check(g, auto.map((t) => `{"name": ${JSON.stringify(t.name)}, "arguments": `));
      expect(out, auto.map((t) => t.name).join(", ")).to.deep.equal(auto.map(() => "p"));
    }
  });
});
