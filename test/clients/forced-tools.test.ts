// Forced tool choice end to end: the official SDKs against a real server on random-weight
// fixture models, with NO scripted sampler. A random model writes arbitrary tokens, so every
// well-formed call here is the grammar's doing (src/chat/tool-grammar.ts + native/engine/
// grammar.h): exactly one call, to an allowed tool, whose arguments parse as a JSON object that
// validates against the tool's schema (Ajv), with the dialect's tool finish reason. Every answer
// and stream event is also validated against openapi.json by the test server.
import { expect } from "chai";
import { existsSync } from "node:fs";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { Ajv2020 } from "ajv/dist/2020.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

const FIXTURE = "test/fixtures/llama-q8_0.gguf"; // SmolLM2 vocabulary (49152) and template
const FIXTURE_BIG_VOCAB = "test/fixtures/qwen3-q8_0.gguf"; // Qwen2 vocabulary (151936)
const DEFAULT_MODEL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const MODEL = "fixture";
// Room for the longest call the schemas below allow, even written one byte per token.
const MAX_TOKENS = 600;

// Bounded strings and arrays keep even a random model's call short; enums, integer ranges,
// nested objects, optional fields, nullable types and arrays of objects exercise the converter.
const WEATHER = {
  type: "object",
  properties: {
    city: { type: "string", minLength: 1, maxLength: 24 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 14 },
    options: {
      type: "object",
      properties: { hourly: { type: "boolean" }, lang: { type: ["string", "null"], maxLength: 8 } },
      required: ["hourly"],
      additionalProperties: false,
    },
    tags: { type: "array", items: { type: "string", maxLength: 10 }, minItems: 1, maxItems: 3 },
  },
  required: ["city", "unit", "options"],
  additionalProperties: false,
};
const SEARCH = {
  type: "object",
  properties: {
    query: { type: "string", maxLength: 40 },
    limit: { type: "integer", minimum: 1, maximum: 50 },
    ratio: { type: "number" },
    filters: {
      type: "array",
      items: {
        type: "object",
        properties: { field: { enum: ["title", "body", "author"] }, value: { type: "string", maxLength: 12 } },
        required: ["field", "value"],
        additionalProperties: false,
      },
      maxItems: 2,
    },
  },
  required: ["query", "limit"],
  additionalProperties: false,
};
const SCHEMAS: Record<string, object> = { get_weather: WEATHER, search: SEARCH };

const ajv = new Ajv2020({ strict: false, allErrors: true });
const validators = Object.fromEntries(Object.entries(SCHEMAS).map(([name, s]) => [name, ajv.compile(s)]));

/** The arguments text parses to an object that the named tool's schema accepts. */
function expectValidCall(name: string, args: string | unknown, allowed: string[]): void {
  expect(allowed).to.include(name);
  const value = typeof args === "string" ? JSON.parse(args) : args;
  expect(value, String(args)).to.be.an("object").and.not.be.an("array");
  const validate = validators[name];
  expect(validate(value), `${name} ${JSON.stringify(value)}: ${ajv.errorsText(validate.errors)}`).to.equal(true);
}

const openaiTools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  { type: "function", function: { name: "get_weather", description: "Weather forecast for a city", parameters: WEATHER } },
  { type: "function", function: { name: "search", description: "Search the documents", parameters: SEARCH } },
];
const anthropicTools: Anthropic.Tool[] = [
  { name: "get_weather", description: "Weather forecast for a city", input_schema: WEATHER as Anthropic.Tool.InputSchema },
  { name: "search", description: "Search the documents", input_schema: SEARCH as Anthropic.Tool.InputSchema },
];
const responsesTools: OpenAI.Responses.Tool[] = [
  { type: "function", name: "get_weather", description: "Weather forecast for a city", parameters: WEATHER, strict: false },
  { type: "function", name: "search", description: "Search the documents", parameters: SEARCH, strict: false },
  { type: "custom", name: "shell", description: "Runs a shell command" },
];
const ALL = ["get_weather", "search"];
const user = "What is the weather in Paris this week? Also look up the news.";

/** Responses with the custom tool "shell" forced by name. */
function forcedShell(openai: OpenAI, input: string, max_output_tokens: number, temperature: number) {
  return openai.responses.create({ model: MODEL, input, tools: responsesTools, tool_choice: { type: "custom", name: "shell" }, max_output_tokens, temperature });
}

/** Chat Completions with tool_choice "required" over openaiTools. */
function requiredCall(openai: OpenAI, over: { temperature: number; seed?: number; content?: string; max_tokens?: number }) {
  return openai.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: over.content ?? user }],
    tools: openaiTools,
    tool_choice: "required",
    max_tokens: over.max_tokens ?? MAX_TOKENS,
    temperature: over.temperature,
    ...(over.seed !== undefined ? { seed: over.seed } : {}),
  });
}

