// Tool schemas a forced call cannot be built from, over HTTP on every route that takes tools
// (count_tokens included): each gets a 400 in the route's own error shape naming the tool and
// the reason, while the server keeps answering others (the grammar is built off the HTTP thread).
import { expect } from "chai";
import { postJson, startTestServer, type TestServer } from "../helpers/server.js";

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

const CASES: [string, Record<string, unknown>, RegExp][] = [
  ["self", { $ref: "#" }, /refers to itself/],
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
    s = await startTestServer({ ctx: 2048 });
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
