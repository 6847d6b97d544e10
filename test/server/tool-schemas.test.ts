// Tool schemas a forced call cannot be built from, over HTTP on every route that takes tools
// (count_tokens included): each gets a 400 in the route's own error shape naming the tool and
// the reason, while the server keeps answering others (the grammar is built off the HTTP thread).
import { expect } from "chai";
import { postJson, startTestServer, type TestServer } from "../helpers/server.js";
import { parseSse } from "../clients/fake-app.js";

// $defs whose allOf/anyOf expansion doubles at every level: a few hundred bytes of JSON, 2^24
// schema nodes if expanded.
function explodingSchema(levels: number): Record<string, unknown> {
  const $defs: Record<string, unknown> = { [`d${levels}`]: { type: "object", properties: { x: { type: "string" } } } };
  for (let i = levels - 1; i >= 0; i--) $defs[`d${i}`] = { anyOf: [{ allOf: [{ $ref: `#/$defs/d${i + 1}` }] }, { allOf: [{ $ref: `#/$defs/d${i + 1}` }, { required: [] }] }] };
  return { $defs, $ref: "#/$defs/d0" };
}
function deepSchema(levels: number): Record<string, unknown> {
  let s: Record<string, unknown> = { type: "string" };
  for (let i = 0; i < levels; i++) s = { type: "object", properties: { a: s } };
  return s;
}

/**
 * Arrays of two kinds that begin alike (both "[" item ...), 13 levels deep: each "[" a forced
 * call writes doubles the parse stacks the grammar engine keeps alive, past its 4096 at the 12th
 * (so the error says "after the arguments {"a": [[[[[[[[[[[", eleven of them).
 * `before` required numbers come first; each adds some 40 states to the grammar, so 50 put the
 * dead end past the up-front trial's 2048 states, and only a generation meets it.
 */
function ambiguousSchema(before = 0): Record<string, unknown> {
  const levels = 13;
  const $defs: Record<string, unknown> = { [`d${levels}`]: { type: "integer", minimum: 0, maximum: 9 } };
  for (let i = levels - 1; i >= 0; i--) {
    const items = { $ref: `#/$defs/d${i + 1}` };
    $defs[`d${i}`] = { anyOf: [{ type: "array", items, minItems: 1 }, { type: "array", items, minItems: 1, maxItems: 3 }] };
  }
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < before; i++) properties[`n${i}`] = { type: "number" };
  properties.a = { $ref: "#/$defs/d0" };
  return { $defs, type: "object", properties, required: Object.keys(properties) };
}

const CASES: [string, Record<string, unknown>, RegExp][] = [
  ["self", { $ref: "#" }, /refers to itself/],
  // a.b -> b.a, both required: every prefix is valid JSON-so-far, none ever closes.
  [
    "mutual",
    {
      type: "object",
      properties: { a: { $ref: "#/$defs/A" } },
      required: ["a"],
      $defs: { A: { type: "object", properties: { b: { $ref: "#/$defs/B" } }, required: ["b"] }, B: { type: "object", properties: { a: { $ref: "#/$defs/A" } }, required: ["a"] } },
    },
    /can never end/,
  ],
  ["ambiguous", ambiguousSchema(), /grammar engine cannot follow it: too ambiguous .* after the arguments "\{\\"a\\": \[{11}"/],
  ["exploding", explodingSchema(24), /too complex/],
  ["deep", deepSchema(1000), /nested/],
];

/** A schema nested `levels` deep as JSON text (JSON.stringify itself would run out of stack). */
function deepSchemaText(levels: number): string {
  return '{"type": "object", "properties": {"a": '.repeat(levels) + '{"type": "string"}' + "}}".repeat(levels);
}