describe("forced tool choice: grammar-constrained calls through the SDKs (fixture model)", function () {
  this.timeout(300_000);
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

  describe("OpenAI chat completions", () => {
    for (const temperature of [0, 1]) {
      it(`tool_choice "required" (temperature ${temperature}): one valid call to an offered tool`, async () => {
        for (const seed of temperature === 0 ? [1] : [1, 2, 3]) {
          const r = await requiredCall(openai, { temperature, seed });
          const choice = r.choices[0];
          expect(choice.finish_reason, JSON.stringify(choice)).to.equal("tool_calls");
          expect(choice.message.content ?? "").to.equal("");
          expect(choice.message.tool_calls).to.have.length(1);
          const call = choice.message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
          expect(call.type).to.equal("function");
          expectValidCall(call.function.name, call.function.arguments, ALL);
        }
      });
    }

    it("a named function, streamed (temperature 1, seeded): the stream assembles one valid call to it", async () => {
      for (const seed of [11, 12]) {
        const stream = await openai.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: user }],
          tools: openaiTools,
          tool_choice: { type: "function", function: { name: "search" } },
          max_tokens: MAX_TOKENS,
          temperature: 1,
          seed,
          stream: true,
        });
        const calls = new Map<number, { name: string; args: string }>();
        let finish: string | null = null;
        let content = "";
        for await (const chunk of stream) {
          for (const ch of chunk.choices) {
            content += ch.delta.content ?? "";
            for (const tc of ch.delta.tool_calls ?? []) {
              const c = calls.get(tc.index) ?? { name: "", args: "" };
              c.name += tc.function?.name ?? "";
              c.args += tc.function?.arguments ?? "";
              calls.set(tc.index, c);
            }
            finish = ch.finish_reason ?? finish;
          }
        }
        expect(finish).to.equal("tool_calls");
        expect(content).to.equal("");
        expect([...calls.keys()]).to.deep.equal([0]);
        expectValidCall(calls.get(0)!.name, calls.get(0)!.args, ["search"]);
      }
    });

    it("a named function, greedy: the same call streamed and not", async () => {
      const body = {
        model: MODEL,
        messages: [{ role: "user" as const, content: user }],
        tools: openaiTools,
        tool_choice: { type: "function" as const, function: { name: "get_weather" } },
        max_tokens: MAX_TOKENS,
        temperature: 0,
      };
      const r = await openai.chat.completions.create(body);
      const call = r.choices[0].message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
      expectValidCall(call.function.name, call.function.arguments, ["get_weather"]);
      const final = await openai.chat.completions.stream(body).finalChatCompletion();
      const streamed = final.choices[0].message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
      expect(streamed.function.name).to.equal("get_weather");
      expect(streamed.function.arguments).to.equal(call.function.arguments);
      expect(final.choices[0].finish_reason).to.equal("tool_calls");
    });

    it("tool_choice auto stays unconstrained (the random model writes text)", async () => {
      const r = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: user }], tools: openaiTools, max_tokens: 24, temperature: 0 });
      expect(r.choices[0].message.tool_calls ?? []).to.have.length(0);
      expect(r.choices[0].finish_reason).to.be.oneOf(["length", "stop"]);
    });
  });

  describe("Anthropic messages", () => {
    it('tool_choice {type: "any"}: one valid tool_use block, stop_reason tool_use', async () => {
      for (const temperature of [0, 1, 1]) {
        const msg = await anthropic.messages.create({
          model: MODEL,
          max_tokens: MAX_TOKENS,
          temperature,
          messages: [{ role: "user", content: user }],
          tools: anthropicTools,
          tool_choice: { type: "any" },
        });
        expect(msg.stop_reason, JSON.stringify(msg.content)).to.equal("tool_use");
        const uses = msg.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
        expect(uses).to.have.length(1);
        expect(msg.content.filter((b) => b.type === "text" && b.text !== "")).to.have.length(0);
        expect(uses[0].id).to.match(/^toolu_/);
        expectValidCall(uses[0].name, uses[0].input, ALL);
      }
    });

    it('tool_choice {type: "tool", name}, streamed: the input_json deltas assemble a valid input', async () => {
      const stream = anthropic.messages.stream({
        model: MODEL,
        max_tokens: MAX_TOKENS,
        temperature: 1,
        messages: [{ role: "user", content: user }],
        tools: anthropicTools,
        tool_choice: { type: "tool", name: "get_weather" },
      });
      let partial = "";
      stream.on("inputJson", (delta) => (partial += delta));
      const msg = await stream.finalMessage();
      expect(msg.stop_reason).to.equal("tool_use");
      const uses = msg.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
      expect(uses).to.have.length(1);
      expect(uses[0].name).to.equal("get_weather");
      expectValidCall(uses[0].name, uses[0].input, ["get_weather"]);
      expect(JSON.parse(partial)).to.deep.equal(uses[0].input);
    });
  });

  describe("OpenAI Responses", () => {
    it("a named function tool: one function_call item with valid arguments", async () => {
      const r = await openai.responses.create({
        model: MODEL,
        input: user,
        tools: responsesTools,
        tool_choice: { type: "function", name: "search" },
        max_output_tokens: MAX_TOKENS,
        temperature: 0,
      });
      expect(r.status).to.equal("completed");
      const calls = r.output.filter((i): i is OpenAI.Responses.ResponseFunctionToolCall => i.type === "function_call");
      expect(calls).to.have.length(1);
      expect(r.output.filter((i) => i.type === "message")).to.have.length(0);
      expectValidCall(calls[0].name, calls[0].arguments, ["search"]);
    });

    it('"required", streamed at temperature 1: the completed response holds one valid call', async () => {
      const stream = openai.responses.stream({
        model: MODEL,
        input: user,
        tools: responsesTools.slice(0, 2),
        tool_choice: "required",
        max_output_tokens: MAX_TOKENS,
        temperature: 1,
      });
      const argDeltas: string[] = [];
      stream.on("response.function_call_arguments.delta", (e) => argDeltas.push(e.delta));
      const r = await stream.finalResponse();
      expect(r.status).to.equal("completed");
      const calls = r.output.filter((i) => i.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall[];
      expect(calls).to.have.length(1);
      expectValidCall(calls[0].name, calls[0].arguments, ALL);
      expect(argDeltas.join("")).to.equal(calls[0].arguments);
    });

    it("a custom tool forced by name: one custom_tool_call with a free string input", async () => {
      // A random model has no reason ever to end a free string, so the budget may end the call:
      // the item must still be the one custom call, with string input.
      for (const temperature of [0, 1]) {
        const r = await forcedShell(openai, "List the files.", 64, temperature);
        if (r.status === "incomplete") expect(r.incomplete_details?.reason).to.equal("max_output_tokens");
        else expect(r.status).to.equal("completed");
        expect(r.output.filter((i) => i.type !== "custom_tool_call"), JSON.stringify(r.output)).to.have.length(0);
        const calls = r.output as OpenAI.Responses.ResponseCustomToolCall[];
        expect(calls).to.have.length(1);
        expect(calls[0].name).to.equal("shell");
        expect(calls[0].input).to.be.a("string");
        // Unseeded sampling may close the free string at once; greedy on this fixture does not.
        if (temperature === 0) expect(calls[0].input).to.not.equal("");
      }
    });
  });
});

