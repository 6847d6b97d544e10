// The real default-to-be model (Qwen2.5-Coder-0.5B-Instruct) on the captured Claude Code, Codex
// and Pi tool requests, asked for something that needs a tool, tool_choice auto, greedy. Left to
// itself this model writes the call as text (a ```json fence, pretty-printed, schema keywords
// pasted in as arguments); under the lazy call grammar each answer must be a parsed call of a
// declared tool whose arguments validate (Ajv) against the schema the request declared.
//
// The captured prompts are long (Claude Code's is ~18.7k tokens); they are trimmed to keep the
// test near a minute on one thread: the system text cut, the tools cut to the shell and file
// ones with shortened descriptions. What stays is each client's own request shape and schemas.
import { expect } from "chai";
import { existsSync } from "node:fs";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { Ajv2020 } from "ajv/dist/2020.js";
import { capturedRequests } from "./captured.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

const QWEN = process.env.MB_QWEN_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf`;
const MODEL = "qwen2.5-coder-0.5b";
const ASK = "Run the shell command: echo hello-from-tool, then tell me what it printed";
const SYSTEM_CHARS = 1200;
const DESCRIPTION_CHARS = 200;
const MAX_TOKENS = 400;

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });

/** The first request of a captured tool round trip. */
function captured(file: string): Record<string, any> {
  const r = capturedRequests((c) => c.file === `tool/requests-${file}.jsonl`)[0];
  if (!r?.body) throw new Error(`no captured request in tool/requests-${file}.jsonl`);
  return structuredClone(r.body);
}

/** Descriptions anywhere in a schema, shortened (they are most of a tool's prompt). */
function shorten(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(shorten);
  if (schema === null || typeof schema !== "object") return schema;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(schema)) out[k] = k === "description" && typeof v === "string" ? v.slice(0, DESCRIPTION_CHARS) : shorten(v);
  return out;
}

function expectValid(name: string, args: unknown, schemas: Map<string, unknown>, where: string): void {
  expect([...schemas.keys()], `${where}: called ${name}`).to.include(name);
  const validate = ajv.compile(schemas.get(name) as object);
  expect(validate(args), `${where}: ${name} ${JSON.stringify(args)}: ${ajv.errorsText(validate.errors)}`).to.equal(true);
}

describe("tool_choice auto on the real Qwen2.5-Coder-0.5B: captured agent requests get valid calls", function () {
  this.timeout(900_000);
  let server: TestServer;
  let openai: OpenAI;
  let anthropic: Anthropic;

  before(async function () {
    if (!existsSync(QWEN)) this.skip(); // node bin/mashbox.js pull qwen2.5-coder-0.5b
    server = await startTestServer({ model_path: QWEN, model_id: MODEL, ctx: 8192, slots: 1 });
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: server.url, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => {
    await server?.close();
  });

  it("Claude Code (messages, streamed): a tool_use block of a declared tool, valid input", async () => {
    const b = captured("claude");
    const tools = b.tools.filter((t: any) => ["Bash", "Read", "Edit", "Write"].includes(t.name)).map((t: any) => ({ ...t, description: t.description.slice(0, DESCRIPTION_CHARS), input_schema: shorten(t.input_schema) }));
    const schemas = new Map<string, unknown>(tools.map((t: any) => [t.name, t.input_schema]));
    const body = {
      model: MODEL,
      max_tokens: MAX_TOKENS,
      temperature: 0,
      system: b.system.map((s: any) => ({ ...s, text: s.text.slice(0, SYSTEM_CHARS) })),
      tools,
      messages: [{ role: "user", content: ASK }],
      metadata: b.metadata,
    };
    const msg = await anthropic.messages.stream(body as unknown as Anthropic.MessageStreamParams).finalMessage();
    const uses = msg.content.filter((c): c is Anthropic.ToolUseBlock => c.type === "tool_use");
    expect(uses, JSON.stringify(msg.content)).to.have.length.greaterThan(0);
    for (const u of uses) expectValid(u.name, u.input, schemas, "claude");
    expect(msg.stop_reason).to.equal("tool_use");
  });

  it("Codex (responses, streamed): a function_call item of a declared tool, valid arguments", async () => {
    const b = captured("codex");
    const tools = b.tools.filter((t: any) => ["exec_command", "write_stdin", "view_image"].includes(t.name)).map((t: any) => ({ ...t, description: String(t.description ?? "").slice(0, DESCRIPTION_CHARS), parameters: shorten(t.parameters) }));
    const schemas = new Map<string, unknown>(tools.map((t: any) => [t.name, t.parameters]));
    const developer = b.input.find((m: any) => m.role === "developer");
    const body = {
      model: MODEL,
      instructions: String(b.instructions ?? "").slice(0, SYSTEM_CHARS),
      input: [
        { ...developer, content: developer.content.map((c: any) => ({ ...c, text: c.text.slice(0, SYSTEM_CHARS) })) },
        { type: "message", role: "user", content: [{ type: "input_text", text: ASK }] },
      ],
      tools,
      tool_choice: b.tool_choice,
      parallel_tool_calls: b.parallel_tool_calls,
      max_output_tokens: MAX_TOKENS,
      temperature: 0,
      store: false,
    };
    const r = await openai.responses.stream(body as unknown as OpenAI.Responses.ResponseCreateParamsStreaming).finalResponse();
    const calls = r.output.filter((i) => i.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall[];
    expect(calls, JSON.stringify(r.output)).to.have.length.greaterThan(0);
    for (const c of calls) expectValid(c.name, JSON.parse(c.arguments), schemas, "codex");
    expect(r.status).to.equal("completed");
  });

  it("Pi (chat completions, streamed): a tool call of a declared tool, valid arguments", async () => {
    const b = captured("pi");
    const schemas = new Map<string, unknown>(b.tools.map((t: any) => [t.function.name, t.function.parameters]));
    const body = {
      model: MODEL,
      messages: [{ role: "system", content: String(b.messages[0].content).slice(0, SYSTEM_CHARS) }, { role: "user", content: ASK }],
      tools: b.tools,
      max_completion_tokens: MAX_TOKENS,
      temperature: 0,
    };
    const r = await openai.chat.completions.stream(body as unknown as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming).finalChatCompletion();
    const calls = r.choices[0].message.tool_calls ?? [];
    expect(calls, JSON.stringify(r.choices[0].message)).to.have.length.greaterThan(0);
    for (const c of calls) {
      const f = c as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
      expectValid(f.function.name, JSON.parse(f.function.arguments), schemas, "pi");
    }
    expect(r.choices[0].finish_reason).to.equal("tool_calls");
  });
});