describe("tool schemas a forced call cannot use, on every route", function () {
  this.timeout(120000);
  let s: TestServer;
  before(async () => {
    s = await startTestServer({ ctx: 4096 });
  });
  after(async () => {
    await s?.close();
  });

  const routes = (name: string, schema: Record<string, unknown>): [string, Record<string, unknown>][] => [
    ["/v1/chat/completions", { messages: [{ role: "user", content: "go" }], max_tokens: 4, tools: [{ type: "function", function: { name, parameters: schema } }], tool_choice: "required" }],
    ["/v1/responses", { input: "go", max_output_tokens: 4, tools: [{ type: "function", name, parameters: schema }], tool_choice: "required" }],
    ["/v1/messages", { max_tokens: 4, messages: [{ role: "user", content: "go" }], tools: [{ name, input_schema: schema }], tool_choice: { type: "any" } }],
    ["/v1/messages/count_tokens", { messages: [{ role: "user", content: "go" }], tools: [{ name, input_schema: schema }], tool_choice: { type: "any" } }],
  ];

  for (const [name, schema, reason] of CASES) {
    it(`${name}: 400 naming the tool, streamed or not`, async () => {
      for (const [path, body] of routes(name, schema)) {
        for (const stream of path.endsWith("count_tokens") ? [false] : [false, true]) {
          const r = await postJson(s.url + path, stream ? { ...body, stream } : body);
          const where = `${path}${stream ? " (stream)" : ""}`;
          expect(r.status, where).to.equal(400);
          const err = (await r.json()).error;
          expect(err.type, where).to.equal(path.startsWith("/v1/messages") ? "invalid_request_error" : "invalid_request_error");
          expect(err.message, where).to.include(`'${name}'`).and.match(reason);
        }
      }
    });
  }

  // tool_choice auto decodes a call under the same argument grammars once the output opens one.
  const autoRoutes = (name: string, schema: Record<string, unknown>) =>
    routes(name, schema).map(([path, body]): [string, Record<string, unknown>] => [path, { ...body, tool_choice: path.startsWith("/v1/messages") ? { type: "auto" } : "auto" }]);

  for (const [name, schema, reason] of CASES) {
    it(`${name}, tool_choice auto: 400 naming the tool, streamed or not`, async () => {
      for (const [path, body] of autoRoutes(name, schema)) {
        for (const stream of path.endsWith("count_tokens") ? [false] : [false, true]) {
          const r = await postJson(s.url + path, stream ? { ...body, stream } : body);
          const where = `${path}${stream ? " (stream)" : ""}`;
          expect(r.status, where).to.equal(400);
          const err = (await r.json()).error;
          expect(err.type, where).to.equal("invalid_request_error");
          expect(err.message, where).to.include(`'${name}'`).and.include("cannot constrain a tool call").and.match(reason);
        }
      }
    });
  }

  it("a dead end past the up-front trial: 400 naming the tool while nothing was sent, else the route's error event", async () => {
    const schema = ambiguousSchema(50);
    const reason = /'deep_ambiguous'.*too ambiguous .*after the arguments ".*\\"a\\": \[{11}"/;
    // The trial does not reach it: count_tokens (which builds the grammar) accepts the tool.
    const count = await postJson(`${s.url}/v1/messages/count_tokens`, routes("deep_ambiguous", schema)[3][1]);
    expect(count.status).to.equal(200);
    for (const [path, body] of routes("deep_ambiguous", schema).slice(0, 3)) {
      const gen = { ...body, max_tokens: undefined, max_output_tokens: undefined, [path === "/v1/responses" ? "max_output_tokens" : "max_tokens"]: 1500, temperature: 0 };
      const whole = await postJson(s.url + path, gen);
      expect(whole.status, path).to.equal(400);
      const body400 = await whole.json();
      const err = path === "/v1/messages" ? (expect(body400.type).to.equal("error"), body400.error) : body400.error;
      expect(err.type, path).to.equal("invalid_request_error");
      expect(err.message, path).to.match(reason, err.message);

      const streamed = await postJson(s.url + path, { ...gen, stream: true });
      expect(streamed.status, `${path} (stream)`).to.equal(200);
      const events = parseSse(await streamed.text());
      const last = events.at(-1)!;
      if (path === "/v1/chat/completions") {
        expect(last.data).to.equal("[DONE]");
        const e = events.at(-2)!.data.error;
        expect(e.type).to.equal("invalid_request_error");
        expect(e.message).to.match(reason);
      } else if (path === "/v1/responses") {
        expect(last.event).to.equal("response.failed");
        expect(last.data.response.error.code).to.equal("invalid_request");
        expect(last.data.response.error.message).to.match(reason);
        expect(events.at(-2)!.event).to.equal("error");
      } else {
        expect(last.event).to.equal("error");
        expect(last.data.error.type).to.equal("invalid_request_error");
        expect(last.data.error.message).to.match(reason);
      }
    }
    // Refusals, not failures of the server; the engine goes on generating.
    const ok = await postJson(`${s.url}/v1/completions`, { prompt: "x", max_tokens: 2 });
    expect(ok.status).to.equal(200);
  });

  it("10,000 levels deep: 400 on count_tokens and messages, forced or not", async () => {
    for (const [path, choice] of [["/v1/messages/count_tokens", "any"], ["/v1/messages/count_tokens", "auto"], ["/v1/messages", "any"]] as const) {
      const body = `{"max_tokens": 4, "messages": [{"role": "user", "content": "go"}], "tool_choice": {"type": "${choice}"}, "tools": [{"name": "abyss", "input_schema": ${deepSchemaText(10000)}}]}`;
      const r = await fetch(s.url + path, { method: "POST", headers: { "content-type": "application/json" }, body });
      expect(r.status, `${path} ${choice}`).to.equal(400);
      expect((await r.json()).type, `${path} ${choice}`).to.equal("error");
    }
  });

  it("answers Health while a schema's grammar is being worked on", async () => {
    const order: string[] = [];
    const [path, body] = routes("exploding", explodingSchema(24))[0];
    const heavy = postJson(s.url + path, body).then(async (r) => {
      order.push(`tool ${r.status}`);
      await r.body?.cancel();
    });
    const health = fetch(`${s.url}/v1/health`).then(async (r) => {
      order.push(`health ${r.status}`);
      await r.body?.cancel();
    });
    await Promise.all([heavy, health]);
    expect(order).to.deep.equal(["health 200", "tool 400"]);
    // The engine still generates.
    const ok = await postJson(`${s.url}/v1/completions`, { prompt: "x", max_tokens: 2 });
    expect(ok.status).to.equal(200);
  });
});