describe("forced tool choice on a 151936-token vocabulary (qwen3 fixture)", function () {
  this.timeout(300_000);
  let server: TestServer;
  let openai: OpenAI;

  before(async function () {
    if (!existsSync(FIXTURE_BIG_VOCAB)) this.skip();
    server = await startTestServer({ model_path: FIXTURE_BIG_VOCAB, model_id: MODEL, ctx: 2048, slots: 1 });
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => {
    await server?.close();
  });

  it('"required" at temperature 0 and 1: one valid call', async () => {
    for (const temperature of [0, 1]) {
      const r = await requiredCall(openai, { temperature, seed: 9 });
      expect(r.choices[0].finish_reason).to.equal("tool_calls");
      expect(r.choices[0].message.tool_calls).to.have.length(1);
      const call = r.choices[0].message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
      expectValidCall(call.function.name, call.function.arguments, ALL);
    }
  });
});

describe("forced tool choice on the default model (SmolLM2-135M-Instruct)", function () {
  this.timeout(300_000);
  let server: TestServer;
  let openai: OpenAI;

  before(async function () {
    if (!existsSync(DEFAULT_MODEL)) this.skip(); // mashbox pull smollm2-135m
    server = await startTestServer({ model_path: DEFAULT_MODEL, model_id: MODEL, ctx: 2048, slots: 1 });
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => {
    await server?.close();
  });

  it("a forced custom tool call completes: a trained model closes its free string input", async () => {
    const r = await forcedShell(openai, "List the files in the current directory.", 200, 0);
    expect(r.status).to.equal("completed");
    const calls = r.output as OpenAI.Responses.ResponseCustomToolCall[];
    expect(calls.map((c) => c.type)).to.deep.equal(["custom_tool_call"]);
    expect(calls[0].name).to.equal("shell");
    expect(calls[0].input).to.be.a("string").and.not.equal("");
  });

  it('"required" with schemas: a valid call, well within the budget', async () => {
    const r = await requiredCall(openai, { temperature: 0, content: "What is the weather in Paris for the next 3 days, in celsius?", max_tokens: 200 });
    expect(r.choices[0].finish_reason).to.equal("tool_calls");
    const call = r.choices[0].message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expectValidCall(call.function.name, call.function.arguments, ALL);
    expect(r.usage!.completion_tokens).to.be.below(200);
  });
});
