// Request shapes the handlers do not take, on every route that reads them (streamed too, and
// count_tokens): each is a 400 in the route's own error shape naming the field, refused by the
// contract (openapi.json) before a handler runs, never a 500 with a stack trace in the log.
// Tool names are required strings on every API; media parts and item_reference get the spec's
// reason; what an error repeats of the client's input is bounded.
import { expect } from "chai";
import { MAX_STOP_LENGTH, MAX_STOP_STRINGS } from "../../src/engine/stop.js";
import { postJson, scriptHeader, startTestServer, type TestServer } from "../helpers/server.js";

const R = "/v1/responses";
const M = "/v1/messages";
const COUNT = "/v1/messages/count_tokens";
const CHAT = "/v1/chat/completions";

const responses = (extra: Record<string, unknown>) => ({ input: "hi", max_output_tokens: 2, ...extra });
/** A function call answered by an output item of `type` carrying `output`. */
const output = (value: unknown, type = "function_call_output") =>
  responses({ input: [{ type: "function_call", call_id: "c1", name: "f", arguments: "{}" }, { type, call_id: "c1", output: value }] });
const reasoning = (summary: unknown) => responses({ input: [{ type: "reasoning", id: "rs_1", summary }, { role: "user", content: "hi" }] });
/** A tool_use answered by a tool_result whose content is `content`. */
const toolResult = (content: unknown) => ({
  max_tokens: 2,
  messages: [
    { role: "user", content: "go" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "f", input: {} }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content }] },
  ],
});
const anthropic = (extra: Record<string, unknown>) => ({ max_tokens: 2, messages: [{ role: "user", content: "hi" }], ...extra });
const chat = (extra: Record<string, unknown>) => ({ max_tokens: 2, messages: [{ role: "user", content: "hi" }], ...extra });

/** [what, route, body, the field the 400 names, the message's rest]. */
type Case = [string, string, Record<string, unknown>, string, RegExp?];

// Item 3 of the probes: shapes that reached a handler and crashed it.
const CRASHES: Case[] = [
  ["a namespace tool whose tools is a string", R, responses({ tools: [{ type: "namespace", name: "ns", tools: "x" }] }), "tools[0].tools", /must be array/],
  ["a namespace tool whose tools holds null", R, responses({ tools: [{ type: "namespace", name: "ns", tools: [null] }] }), "tools[0].tools[0]", /must be object/],
  ["function_call_output.output a number", R, output(5), "input[1].output", /must be string or array/],
  ["function_call_output.output an object", R, output({}), "input[1].output", /must be string or array/],
  ["function_call_output.output [null]", R, output([null]), "input[1].output[0]", /must be object/],
  ["custom_tool_call_output.output a number", R, output(5, "custom_tool_call_output"), "input[1].output"],
  ["custom_tool_call_output.output an object", R, output({ a: 1 }, "custom_tool_call_output"), "input[1].output"],
  ["local_shell_call_output.output [null]", R, output([null], "local_shell_call_output"), "input[1].output[0]"],
  ["local_shell_call_output.output a boolean", R, output(true, "local_shell_call_output"), "input[1].output"],
  ["reasoning.summary a number", R, reasoning(5), "input[0].summary", /must be array or null/],
  ["reasoning.summary [null]", R, reasoning([null]), "input[0].summary[0]", /must be object/],
  ["tool_result.content a number", M, toolResult(5), "messages[2].content[0].content", /must be string or array/],
  ["tool_result.content an object", M, toolResult({ text: "x" }), "messages[2].content[0].content", /must be string or array/],
  ["tool_result.content [null]", M, toolResult([null]), "messages[2].content[0].content[0]", /must be object/],
];

// Item 4: tools that were accepted without a usable name.
const NAMELESS_TOOLS: Case[] = [
  ["an Anthropic tool without a name", M, anthropic({ tools: [{ input_schema: { type: "object" } }] }), "tools[0].name", /is required/],
  ["an Anthropic tool named 5", M, anthropic({ tools: [{ name: 5, input_schema: { type: "object" } }] }), "tools[0].name", /must be string/],
  ["a Responses function tool named 7", R, responses({ tools: [{ type: "function", name: 7 }] }), "tools[0].name", /must be string/],
  ["a Responses custom tool without a name", R, responses({ tools: [{ type: "custom" }] }), "tools[0].name", /is required/],
  ["a tool in a namespace named null", R, responses({ tools: [{ type: "namespace", name: "ns", tools: [{ type: "function", name: null }] }] }), "tools[0].tools[0].name", /must be string/],
  ["a Chat function tool named 7", CHAT, chat({ tools: [{ type: "function", function: { name: 7 } }] }), "tools[0].function.name", /must be string/],
  ["a Chat function tool without a name", CHAT, chat({ tools: [{ type: "function", function: {} }] }), "tools[0].function.name", /is required/],
  ["an Anthropic forced tool choice without a name", M, anthropic({ tools: [{ name: "f" }], tool_choice: { type: "tool" } }), "tool_choice.name", /is required/],
];

