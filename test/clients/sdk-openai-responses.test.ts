import { expect } from "chai";
import OpenAI from "openai";
import { scriptHeader, startTestServer, type TestServer } from "../helpers/server.js";
import { scriptedEngine } from "./scripted-engine.js";

// The real openai SDK (Responses API) against a real server (see the two suites at the end).
function responsesSdkSuite(start: () => Promise<TestServer>): void {
  let server: TestServer;
  let client: OpenAI;
  let model: string;
  const scripted = (text: string) => ({ headers: scriptHeader(text) });

  before(async () => {
    server = await start();
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    model = (await client.models.list()).data[0].id;
  });
  after(async () => {
    await server?.close();
  });

  it("responses.create answers a completed Response with usage", async () => {
    const r = await client.responses.create({ model, input: "say hi", max_output_tokens: 16 }, scripted("Hi there."));
    expect(r.id).to.match(/^resp_/);
    expect(r.object).to.equal("response");
    expect(r.status).to.equal("completed");
    expect(r.model).to.equal(model);
    expect(r.output_text).to.equal("Hi there.");
    expect(r.output).to.have.length(1);
    expect(r.output[0].type).to.equal("message");
    expect(r.usage!.output_tokens).to.be.greaterThan(0);
    expect(r.usage!.total_tokens).to.equal(r.usage!.input_tokens + r.usage!.output_tokens);
    expect(r.usage!.input_tokens_details.cached_tokens).to.be.at.least(0);
    expect(r.usage!.output_tokens_details.reasoning_tokens).to.equal(0);
  });

  it("max_output_tokens ends the answer as incomplete", async () => {
    const r = await client.responses.create({ model, input: "count", max_output_tokens: 2 }, scripted("one two three four five six seven"));
    expect(r.status).to.equal("incomplete");
    expect(r.incomplete_details?.reason).to.equal("max_output_tokens");
    expect(r.usage!.output_tokens).to.equal(2);
  });

  it("a model other than the served one gets 404 model_not_found", async () => {
    try {
      await client.responses.create({ model: "no-such-model", input: "x", max_output_tokens: 2 });
      expect.fail("accepted another model");
    } catch (e) {
      expect(e).to.be.instanceOf(OpenAI.NotFoundError);
    }
  });

  it("responses.stream(): ordered events, sequence numbers 0,1,2… and finalResponse()", async () => {
    const stream = client.responses.stream({ model, input: "x", max_output_tokens: 32 }, scripted("Streaming works."));
    const events: any[] = [];
    stream.on("event", (ev) => events.push(ev));
    const final = await stream.finalResponse();
    events.forEach((ev, i) => expect(ev.sequence_number, ev.type).to.equal(i));
    expect(events.map((e) => e.type)).to.deep.equal([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      ...events.filter((e) => e.type === "response.output_text.delta").map(() => "response.output_text.delta"),
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    // finalResponse() (unlike create()) leaves output_text unset, so read the item itself.
    const message = final.output.find((o) => o.type === "message") as OpenAI.Responses.ResponseOutputMessage;
    expect((message.content[0] as OpenAI.Responses.ResponseOutputText).text).to.equal("Streaming works.");
    const done = events.find((e) => e.type === "response.output_item.done");
    expect(done.item.content[0].text).to.equal("Streaming works.");
  });

  it("function_call round trip through the scripted sampler", async () => {
    const tools: OpenAI.Responses.Tool[] = [
      { type: "function", name: "bash", description: "Run a shell command", strict: false, parameters: { type: "object", properties: { command: { type: "string" } } } },
      { type: "web_search" },
    ];
    const call = '<tool_call>\n{"name": "bash", "arguments": {"command": "echo hi"}}\n</tool_call>';
    const first = await client.responses.create({ model, input: "run echo hi", tools, parallel_tool_calls: true }, scripted(call));
    expect(first.parallel_tool_calls).to.equal(true);
    expect(first.tools).to.have.length(2);
    const fc = first.output.find((o) => o.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
    expect(fc.name).to.equal("bash");
    expect(fc.call_id).to.match(/^call_/);
    expect(JSON.parse(fc.arguments)).to.deep.equal({ command: "echo hi" });

    const stream = client.responses.stream({ model, input: "run echo hi", tools }, scripted(call));
    const args: string[] = [];
    stream.on("response.function_call_arguments.delta", (ev) => args.push(ev.delta));
    const sfinal = await stream.finalResponse();
    const sfc = sfinal.output.find((o) => o.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
    expect(JSON.parse(args.join(""))).to.deep.equal({ command: "echo hi" });
    expect(sfc.arguments).to.equal(args.join(""));

    const second = await client.responses.create(
      {
        model,
        tools,
        input: [
          { role: "user", content: "run echo hi" },
          { type: "function_call", call_id: fc.call_id, name: fc.name, arguments: fc.arguments },
          { type: "function_call_output", call_id: fc.call_id, output: "hi" },
        ],
      },
      scripted("It printed hi."),
    );
    expect(second.output_text).to.equal("It printed hi.");
  });

  it("refuses json_schema output and logprobs with 400", async () => {
    for (const extra of [{ text: { format: { type: "json_object" as const } } }, { include: ["message.output_text.logprobs" as const] }]) {
      try {
        await client.responses.create({ model, input: "x", max_output_tokens: 2, ...extra });
        expect.fail("accepted " + JSON.stringify(extra));
      } catch (e) {
        expect(e).to.be.instanceOf(OpenAI.BadRequestError);
      }
    }
  });
}

describe("clients: openai SDK against /v1/responses (live engine, fixture model)", function () {
  this.timeout(120_000);
  responsesSdkSuite(() => startTestServer());
});

// The same client checks with the output parser and everything above the engine real, the engine
// an in-memory double: they run where the native engine is not built.
describe("clients: openai SDK against /v1/responses (scripted in-memory engine)", function () {
  this.timeout(60_000);
  responsesSdkSuite(() => startTestServer({ engine: scriptedEngine("test-model"), model_id: "test-model" }));
});
