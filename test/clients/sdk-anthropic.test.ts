import { expect } from "chai";
import Anthropic from "@anthropic-ai/sdk";
import { scriptHeader, startTestServer, type TestServer } from "../helpers/server.js";
import { scriptedEngine } from "./scripted-engine.js";

// The real @anthropic-ai/sdk against a real server (see the two suites at the end).
function anthropicSdkSuite(start: () => Promise<TestServer>): void {
  let server: TestServer;
  let client: Anthropic;
  const scripted = (text: string) => ({ headers: scriptHeader(text) });

  before(async () => {
    server = await start();
    client = new Anthropic({ baseURL: server.url, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => {
    await server?.close();
  });

  it("messages.create answers a Message with usage and echoes the model", async () => {
    const msg = await client.messages.create({ model: "claude-anything", max_tokens: 4, messages: [{ role: "user", content: "say hi" }] });
    expect(msg.id).to.match(/^msg_/);
    expect(msg.type).to.equal("message");
    expect(msg.role).to.equal("assistant");
    expect(msg.model).to.equal("claude-anything");
    expect(["end_turn", "max_tokens"]).to.include(msg.stop_reason);
    expect(msg.usage.output_tokens).to.be.within(0, 4);
    expect(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0)).to.be.greaterThan(3);
    expect(msg.usage.cache_creation_input_tokens).to.equal(0);
  });

  it("max_tokens ends the answer with stop_reason max_tokens", async () => {
    const msg = await client.messages.create(
      { model: "m", max_tokens: 3, messages: [{ role: "user", content: "count" }] },
      scripted("one two three four five six seven eight nine ten"),
    );
    expect(msg.stop_reason).to.equal("max_tokens");
    expect(msg.usage.output_tokens).to.equal(3);
  });

  it("the scripted text comes back whole, and a stop sequence cuts it", async () => {
    const whole = await client.messages.create({ model: "m", max_tokens: 64, messages: [{ role: "user", content: "x" }] }, scripted("Hello there, friend."));
    expect(whole.content).to.deep.equal([{ type: "text", text: "Hello there, friend." }]);
    expect(whole.stop_reason).to.equal("end_turn");
    const cut = await client.messages.create(
      { model: "m", max_tokens: 64, stop_sequences: ["friend"], messages: [{ role: "user", content: "x" }] },
      scripted("Hello there, friend."),
    );
    expect(cut.content).to.deep.equal([{ type: "text", text: "Hello there, " }]);
    expect(cut.stop_reason).to.equal("stop_sequence");
    expect(cut.stop_sequence).to.equal("friend");
  });

  it("messages.stream(): events in order and finalMessage() equal to the streamed text", async () => {
    const stream = client.messages.stream({ model: "m", max_tokens: 64, messages: [{ role: "user", content: "x" }] }, scripted("Streaming works."));
    const types: string[] = [];
    let text = "";
    stream.on("streamEvent", (ev) => types.push(ev.type));
    stream.on("text", (delta) => (text += delta));
    const final = await stream.finalMessage();
    expect(types[0]).to.equal("message_start");
    expect(types.slice(-2)).to.deep.equal(["message_delta", "message_stop"]);
    expect(types).to.include.members(["content_block_start", "content_block_delta", "content_block_stop"]);
    expect(text).to.equal("Streaming works.");
    expect(final.content).to.deep.equal([{ type: "text", text: "Streaming works." }]);
    expect(final.stop_reason).to.equal("end_turn");
    expect(final.usage.output_tokens).to.be.greaterThan(0);
  });

  it("countTokens counts the templated prompt: more text, more tokens; tools count too", async () => {
    const small = await client.messages.countTokens({ model: "m", messages: [{ role: "user", content: "hi" }] });
    const big = await client.messages.countTokens({ model: "m", messages: [{ role: "user", content: "hi ".repeat(50) }] });
    const tools = await client.messages.countTokens({
      model: "m",
      messages: [{ role: "user", content: "hi" }],
      tools: [{ name: "bash", description: "Run a shell command", input_schema: { type: "object", properties: { command: { type: "string" } } } }],
    });
    expect(small.input_tokens).to.be.greaterThan(1);
    expect(big.input_tokens).to.be.greaterThan(small.input_tokens + 25);
    expect(tools.input_tokens).to.be.greaterThan(small.input_tokens);
    // The count is what a generation actually prefills.
    const msg = await client.messages.create({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "hi ".repeat(50) }] });
    expect(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0)).to.equal(big.input_tokens);
  });

  it("tool_use round trip through the scripted sampler", async () => {
    const tools: Anthropic.Tool[] = [{ name: "bash", description: "Run a shell command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }];
    const call = '<tool_call>\n{"name": "bash", "arguments": {"command": "echo hi"}}\n</tool_call>';
    const first = await client.messages.create({ model: "m", max_tokens: 128, tools, messages: [{ role: "user", content: "run echo hi" }] }, scripted(call));
    expect(first.stop_reason).to.equal("tool_use");
    const use = first.content.find((b) => b.type === "tool_use") as Anthropic.ToolUseBlock;
    expect(use.id).to.match(/^toolu_/);
    expect(use.name).to.equal("bash");
    expect(use.input).to.deep.equal({ command: "echo hi" });

    // The same call, streamed: input_json_delta pieces rebuild the input.
    const streamed = await client.messages.stream({ model: "m", max_tokens: 128, tools, messages: [{ role: "user", content: "run echo hi" }] }, scripted(call)).finalMessage();
    const suse = streamed.content.find((b) => b.type === "tool_use") as Anthropic.ToolUseBlock;
    expect(suse.input).to.deep.equal({ command: "echo hi" });
    expect(streamed.stop_reason).to.equal("tool_use");

    const second = await client.messages.create(
      {
        model: "m",
        max_tokens: 64,
        tools,
        messages: [
          { role: "user", content: "run echo hi" },
          { role: "assistant", content: first.content },
          { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "hi" }] },
        ],
      },
      scripted("It printed hi."),
    );
    expect(second.content).to.deep.equal([{ type: "text", text: "It printed hi." }]);
    expect(second.stop_reason).to.equal("end_turn");
  });

  it("refuses an image block with a 400 in the Anthropic error shape", async () => {
    try {
      await client.messages.create({
        model: "m",
        max_tokens: 4,
        messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }],
      });
      expect.fail("accepted an image");
    } catch (e) {
      expect(e).to.be.instanceOf(Anthropic.BadRequestError);
      const err = e as InstanceType<typeof Anthropic.BadRequestError>;
      expect((err.error as any).type).to.equal("error");
      expect((err.error as any).error.type).to.equal("invalid_request_error");
      // Named by the request validation or by the dialect (which names the block itself).
      expect((err.error as any).error.message).to.include("messages[0].content");
    }
  });
}

describe("clients: @anthropic-ai/sdk against /v1/messages (live engine, fixture model)", function () {
  this.timeout(120_000);
  anthropicSdkSuite(() => startTestServer());
});

// The same client checks with the output parser and everything above the engine real, the engine
// an in-memory double: they run where the native engine is not built.
describe("clients: @anthropic-ai/sdk against /v1/messages (scripted in-memory engine)", function () {
  this.timeout(60_000);
  anthropicSdkSuite(() => startTestServer({ engine: scriptedEngine("test-model"), model_id: "test-model" }));
});