// Item 6: the spec's own reason, not the first branch of a union.
const MEDIA = /is not supported: image, audio and file parts are refused \(text-only model\)/;
const ANTHROPIC_MEDIA = /is not supported: image and document blocks are refused \(text-only model\)/;
const CLEAR: Case[] = [
  ["a Chat image_url part", CHAT, chat({ messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "image_url", image_url: { url: "data:" } }] }] }), "messages[0].content[1].type", MEDIA],
  ["a Chat input_audio part", CHAT, chat({ messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "", format: "wav" } }] }] }), "messages[0].content[0].type", MEDIA],
  ["a Chat file part", CHAT, chat({ messages: [{ role: "user", content: [{ type: "file", file: { file_id: "f" } }] }] }), "messages[0].content[0].type", MEDIA],
  ["a Responses input_image part", R, responses({ input: [{ role: "user", content: [{ type: "input_image", image_url: "data:" }] }] }), "input[0].content[0].type", MEDIA],
  ["a Responses input_file in a tool output", R, output([{ type: "input_file", file_id: "f" }]), "input[1].output[0].type", MEDIA],
  ["a Responses item_reference", R, responses({ input: [{ type: "item_reference", id: "msg_1" }] }), "input[0].type", /is not supported: item_reference \(this server stores no responses/],
  ["an Anthropic image block in system", M, anthropic({ system: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "" } }] }), "system[0].type", ANTHROPIC_MEDIA],
  ["an Anthropic image block in a message", M, anthropic({ messages: [{ role: "user", content: [{ type: "image", source: {} }] }] }), "messages[0].content[0].type", ANTHROPIC_MEDIA],
  ["an Anthropic document in a tool_result", M, toolResult([{ type: "document", source: {} }]), "messages[2].content[0].content[0].type", ANTHROPIC_MEDIA],
  ["a Chat part of an unknown type", CHAT, chat({ messages: [{ role: "user", content: [{ type: "video" }] }] }), "messages[0].content[0].type", /must be one of "text", "input_text"/],
];

/** The same body on count_tokens (Messages only; its request has no max_tokens or stream). */
function countBody(body: Record<string, unknown>): Record<string, unknown> {
  const { max_tokens: _m, ...rest } = body;
  return rest;
}

