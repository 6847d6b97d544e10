// gpt-oss through the real server on its fixture (harmony template, MXFP4 experts): a forced tool
// choice comes back as a tool call on the chat and messages routes (the grammar writes the
// harmony call message, the harmony parser reads it), and free output never shows harmony's
// scaffolding to a client.
import { expect } from "chai";
import { existsSync } from "node:fs";
import path from "node:path";
import { startLiveServer, type LiveServer } from "../helpers/live.js";

const FIXTURE = path.join(process.cwd(), "test/fixtures/gpt-oss-mxfp4.gguf");
const WEATHER = {
  name: "get_weather",
  description: "Current weather of a city",
  // an enum keeps a random-weight model's arguments short
  parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Oslo", "Rome"] } }, required: ["city"], additionalProperties: false },
};

async function post(srv: LiveServer, route: string, body: unknown): Promise<{ status: number; json: Record<string, any> }> {
  const r = await fetch(srv.url + route, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Record<string, any> };
}

describe("gpt-oss fixture through the server (harmony)", function () {
  this.timeout(300_000);
  let srv: LiveServer;
  before(async function () {
    if (!existsSync(FIXTURE)) throw new Error(`${FIXTURE} missing: npm run fixtures`);
    srv = await startLiveServer({ model_path: FIXTURE, ctx: 2048 });
  });
  after(async () => srv?.close());

  it("chat completions: tool_choice required gives a get_weather call with schema-valid arguments", async function () {
    const r = await post(srv, "/v1/chat/completions", {
      model: "test-model",
      messages: [{ role: "user", content: "What's the weather in Paris?" }],
      tools: [{ type: "function", function: WEATHER }],
      tool_choice: "required",
      max_tokens: 64,
    });
    expect(r.status, JSON.stringify(r.json)).to.equal(200);
    const choice = r.json.choices[0];
    expect(choice.finish_reason, JSON.stringify(choice)).to.equal("tool_calls");
    expect(choice.message.tool_calls).to.have.length(1);
    expect(choice.message.tool_calls[0].function.name).to.equal("get_weather");
    expect(JSON.parse(choice.message.tool_calls[0].function.arguments).city).to.be.oneOf(["Paris", "Oslo", "Rome"]);
    expect(choice.message.content ?? "").to.not.contain("<|");
  });

  it("messages: a named tool choice gives a tool_use block", async function () {
    const r = await post(srv, "/v1/messages", {
      model: "test-model",
      max_tokens: 64,
      messages: [{ role: "user", content: "Weather in Oslo?" }],
      tools: [{ name: WEATHER.name, description: WEATHER.description, input_schema: WEATHER.parameters }],
      tool_choice: { type: "tool", name: "get_weather" },
    });
    expect(r.status, JSON.stringify(r.json)).to.equal(200);
    expect(r.json.stop_reason, JSON.stringify(r.json)).to.equal("tool_use");
    const use = (r.json.content as { type: string; name?: string; input?: { city?: unknown } }[]).find((b) => b.type === "tool_use");
    expect(use?.name).to.equal("get_weather");
    expect(use?.input?.city).to.be.oneOf(["Paris", "Oslo", "Rome"]);
  });

  it("free output: no harmony tag reaches the client, in text or reasoning", async function () {
    const r = await post(srv, "/v1/chat/completions", {
      model: "test-model",
      messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello!" }],
      max_tokens: 48,
      temperature: 1,
      seed: 3,
    });
    expect(r.status, JSON.stringify(r.json)).to.equal(200);
    const m = r.json.choices[0].message;
    for (const s of [m.content ?? "", m.reasoning_content ?? ""]) expect(s).to.not.match(/<\|(channel|message|start|end|constrain)\|>/);
    expect(r.json.usage.completion_tokens).to.be.greaterThan(0);
  });
});
