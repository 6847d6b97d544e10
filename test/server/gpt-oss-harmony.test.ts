// gpt-oss's harmony output mapped through the real server, on each dialect: the fixture model
// is scripted (test/helpers/script.ts) to write what a trained gpt-oss writes after the
// template's "<|start|>assistant" — an analysis message then a final one, or a commentary
// message addressed to a function — and the real tokenizer, detokenizer, harmony parser and
// stream encoders must turn the analysis into each dialect's reasoning/thinking output, the
// final message into text, and the commentary call into a tool call, with no harmony tag left
// in anything a client sees. Every answer and SSE event is checked against openapi.json by the
// harness.
import { expect } from "chai";
import { existsSync } from "node:fs";
import path from "node:path";
import { postJson, scriptHeader, startTestServer, type TestServer } from "../helpers/server.js";

const FIXTURE = path.join(process.cwd(), "test/fixtures/gpt-oss-mxfp4.gguf");
const ANALYSIS = "The user greets me. A short greeting back will do.";
const FINAL = "Hello! How can I help?";
const REASONED = `<|channel|>analysis<|message|>${ANALYSIS}<|end|><|start|>assistant<|channel|>final<|message|>${FINAL}`;
const ARGS = '{"city":"Paris"}';
const CALL = `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>${ARGS}`;
const REASONED_CALL = `<|channel|>analysis<|message|>${ANALYSIS}<|end|><|start|>assistant${CALL}`;
// No scripted text contains "<|", so any "<|" a client sees is (part of) a leaked harmony tag.
const HARMONY_TAG = /<\||\|>|\bto=functions\b|<\|?$/;

const WEATHER = {
  name: "get_weather",
  description: "Current weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
};
const CHAT_TOOLS = [{ type: "function", function: WEATHER }];
const RESPONSES_TOOLS = [{ type: "function", ...WEATHER }];
const MESSAGES_TOOLS = [{ name: WEATHER.name, description: WEATHER.description, input_schema: WEATHER.parameters }];

/** The data payloads of an SSE body, JSON-parsed ([DONE] dropped). */
function events(sse: string): Record<string, any>[] {
  const out: Record<string, any>[] = [];
  for (const block of sse.split("\n\n")) {
    const data = block.split("\n").find((l) => l.startsWith("data: "))?.slice(6);
    if (!data || data === "[DONE]") continue;
    out.push(JSON.parse(data));
  }
  return out;
}

/** Every string anywhere in a JSON value (what a client could show). */
function strings(v: unknown, out: string[] = []): string[] {
  if (typeof v === "string") out.push(v);
  else if (Array.isArray(v)) for (const x of v) strings(x, out);
  else if (v !== null && typeof v === "object") for (const x of Object.values(v)) strings(x, out);
  return out;
}

function expectNoTags(v: unknown): void {
  for (const s of strings(v)) expect(s).to.not.match(HARMONY_TAG);
}

