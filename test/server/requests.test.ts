// Request semantics the issue "Truthful operations" (12.4, 12.5) pins down, through HTTP on a
// real engine: tool_choice none never yields a call, timings.predicted_per_second is the decode
// speed after the first token, and a failed request is counted under finished_reason="error".
import { expect } from "chai";
import { postJson, scriptHeader, startTestServer, type TestServer } from "../helpers/server.js";

const CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const TOOLS = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
const ANTHROPIC_TOOLS = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];

async function metric(url: string, name: string, labels: string): Promise<number> {
  const text = await (await fetch(url + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}} `));
  return Number(line?.split(" ")[1] ?? NaN);
}

describe("requests: tool_choice none, timings, failures in metrics", function () {
  this.timeout(60_000);
  let server: TestServer;
  before(async () => {
    server = await startTestServer({ ctx: 512, slots: 1 });
  });
  after(async () => {
    await server?.close();
  });

  it("Chat Completions: a <tool_call> written under tool_choice none stays text", async () => {
    const body = { messages: [{ role: "user", content: "Weather?" }], tools: TOOLS, max_tokens: 64 };
    const none = await (await postJson(server.url + "/v1/chat/completions", { ...body, tool_choice: "none" }, scriptHeader(CALL))).json();
    expect(none.choices[0].message.tool_calls ?? []).to.have.length(0);
    expect(none.choices[0].message.content).to.include("<tool_call>").and.include("get_weather");
    expect(none.choices[0].finish_reason).to.not.equal("tool_calls");
    // The same output under auto is a call: the refusal above is the choice's doing.
    const auto = await (await postJson(server.url + "/v1/chat/completions", { ...body, tool_choice: "auto" }, scriptHeader(CALL))).json();
    expect(auto.choices[0].message.tool_calls).to.have.length(1);
    expect(auto.choices[0].finish_reason).to.equal("tool_calls");
  });

  it("Messages: tool_choice none gives a text block, never tool_use", async () => {
    const res = await postJson(
      server.url + "/v1/messages",
      { model: "m", max_tokens: 64, messages: [{ role: "user", content: "Weather?" }], tools: ANTHROPIC_TOOLS, tool_choice: { type: "none" } },
      scriptHeader(CALL),
    );
    const msg = await res.json();
    expect(msg.content.map((b: { type: string }) => b.type)).to.deep.equal(["text"]);
    expect(msg.stop_reason).to.not.equal("tool_use");
  });

  it("Messages: thinking.budget_tokens closes the think block when reached, then the answer follows", async () => {
    const thoughts = Array.from({ length: 40 }, (_, i) => `step${i}`).join(" ");
    const script = `<think>${thoughts}</think>The answer.`;
    const ask = (thinking: Record<string, unknown>) =>
      postJson(server.url + "/v1/messages", { model: "m", max_tokens: 200, thinking, messages: [{ role: "user", content: "Think." }] }, scriptHeader(script)).then((r) => r.json());
    const free = await ask({ type: "enabled", budget_tokens: 1024 });
    expect(free.content.map((b: { type: string }) => b.type)).to.deep.equal(["thinking", "text"]);
    expect(free.content[0].thinking).to.equal(thoughts);
    const cut = await ask({ type: "enabled", budget_tokens: 6 });
    expect(cut.content.map((b: { type: string }) => b.type)).to.deep.equal(["thinking", "text"]);
    // About six tokens of thinking (a token is at most a word here), cut where the budget ran out.
    const words = cut.content[0].thinking.trim().split(/\s+/);
    expect(words.length).to.be.within(1, 6);
    expect(thoughts.startsWith(cut.content[0].thinking.trim())).to.equal(true);
    expect(cut.content[1].text.length).to.be.greaterThan(0);
    expect(cut.usage.output_tokens).to.be.greaterThan(6);
  });

  it("timings.predicted_per_second counts the n - 1 tokens after the first over predicted_ms", async () => {
    const r = await (await postJson(server.url + "/v1/chat/completions", { messages: [{ role: "user", content: "Count." }], max_tokens: 6 }, scriptHeader("one two three four five six seven"))).json();
    const t = r.timings;
    expect(t.predicted_n).to.be.greaterThan(2);
    expect(t.predicted_ms).to.be.greaterThan(0);
    expect(t.predicted_per_second).to.be.closeTo(((t.predicted_n - 1) * 1000) / t.predicted_ms, 1e-6);
  });

  it("a failed generation counts under request_success_total{finished_reason=\"error\"}; a refusal does not", async () => {
    const errors0 = await metric(server.url, "mashbox:request_success_total", 'finished_reason="error"');
    // A refusal (400: the prompt does not fit) is the client's, not a failure.
    const refused = await postJson(server.url + "/v1/chat/completions", { messages: [{ role: "user", content: "word ".repeat(2000) }], max_tokens: 4 });
    expect(refused.status).to.equal(400);
    expect(await metric(server.url, "mashbox:request_success_total", 'finished_reason="error"')).to.equal(errors0);
    // A worker killed after the stream sent output fails the request (an error event, no retry).
    const res = await postJson(server.url + "/v1/chat/completions", { stream: true, messages: [{ role: "user", content: "Go on." }], max_tokens: 200 }, scriptHeader("a ".repeat(150)));
    const reader = res.body!.getReader();
    let seen = "";
    const dec = new TextDecoder();
    for (let r = await reader.read(); !r.done && !seen.includes('"content":"a'); r = await reader.read()) seen += dec.decode(r.value);
    expect(seen).to.include('"content":"a');
    process.kill(server.engine.stats().worker_pid!, "SIGKILL");
    for (let r = await reader.read(); !r.done; r = await reader.read()) seen += dec.decode(r.value);
    expect(seen).to.include('"error"');
    expect(await metric(server.url, "mashbox:request_success_total", 'finished_reason="error"')).to.equal(errors0 + 1);
  });
});
