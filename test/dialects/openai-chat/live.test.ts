// The two OpenAI routes end to end: the real openai SDK against a real server on a real engine
// (random-weight fixture model), every answer validated against openapi.json by the test server.
import { expect } from "chai";
import { existsSync } from "node:fs";
import OpenAI from "openai";
import { scriptHeader, startTestServer, type TestServer } from "../../helpers/server.js";

const FIXTURE = "test/fixtures/llama-q8_0.gguf";
const MODEL = "fixture-llama";

const TOOLS: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  { type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } },
  { type: "function", function: { name: "read_file", parameters: { type: "object", properties: { path: { type: "string" } } } } },
];
const SCRIPT = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris, FR"}}\n</tool_call>';
// The test server forces this exact output with a one-literal grammar (test/helpers/script.ts).
const script = { headers: scriptHeader(SCRIPT) };

describe("live: OpenAI chat + completions (fixture model)", function () {
  this.timeout(120_000);
  let server: TestServer;
  let client: OpenAI;

  before(async function () {
    // Pending, not passed, without the fixture model (npm run fixtures).
    if (!existsSync(FIXTURE)) this.skip();
    server = await startTestServer({ model_path: FIXTURE, model_id: MODEL });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => {
    if (server) await server.close();
  });

  it("answers a chat completion, and the stream says the same thing", async () => {
    const body = { model: MODEL, messages: [{ role: "user" as const, content: "Hello" }], max_tokens: 8, seed: 1 };
    const r = await client.chat.completions.create(body);
    expect(r.id).to.match(/^chatcmpl-/);
    expect(r.object).to.equal("chat.completion");
    expect(r.choices[0].finish_reason).to.be.oneOf(["stop", "length"]);
    expect(r.usage!.completion_tokens).to.be.within(1, 8);
    expect(r.usage!.total_tokens).to.equal(r.usage!.prompt_tokens + r.usage!.completion_tokens);
    expect((r as any).timings.predicted_n).to.equal(r.usage!.completion_tokens);

    const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).to.equal("chat.completion.chunk");
      for (const ch of chunk.choices) {
        text += ch.delta.content ?? "";
        finish = ch.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    // Greedy decoding: the same tokens either way.
    expect(text).to.equal(r.choices[0].message.content);
    expect(finish).to.equal(r.choices[0].finish_reason);
    expect(usage!.completion_tokens).to.equal(r.usage!.completion_tokens);
  });

  it("works with the SDK's stream helper", async () => {
    const runner = client.chat.completions.stream({ model: MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 5 } as any);
    const deltas: string[] = [];
    runner.on("content", (d) => deltas.push(d));
    const final = await runner.finalChatCompletion();
    expect(final.choices[0].message.content).to.equal(deltas.join(""));
  });

  it("parses a forced tool call end to end (scripted sampler)", async () => {
    const r = await client.chat.completions.create(
      { model: MODEL, messages: [{ role: "user", content: "Weather in Paris?" }], tools: TOOLS, tool_choice: { type: "function", function: { name: "get_weather" } } } as any,
      script,
    );
    const msg = r.choices[0].message;
    expect(r.choices[0].finish_reason).to.equal("tool_calls");
    expect(msg.content).to.equal("Checking.");
    expect(msg.tool_calls).to.have.length(1);
    const call = msg.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.id).to.match(/^call_/);
    expect(call.function.name).to.equal("get_weather");
    expect(JSON.parse(call.function.arguments)).to.deep.equal({ city: "Paris, FR" });

    const runner = client.chat.completions.stream({ model: MODEL, messages: [{ role: "user", content: "Weather?" }], tools: TOOLS, tool_choice: "required" } as any, script);
    const final = await runner.finalChatCompletion();
    const streamed = final.choices[0].message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(streamed.function.name).to.equal("get_weather");
    expect(JSON.parse(streamed.function.arguments)).to.deep.equal({ city: "Paris, FR" });
    expect(final.choices[0].message.content).to.equal("Checking.");
    expect(final.choices[0].finish_reason).to.equal("tool_calls");

    // The call replays as history; the tool result goes back in.
    const again = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Weather?" }, msg as any, { role: "tool", tool_call_id: call.id, content: "18C" }],
      tools: TOOLS,
      max_tokens: 3,
    } as any);
    expect(again.usage!.prompt_tokens).to.be.greaterThan(r.usage!.prompt_tokens);
  });

  it("with tool_choice none, a <tool_call> in the output stays text", async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], tools: TOOLS, tool_choice: "none" } as any, script);
    expect(r.choices[0].message.tool_calls ?? []).to.have.length(0);
    expect(r.choices[0].message.content).to.equal(SCRIPT);
    expect(r.choices[0].finish_reason).to.equal("stop");
  });

  it("refuses media parts and another model id, naming the field", async () => {
    const bad = client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:," } }] }] } as any);
    const e1 = (await bad.catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(e1.status).to.equal(400);
    // Request validation may refuse the part before the dialect does; either way the field is named.
    expect(e1.param).to.match(/^messages\[0\]\.content/);
    const e2 = (await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }).catch((e) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(e2.status).to.equal(404);
    expect(e2.code).to.equal("model_not_found");
    // Leaving the model out is accepted.
    const ok = await client.chat.completions.create({ messages: [{ role: "user", content: "x" }], max_tokens: 1 } as any);
    expect(ok.model).to.equal(MODEL);
  });

  it("continues a plain prompt, streamed and not, with a stable system_fingerprint", async () => {
    const r = await client.completions.create({ model: MODEL, prompt: "Once upon", max_tokens: 6 } as any);
    expect(r.id).to.match(/^cmpl-/);
    expect(r.object).to.equal("text_completion");
    expect(r.system_fingerprint).to.match(/^seed-/);
    expect(r.usage!.completion_tokens).to.be.within(1, 6);
    const s = await client.completions.create({ model: MODEL, prompt: ["Once upon"], max_tokens: 6, stream: true } as any);
    let text = "";
    let finish: string | null = null;
    for await (const c of s as any) {
      expect(c.system_fingerprint).to.equal(r.system_fingerprint);
      text += c.choices[0]?.text ?? "";
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(text).to.equal(r.choices[0].text);
    expect(finish).to.equal(r.choices[0].finish_reason);
  });

  it("ends the text before a stop string", async () => {
    const r = await client.completions.create({ model: MODEL, prompt: "x", stop: ["Paris"], max_tokens: 200 } as any, script);
    expect(r.choices[0].text).to.equal(SCRIPT.slice(0, SCRIPT.indexOf("Paris")));
    expect(r.choices[0].finish_reason).to.equal("stop");
  });
});