describe("gpt-oss harmony output through each dialect (scripted fixture)", function () {
  this.timeout(300_000);
  let srv: TestServer;
  before(async function () {
    if (!existsSync(FIXTURE)) throw new Error(`${FIXTURE} missing: npm run fixtures`);
    srv = await startTestServer({ model_path: FIXTURE, ctx: 1024, slots: 1 });
  });
  after(async () => srv?.close());

  async function post(route: string, body: unknown, script: string): Promise<Response> {
    const r = await postJson(srv.url + route, { model: "test-model", ...(body as object) }, scriptHeader(script));
    expect(r.status, `${route}: ${r.status}`).to.equal(200);
    return r;
  }

  describe("analysis then final", () => {
    it("chat completions: reasoning_content and content", async () => {
      const r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Hi!" }], max_tokens: 200 }, REASONED);
      const j = (await r.json()) as Record<string, any>;
      const m = j.choices[0].message;
      expect(m.reasoning_content, JSON.stringify(m)).to.equal(ANALYSIS);
      expect(m.content).to.equal(FINAL);
      expect(m.tool_calls ?? []).to.have.length(0);
      expect(j.choices[0].finish_reason).to.equal("stop");
      expectNoTags(j);
    });

    it("chat completions streamed: reasoning_content deltas before content deltas, however the tags are tokenized", async () => {
      // The script's text is fixed but its tokens are sampled: a tag may come as its one control
      // token (as gpt-oss writes it) or split over several, so each seed splits the stream anew.
      for (const seed of [1, 2, 3, 4]) await streamedReasoned(seed);
    });

    async function streamedReasoned(seed: number): Promise<void> {
      const r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Hi!" }], max_tokens: 200, stream: true, temperature: 1, seed }, REASONED);
      const evs = events(await r.text());
      const order: string[] = [];
      let reasoning = "";
      let content = "";
      for (const e of evs) {
        const d = e.choices?.[0]?.delta ?? {};
        if (d.reasoning_content) (reasoning += d.reasoning_content), order.push("r");
        if (d.content) (content += d.content), order.push("c");
      }
      expect(reasoning, `seed ${seed}`).to.equal(ANALYSIS);
      expect(content, `seed ${seed}`).to.equal(FINAL);
      expect(order.lastIndexOf("r"), `seed ${seed}`).to.be.lessThan(order.indexOf("c"));
      expect(evs.map((e) => e.choices?.[0]?.finish_reason).filter(Boolean)).to.deep.equal(["stop"]);
      expectNoTags(evs);
    }

    it("responses: a reasoning item then a message", async () => {
      const r = await post("/v1/responses", { input: "Hi!", max_output_tokens: 200 }, REASONED);
      const j = (await r.json()) as Record<string, any>;
      expect(j.output.map((o: { type: string }) => o.type), JSON.stringify(j.output)).to.deep.equal(["reasoning", "message"]);
      expect(j.output[0].content).to.deep.equal([{ type: "reasoning_text", text: ANALYSIS }]);
      expect(j.output[1].content[0].type).to.equal("output_text");
      expect(j.output[1].content[0].text).to.equal(FINAL);
      expect(j.status).to.equal("completed");
      // the analysis tokens are counted as reasoning, the final answer's are not
      const u = j.usage;
      expect(u.output_tokens_details.reasoning_tokens, JSON.stringify(u)).to.be.greaterThan(0);
      expect(u.output_tokens_details.reasoning_tokens).to.be.lessThan(u.output_tokens);
      expectNoTags(j);
    });

    it("responses streamed: reasoning_text deltas, then output_text deltas, in two items", async () => {
      const r = await post("/v1/responses", { input: "Hi!", max_output_tokens: 200, stream: true }, REASONED);
      const evs = events(await r.text());
      const reasoning = evs.filter((e) => e.type === "response.reasoning_text.delta").map((e) => e.delta).join("");
      const text = evs.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
      expect(reasoning).to.equal(ANALYSIS);
      expect(text).to.equal(FINAL);
      const added = evs.filter((e) => e.type === "response.output_item.added").map((e) => e.item.type);
      expect(added).to.deep.equal(["reasoning", "message"]);
      const done = evs.find((e) => e.type === "response.completed");
      expect(done?.response.output.map((o: { type: string }) => o.type)).to.deep.equal(["reasoning", "message"]);
      expectNoTags(evs);
    });

    it("messages: a thinking block then a text block", async () => {
      const r = await post("/v1/messages", { max_tokens: 200, messages: [{ role: "user", content: "Hi!" }] }, REASONED);
      const j = (await r.json()) as Record<string, any>;
      const blocks = j.content as Record<string, any>[];
      expect(blocks.map((b) => b.type), JSON.stringify(blocks)).to.deep.equal(["thinking", "text"]);
      expect(blocks[0].thinking).to.equal(ANALYSIS);
      expect(blocks[1].text).to.equal(FINAL);
      expect(j.stop_reason).to.equal("end_turn");
      expectNoTags(blocks.map((b) => ({ ...b, signature: undefined })));
    });

    it("messages streamed: thinking_delta events in block 0, text_delta in block 1", async () => {
      const r = await post("/v1/messages", { max_tokens: 200, messages: [{ role: "user", content: "Hi!" }], stream: true }, REASONED);
      const evs = events(await r.text());
      const starts = evs.filter((e) => e.type === "content_block_start").map((e) => [e.index, e.content_block.type]);
      expect(starts).to.deep.equal([
        [0, "thinking"],
        [1, "text"],
      ]);
      const deltas = evs.filter((e) => e.type === "content_block_delta");
      const thinking = deltas.filter((e) => e.delta.type === "thinking_delta").map((e) => (expect(e.index).to.equal(0), e.delta.thinking)).join("");
      const text = deltas.filter((e) => e.delta.type === "text_delta").map((e) => (expect(e.index).to.equal(1), e.delta.text)).join("");
      expect(thinking).to.equal(ANALYSIS);
      expect(text).to.equal(FINAL);
      expect(evs.find((e) => e.type === "message_delta")?.delta.stop_reason).to.equal("end_turn");
      expectNoTags(evs.map((e) => (e.delta?.type === "signature_delta" ? {} : e)));
    });
  });

  describe("a commentary call written freely (tool_choice auto)", () => {
    it("chat completions: a tool call, reasoning kept, no content", async () => {
      const r = await post(
        "/v1/chat/completions",
        { messages: [{ role: "user", content: "Weather in Paris?" }], tools: CHAT_TOOLS, max_tokens: 200 },
        REASONED_CALL,
      );
      const j = (await r.json()) as Record<string, any>;
      const choice = j.choices[0];
      expect(choice.finish_reason, JSON.stringify(choice)).to.equal("tool_calls");
      expect(choice.message.reasoning_content).to.equal(ANALYSIS);
      expect(choice.message.content ?? "").to.equal("");
      expect(choice.message.tool_calls).to.have.length(1);
      expect(choice.message.tool_calls[0].type).to.equal("function");
      expect(choice.message.tool_calls[0].function.name).to.equal("get_weather");
      expect(JSON.parse(choice.message.tool_calls[0].function.arguments)).to.deep.equal({ city: "Paris" });
      expectNoTags(j);
    });

    it("chat completions streamed: tool_calls deltas carry the name then the arguments", async () => {
      const r = await post(
        "/v1/chat/completions",
        { messages: [{ role: "user", content: "Weather in Paris?" }], tools: CHAT_TOOLS, max_tokens: 200, stream: true },
        CALL,
      );
      const evs = events(await r.text());
      const calls = evs.flatMap((e) => e.choices?.[0]?.delta?.tool_calls ?? []);
      expect(calls.length, JSON.stringify(evs)).to.be.greaterThan(0);
      expect(calls[0].function.name).to.equal("get_weather");
      expect(calls[0].id).to.be.a("string");
      expect(calls.every((c: { index: number }) => c.index === 0)).to.equal(true);
      expect(JSON.parse(calls.map((c: { function?: { arguments?: string } }) => c.function?.arguments ?? "").join(""))).to.deep.equal({ city: "Paris" });
      expect(evs.map((e) => e.choices?.[0]?.delta?.content ?? "").join("")).to.equal("");
      expect(evs.map((e) => e.choices?.[0]?.finish_reason).filter(Boolean)).to.deep.equal(["tool_calls"]);
      expectNoTags(evs);
    });

    it("responses: a reasoning item then a function_call item", async () => {
      const r = await post("/v1/responses", { input: "Weather in Paris?", tools: RESPONSES_TOOLS, max_output_tokens: 200 }, REASONED_CALL);
      const j = (await r.json()) as Record<string, any>;
      expect(j.output.map((o: { type: string }) => o.type), JSON.stringify(j.output)).to.deep.equal(["reasoning", "function_call"]);
      expect(j.output[1].name).to.equal("get_weather");
      expect(JSON.parse(j.output[1].arguments)).to.deep.equal({ city: "Paris" });
      expectNoTags(j);
    });

    it("responses streamed: function_call_arguments events build the call", async () => {
      const r = await post("/v1/responses", { input: "Weather in Paris?", tools: RESPONSES_TOOLS, max_output_tokens: 200, stream: true }, CALL);
      const evs = events(await r.text());
      const args = evs.filter((e) => e.type === "response.function_call_arguments.delta").map((e) => e.delta).join("");
      expect(JSON.parse(args)).to.deep.equal({ city: "Paris" });
      const done = evs.find((e) => e.type === "response.function_call_arguments.done");
      expect(JSON.parse(done?.arguments)).to.deep.equal({ city: "Paris" });
      const completed = evs.find((e) => e.type === "response.completed");
      const out = completed?.response.output as { type: string; name?: string }[];
      expect(out.map((o) => o.type)).to.deep.equal(["function_call"]);
      expect(out[0].name).to.equal("get_weather");
      expect(evs.filter((e) => e.type === "response.output_text.delta")).to.have.length(0);
      expectNoTags(evs);
    });

    it("messages: thinking then a tool_use block, stop_reason tool_use", async () => {
      const r = await post(
        "/v1/messages",
        { max_tokens: 200, messages: [{ role: "user", content: "Weather in Paris?" }], tools: MESSAGES_TOOLS },
        REASONED_CALL,
      );
      const j = (await r.json()) as Record<string, any>;
      const blocks = j.content as Record<string, any>[];
      expect(blocks.map((b) => b.type), JSON.stringify(blocks)).to.deep.equal(["thinking", "tool_use"]);
      expect(blocks[0].thinking).to.equal(ANALYSIS);
      expect(blocks[1].name).to.equal("get_weather");
      expect(blocks[1].input).to.deep.equal({ city: "Paris" });
      expect(j.stop_reason).to.equal("tool_use");
      expectNoTags(blocks.map((b) => ({ ...b, signature: undefined })));
    });

    it("messages streamed: a tool_use block whose input_json_delta parts join to the arguments", async () => {
      const r = await post(
        "/v1/messages",
        { max_tokens: 200, messages: [{ role: "user", content: "Weather in Paris?" }], tools: MESSAGES_TOOLS, stream: true },
        CALL,
      );
      const evs = events(await r.text());
      const starts = evs.filter((e) => e.type === "content_block_start").map((e) => e.content_block);
      expect(starts.map((b) => b.type), JSON.stringify(starts)).to.deep.equal(["tool_use"]);
      expect(starts[0].name).to.equal("get_weather");
      const json = evs
        .filter((e) => e.type === "content_block_delta" && e.delta.type === "input_json_delta")
        .map((e) => e.delta.partial_json)
        .join("");
      expect(JSON.parse(json)).to.deep.equal({ city: "Paris" });
      expect(evs.find((e) => e.type === "message_delta")?.delta.stop_reason).to.equal("tool_use");
      expectNoTags(evs);
    });
  });

  it("chat completions: the recipient in the role part, after a commentary preamble, is a tool call too", async () => {
    const preamble = "Let me look that up.";
    const script =
      `<|channel|>analysis<|message|>${ANALYSIS}<|end|>` +
      `<|start|>assistant<|channel|>commentary<|message|>${preamble}<|end|>` +
      `<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>${ARGS}`;
    for (const stream of [false, true]) {
      const r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Weather in Paris?" }], tools: CHAT_TOOLS, max_tokens: 300, stream }, script);
      let reasoning: string, content: string, calls: { function: { name?: string; arguments?: string } }[], finish: string[];
      if (stream) {
        const evs = events(await r.text());
        expectNoTags(evs);
        const deltas = evs.map((e) => e.choices?.[0]?.delta ?? {});
        reasoning = deltas.map((d) => d.reasoning_content ?? "").join("");
        content = deltas.map((d) => d.content ?? "").join("");
        const parts = deltas.flatMap((d) => d.tool_calls ?? []);
        calls = [{ function: { name: parts[0]?.function?.name, arguments: parts.map((c: { function?: { arguments?: string } }) => c.function?.arguments ?? "").join("") } }];
        finish = evs.map((e) => e.choices?.[0]?.finish_reason).filter(Boolean);
      } else {
        const j = (await r.json()) as Record<string, any>;
        expectNoTags(j);
        reasoning = j.choices[0].message.reasoning_content;
        content = j.choices[0].message.content;
        calls = j.choices[0].message.tool_calls;
        finish = [j.choices[0].finish_reason];
      }
      expect(reasoning, `stream ${stream}`).to.equal(ANALYSIS);
      expect(content, `stream ${stream}`).to.equal(preamble);
      expect(calls, `stream ${stream}`).to.have.length(1);
      expect(calls[0].function.name).to.equal("get_weather");
      expect(JSON.parse(calls[0].function.arguments!)).to.deep.equal({ city: "Paris" });
      expect(finish).to.deep.equal(["tool_calls"]);
    }
  });

  it("the call's result sent back renders through the harmony template and the answer follows (chat, messages)", async () => {
    const answer = "It is sunny in Paris.";
    const script = `<|channel|>final<|message|>${answer}`;
    const chat = await post(
      "/v1/chat/completions",
      {
        tools: CHAT_TOOLS,
        max_tokens: 100,
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: null, reasoning_content: ANALYSIS, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: ARGS } }] },
          { role: "tool", tool_call_id: "call_1", content: '{"sky":"sunny"}' },
        ],
      },
      script,
    );
    const cj = (await chat.json()) as Record<string, any>;
    expect(cj.choices[0].message.content).to.equal(answer);
    expect(cj.choices[0].message.reasoning_content).to.equal(undefined);
    expect(cj.choices[0].finish_reason).to.equal("stop");
    const msg = await post(
      "/v1/messages",
      {
        tools: MESSAGES_TOOLS,
        max_tokens: 100,
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: '{"sky":"sunny"}' }] },
        ],
      },
      script,
    );
    const mj = (await msg.json()) as Record<string, any>;
    expect(mj.content).to.deep.equal([{ type: "text", text: answer }]);
    expect(mj.stop_reason).to.equal("end_turn");
  });

  it("a call to a function that was not offered: steered to an offered one under auto, text under none", async () => {
    const script = `<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"tz":"CET"}`;
    // auto: once the recipient opens a call, the name is one of the declared tools (the random
    // fixture then writes the arguments under the call grammar).
    const r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Weather in Paris?" }], tools: CHAT_TOOLS, max_tokens: 200 }, script);
    const j = (await r.json()) as Record<string, any>;
    const m = j.choices[0].message;
    expect(m.tool_calls, JSON.stringify(m)).to.have.length(1);
    expect(m.tool_calls[0].function.name).to.equal("get_weather");
    expectNoTags(j);
    // none: nothing is offered, and the call the model writes anyway is text.
    const none = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Weather in Paris?" }], tools: CHAT_TOOLS, tool_choice: "none", max_tokens: 200 }, script);
    const jn = (await none.json()) as Record<string, any>;
    expect(jn.choices[0].message.tool_calls ?? []).to.have.length(0);
    expect(jn.choices[0].message.content).to.equal('{"tz":"CET"}');
    expect(jn.choices[0].finish_reason).to.equal("stop");
    expectNoTags(jn);
  });
});