describe("request shapes the handlers do not take: 400 naming the field, on every route", function () {
  this.timeout(120000);
  let s: TestServer;
  before(async () => {
    s = await startTestServer();
  });
  after(async () => {
    await s?.close();
  });

  /** Posts `body` and checks the 400: the route's shape, the field named first in the message. */
  async function expect400(path: string, body: Record<string, unknown>, field: string, rest?: RegExp): Promise<string> {
    const before = s.logs.filter((l) => l.startsWith("internal error")).length;
    const r = await postJson(s.url + path, body);
    const text = await r.text();
    const where = `${path} ${JSON.stringify(body).slice(0, 200)}`;
    expect(r.status, `${where}: ${text.slice(0, 300)}`).to.equal(400);
    const json = JSON.parse(text);
    let message: string;
    if (path.startsWith("/v1/messages")) {
      expect(json.type, where).to.equal("error");
      expect(json.error.type, where).to.equal("invalid_request_error");
      message = json.error.message;
    } else {
      expect(json.error.type, where).to.equal("invalid_request_error");
      expect(json.error.param, where).to.equal(field);
      message = json.error.message;
    }
    expect(message.startsWith(`${field}:`) || message.startsWith(`${field} `), `${where}: ${message}`).to.equal(true);
    if (rest) expect(message, where).to.match(rest);
    expect(s.logs.filter((l) => l.startsWith("internal error")).length, `${where}: logged an internal error`).to.equal(before);
    return message;
  }

  async function each(cases: Case[]): Promise<void> {
    for (const [what, path, body, field, rest] of cases) {
      try {
        await expect400(path, body, field, rest);
        if (path !== CHAT && path !== R && path !== M) continue;
        await expect400(path, { ...body, stream: true }, field, rest);
        if (path === M) await expect400(COUNT, countBody(body), field, rest);
      } catch (e) {
        (e as Error).message = `${what}: ${(e as Error).message}`;
        throw e;
      }
    }
  }

  it("shapes that crashed a handler (tool outputs, reasoning summaries, tool_result content, namespace tools)", async () => {
    await each(CRASHES);
  });

  it("a tool name is required and a string on every API (Chat, Responses, Messages, count_tokens)", async () => {
    await each(NAMELESS_TOOLS);
  });

  it("media parts and item_reference get the spec's reason, wherever they sit", async () => {
    await each(CLEAR);
  });

  it("the shapes the spec documents are still taken: text parts in tool outputs, summaries and tool_result content", async () => {
    const ok = [
      [R, output([{ type: "input_text", text: "42" }])],
      [R, output("42", "custom_tool_call_output")],
      [R, reasoning([{ type: "summary_text", text: "thinking" }])],
      [R, reasoning(null)],
      [R, responses({ tools: [{ type: "namespace", name: "ns", tools: [{ type: "function", name: "f", parameters: { type: "object" } }] }, { type: "web_search" }] })],
      [M, toolResult([{ type: "text", text: "42" }])],
      [M, toolResult("42")],
      [M, anthropic({ system: [{ type: "text", text: "Be brief." }], tools: [{ name: "f", input_schema: { type: "object" } }, { type: "web_search_20250305", name: "web_search" }] })],
      [COUNT, countBody(toolResult([{ type: "text", text: "42" }]))],
      [CHAT, chat({ tools: [{ type: "function", function: { name: "f", description: null, parameters: null } }] })],
    ] as const;
    for (const [path, body] of ok) {
      const r = await postJson(s.url + path, body);
      expect(r.status, `${path} ${JSON.stringify(body)}: ${await r.clone().text()}`).to.equal(200);
      await r.arrayBuffer();
    }
  });

  it("an unknown tool_choice name is quoted bounded: a 1 MB name gives a short error", async () => {
    const name = "x".repeat(1 << 20);
    const cases: [string, Record<string, unknown>, string][] = [
      [CHAT, chat({ tools: [{ type: "function", function: { name: "f" } }], tool_choice: { type: "function", function: { name } } }), "tool_choice.function.name"],
      [R, responses({ tools: [{ type: "function", name: "f" }], tool_choice: { type: "function", name } }), "tool_choice.name"],
      [M, anthropic({ tools: [{ name: "f" }], tool_choice: { type: "tool", name } }), "tool_choice.name"],
      [COUNT, countBody(anthropic({ tools: [{ name: "f" }], tool_choice: { type: "tool", name } })), "tool_choice.name"],
    ];
    for (const [path, body, field] of cases) {
      const message = await expect400(path, body, field, /no tool named "x{64}"… \(1048576 characters\) in tools/);
      expect(message.length, path).to.be.below(200);
    }
  });

  it(`stop strings: at most ${MAX_STOP_STRINGS}, each at most ${MAX_STOP_LENGTH} characters, on every generating route; beyond, 400 naming the field`, async () => {
    const many = Array.from({ length: MAX_STOP_STRINGS + 1 }, (_, i) => `stop${i}`);
    const long = "s".repeat(MAX_STOP_LENGTH + 1);
    const routes: [string, Record<string, unknown>][] = [
      [CHAT, chat({})],
      ["/v1/completions", { prompt: "Once", max_tokens: 2 }],
      [R, responses({})],
      [M, anthropic({})],
    ];
    for (const [path, body] of routes) {
      await expect400(path, { ...body, stop: many }, "stop", /must NOT have more than 64 items/);
      await expect400(path, { ...body, stop_sequences: many }, "stop_sequences", /must NOT have more than 64 items/);
      await expect400(path, { ...body, stop: long }, "stop", /must NOT have more than 1024 characters/);
      await expect400(path, { ...body, stop: ["a", long] }, "stop[1]", /must NOT have more than 1024 characters/);
      const r = await postJson(s.url + path, { ...body, stop: many.slice(0, MAX_STOP_STRINGS).map((x, i) => (i === 0 ? "s".repeat(MAX_STOP_LENGTH) : x)) });
      expect(r.status, path).to.equal(200);
      await r.arrayBuffer();
    }
  });

  it("a scripted answer ends before the earliest stop string, with the most stop strings given", async () => {
    const stops = Array.from({ length: MAX_STOP_STRINGS }, (_, i) => `<end${i}>`);
    const r = await postJson(`${s.url}${CHAT}`, { messages: [{ role: "user", content: "hi" }], stop: stops }, scriptHeader("one two<end7>three<end3>"));
    const body = await r.json();
    expect(body.choices[0].message.content).to.equal("one two");
    expect(body.choices[0].finish_reason).to.equal("stop");
  });

  it("a forced tool whose schema has a 1 MB name is refused with a bounded message", async () => {
    const name = "t".repeat(1 << 20);
    const r = await postJson(`${s.url}${CHAT}`, chat({ tools: [{ type: "function", function: { name, parameters: { $ref: "#" } } }], tool_choice: "required" }));
    expect(r.status).to.equal(400);
    const message: string = (await r.json()).error.message;
    expect(message).to.match(/tool 't{64}… \(1048576 characters\)'/);
    expect(message.length).to.be.below(400);
  });
});
