// tool_choice auto through the SDKs: the model may write text, but once its output opens a call
// (src/chat/tool-forms.ts) the rest is decoded under the call grammar and comes back as the
// route's tool call. The model's output is scripted (test/helpers/script.ts) on a random-weight
// fixture: a script that is a valid call in the grammar's layout comes out exactly; where the
// script leaves the grammar (a tool nobody declared, a layout the grammar does not write) the
// random model goes on under the call grammar alone, so what comes out is a call to a declared
// tool whose arguments validate (Ajv) — the grammar's doing, not the script's.
import { expect } from "chai";
import { existsSync } from "node:fs";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { Ajv2020 } from "ajv/dist/2020.js";
import { startTestServer, scriptHeader, type TestServer } from "../helpers/server.js";

const FIXTURE = "test/fixtures/llama-q8_0.gguf"; // SmolLM2 vocabulary and template (Hermes convention)
const MODEL = "fixture";
const MAX_TOKENS = 300;

// Bounded strings keep a random model's arguments short.
const WEATHER = {
  type: "object",
  properties: { city: { type: "string", minLength: 1, maxLength: 12 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const SEARCH = {
  type: "object",
  properties: { query: { type: "string", maxLength: 16 }, limit: { type: "integer", minimum: 1, maximum: 9 } },
  required: ["query"],
  additionalProperties: false,
};
const SCHEMAS: Record<string, object> = { get_weather: WEATHER, search: SEARCH };
const DECLARED = Object.keys(SCHEMAS);
const ajv = new Ajv2020({ strict: false, allErrors: true });
const validators = Object.fromEntries(Object.entries(SCHEMAS).map(([name, s]) => [name, ajv.compile(s)]));

const ARGS = '{"city": "Paris", "unit": "celsius"}';
const CALL = `{"name": "get_weather", "arguments": ${ARGS}}`;

/** Scripted answers: [what the model writes, the text before the call, exact arguments or null (steered)]. */
const FORMS: [string, string, string, string | null][] = [
  ["<tool_call> block", `Let me check.\n<tool_call>\n${CALL}\n</tool_call>`, "Let me check.", ARGS],
  ["bare object", `\n${CALL}`, "", ARGS],
  ["```json fence", `Here is the call:\n\`\`\`json\n${CALL}\n\`\`\``, "Here is the call:", ARGS],
  // What Qwen2.5-Coder-0.5B writes: pretty-printed in a fence. The grammar's layout takes over
  // after the name, so the arguments are the random model's, valid for the schema.
  ["pretty-printed fence", '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris",\n    "unit": "celsius"\n  }\n}\n```', "", null],
  // What the 0.5B wrote for Claude Code: a tool that was never declared, steered to one that was.
  ["undeclared tool", '{"name": "say", "arguments": {"message": "hi"}}', "", null],
];

interface Answer {
  text: string;
  calls: { name: string; args: string }[];
  finish: string | null;
}

function expectCalls(a: Answer, before: string, args: string | null, where: string): void {
  expect(a.calls, `${where}: ${JSON.stringify(a)}`).to.have.length.greaterThan(0);
  // Chat Completions has no one-call switch here, and a random model rarely ends a turn: it
  // writes call after call until max_tokens cuts the last one short (finish_reason "length"),
  // before its name (given back as text) or after it (a call with the arguments so far).
  const cut = a.finish === "length";
  if (cut) expect(a.text.trim(), where).to.match(new RegExp(`^${before.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\s*(\\{[^}]*)?$`));
  else expect(a.text.trim(), where).to.equal(before);
  const whole = cut && !/\S/.test(a.text) ? a.calls.slice(0, -1) : a.calls;
  expect(whole, `${where}: ${JSON.stringify(a)}`).to.have.length.greaterThan(0);
  for (const c of whole) {
    expect(DECLARED, where).to.include(c.name);
    const v = JSON.parse(c.args);
    const validate = validators[c.name];
    expect(validate(v), `${where}: ${c.name} ${c.args}: ${ajv.errorsText(validate.errors)}`).to.equal(true);
  }
  if (args !== null) {
    expect(a.calls.map((c) => [c.name, c.args]), where).to.deep.equal([["get_weather", args]]);
  } else {
    expect(a.calls[0].name, where).to.not.equal("say");
  }
}

const user = "What is the weather in Paris?";
const openaiTools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  { type: "function", function: { name: "get_weather", description: "Weather in a city", parameters: WEATHER } },
  { type: "function", function: { name: "search", description: "Search the documents", parameters: SEARCH } },
];
const responsesTools: OpenAI.Responses.Tool[] = [
  { type: "function", name: "get_weather", description: "Weather in a city", parameters: WEATHER, strict: false },
  { type: "function", name: "search", description: "Search the documents", parameters: SEARCH, strict: false },
];
const anthropicTools: Anthropic.Tool[] = [
  { name: "get_weather", description: "Weather in a city", input_schema: WEATHER as Anthropic.Tool.InputSchema },
  { name: "search", description: "Search the documents", input_schema: SEARCH as Anthropic.Tool.InputSchema },
];

describe("tool_choice auto: calls that are always valid, in every form, on every API (scripted output)", function () {
  this.timeout(600_000);
  let server: TestServer;
  let openai: OpenAI;
  let anthropic: Anthropic;

  before(async function () {
    if (!existsSync(FIXTURE)) this.skip(); // npm run fixtures
    server = await startTestServer({ model_path: FIXTURE, model_id: MODEL, ctx: 2048, slots: 2 });
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: server.url, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => {
    await server?.close();
  });

  async function chat(script: string, stream: boolean): Promise<Answer> {
    const body = { model: MODEL, messages: [{ role: "user" as const, content: user }], tools: openaiTools, max_tokens: MAX_TOKENS, temperature: 0 };
    const opts = { headers: scriptHeader(script) };
    const r = stream ? await openai.chat.completions.stream(body, opts).finalChatCompletion() : await openai.chat.completions.create(body, opts);
    const m = r.choices[0].message;
    const calls = (m.tool_calls ?? []).map((c) => {
      const f = c as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
      return { name: f.function.name, args: f.function.arguments };
    });
    return { text: m.content ?? "", calls, finish: r.choices[0].finish_reason };
  }

  async function responses(script: string, stream: boolean): Promise<Answer> {
    const body = { model: MODEL, input: user, tools: responsesTools, max_output_tokens: MAX_TOKENS, temperature: 0, parallel_tool_calls: false };
    const opts = { headers: scriptHeader(script) };
    const r = stream ? await openai.responses.stream(body, opts).finalResponse() : await openai.responses.create(body, opts);
    const calls = (r.output.filter((i) => i.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall[]).map((c) => ({ name: c.name, args: c.arguments }));
    const text = (r.output.filter((i) => i.type === "message") as OpenAI.Responses.ResponseOutputMessage[]).flatMap((m) => m.content.map((c) => (c.type === "output_text" ? c.text : ""))).join("");
    return { text, calls, finish: r.status ?? null };
  }

  async function messages(script: string, stream: boolean): Promise<Answer> {
    const body = { model: MODEL, max_tokens: MAX_TOKENS, temperature: 0, messages: [{ role: "user" as const, content: user }], tools: anthropicTools, tool_choice: { type: "auto" as const, disable_parallel_tool_use: true } };
    const opts = { headers: scriptHeader(script) };
    const msg = stream ? await anthropic.messages.stream(body, opts).finalMessage() : await anthropic.messages.create(body, opts);
    const text = msg.content.filter((b): b is Anthropic.TextBlock => b.type === "text").map((b) => b.text).join("");
    const calls = msg.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use").map((b) => ({ name: b.name, args: JSON.stringify(b.input) }));
    return { text, calls, finish: msg.stop_reason };
  }

  const apis: [string, (script: string, stream: boolean) => Promise<Answer>, string][] = [
    ["chat completions", chat, "tool_calls|length"],
    ["responses", responses, "completed"],
    ["messages", messages, "tool_use"],
  ];

  for (const [form, script, before, args] of FORMS) {
    it(`${form}: a call to a declared tool with valid arguments, streamed and not, on every API`, async () => {
      for (const [api, ask, finish] of apis) {
        for (const stream of [false, true]) {
          const where = `${api}${stream ? " (stream)" : ""}`;
          const a = await ask(script, stream);
          // Anthropic re-serializes the input object: compare it as JSON.
          const exact = args === null ? null : api === "messages" ? JSON.stringify(JSON.parse(args)) : args;
          expectCalls(a, before, exact, where);
          expect(finish.split("|"), where).to.include(a.finish);
          // One call where the request asked for one (Responses parallel_tool_calls false,
          // Anthropic disable_parallel_tool_use), and one scripted call otherwise.
          if (api !== "chat completions" || args !== null) expect(a.calls, where).to.have.length(1);
        }
      }
    });
  }

  it("text that opens no call stays text, unconstrained (a JSON object later in the answer too)", async () => {
    const script = 'The weather is fine. As JSON: {"name": "Paris", "sky": "clear"}';
    for (const [api, ask] of apis) {
      for (const stream of [false, true]) {
        const a = await ask(script, stream);
        expect(a.calls, api).to.have.length(0);
        expect(a.text, api).to.equal(script);
      }
    }
  });

  it("tool_choice none: a call the model writes anyway stays text", async () => {
    const r = await openai.chat.completions.create(
      { model: MODEL, messages: [{ role: "user", content: user }], tools: openaiTools, tool_choice: "none", max_tokens: MAX_TOKENS, temperature: 0 },
      { headers: scriptHeader(CALL) },
    );
    expect(r.choices[0].message.tool_calls ?? []).to.have.length(0);
    expect(r.choices[0].message.content).to.equal(CALL);
  });
});
