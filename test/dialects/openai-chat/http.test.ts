// The chat and completions handlers over real HTTP (server core, request validation, contract
// checks on every answer and SSE payload) with the openai SDK as the client, on a stub engine
// that plays the scripted text through the real prompt builder and output parser. It needs no
// native build; live.test.ts does the same against the real engine.
import { expect } from "chai";
import OpenAI from "openai";
import { HermesParser } from "../../../src/chat/parsers/hermes.js";
import { promptOpensThinking, renderChatPrompt } from "../../../src/chat/template.js";
import type { Engine, EngineStats, GenerationEvent, GenerationRequest, ModelInfo } from "../../../src/engine/types.js";
import { createApp, type MashboxApp } from "../../../src/server.js";
import { currentScript, scriptHeader, serveScripts } from "../../helpers/script.js";

const MODEL: ModelInfo = {
  id: "stub-model", path: "/dev/null", architecture: "llama", n_ctx: 4096, n_ctx_train: 4096, slots: 1, n_vocab: 100, file_bytes: 0, bpw: 0,
  chat_template: null, bos_token: null, eos_token: null,
};
/** In a scripted text, everything after this marker is replaced by an engine error. */
const FAIL = "\u0001FAIL";

class StubEngine implements Engine {
  readonly state = "ready" as const;
  readonly model = MODEL;
  last: GenerationRequest | null = null;
  async countTokens(input: GenerationRequest["input"]): Promise<number> {
    return this.prompt(input).length;
  }
  private prompt(input: GenerationRequest["input"]): string {
    return input.kind === "text" ? input.text : renderChatPrompt(input.chat, MODEL);
  }
  stats(): EngineStats {
    return { slots_total: 1, slots_in_use: 0, waiting: 0, kv_tokens_used: 0, kv_tokens_total: 0, prefix_lookups: 0, prefix_hit_tokens: 0, prefix_lookup_tokens: 0, worker_pid: null, worker_restarts: 0 };
  }
  async *submit(req: GenerationRequest): AsyncIterable<GenerationEvent> {
    this.last = req;
    const prompt = this.prompt(req.input);
    let text = currentScript() ?? "Hello from the stub.";
    const fail = text.indexOf(FAIL);
    if (fail >= 0) text = text.slice(0, fail);
    yield { type: "start", prompt_tokens: prompt.length, cached_tokens: 0 };
    let finish: "stop" | "stop_sequence" | "length" = "stop";
    let stop_sequence: string | null = null;
    for (const s of req.stop) {
      const at = text.indexOf(s);
      if (at >= 0) {
        text = text.slice(0, at);
        finish = "stop_sequence";
        stop_sequence = s;
      }
    }
    // One "token" = 3 characters.
    let pieces: string[] = text.match(/[\s\S]{1,3}/g) ?? [];
    if (req.max_tokens !== null && pieces.length > req.max_tokens) {
      pieces = pieces.slice(0, req.max_tokens);
      finish = "length";
    }
    const parser = req.input.kind === "chat" ? new HermesParser({ tools: req.input.chat.tools, starts_in_thinking: promptOpensThinking(prompt), new_call_id: (() => { let n = 0; return () => `stub${n++}`; })() }) : null;
    for (const p of pieces) {
      if (parser) yield* parser.push(p);
      else yield { type: "text", text: p };
    }
    if (parser) yield* parser.finish();
    if (fail >= 0) {
      yield { type: "error", code: "engine_error", message: "The request failed on the device." };
      return;
    }
    const reason = parser && parser.tool_calls > 0 && finish !== "length" ? "tool_calls" : finish;
    yield {
      type: "done", finish_reason: reason, stop_sequence,
      usage: { prompt_tokens: prompt.length, cached_tokens: 0, completion_tokens: pieces.length, reasoning_tokens: 0 },
      timings: { prompt_n: prompt.length, prompt_ms: 1, prompt_per_second: prompt.length * 1000, predicted_n: pieces.length, predicted_ms: 2, predicted_per_second: null, cache_n: 0, queue_ms: 0 },
    };
  }
}

const TOOLS = [{ type: "function" as const, function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
const CALL = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>';
const scripted = (text: string) => ({ headers: scriptHeader(text) });

describe("http: OpenAI chat + completions handlers (stub engine)", function () {
  let app: MashboxApp;
  let engine: StubEngine;
  let client: OpenAI;
  let url: string;

  before(async () => {
    engine = new StubEngine();
    app = createApp({ engine, model_id: "stub-model", port: 0, validate_responses: true, log: () => {} });
    const listening = await app.listen(0, "127.0.0.1");
    serveScripts(listening.server);
    url = listening.url;
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => app?.close());
  afterEach(() => {
    expect(app.contract_violations.splice(0)).to.deep.equal([]);
  });

  it("chat: non-streamed and streamed give the same answer", async () => {
    const r = await client.chat.completions.create({ model: "stub-model", messages: [{ role: "user", content: "Hi" }] });
    expect(r.model).to.equal("stub-model");
    expect(r.choices[0].message.content).to.equal("Hello from the stub.");
    expect(r.choices[0].finish_reason).to.equal("stop");
    const s = await client.chat.completions.create({ messages: [{ role: "user", content: "Hi" }], stream: true, stream_options: { include_usage: true } } as any);
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of s as any) {
      text += c.choices[0]?.delta?.content ?? "";
      if (c.usage) usage = c.usage;
    }
    expect(text).to.equal(r.choices[0].message.content);
    expect(usage).to.deep.equal(r.usage);
  });

  it("chat: two tool calls, parsed from the model's text, through the SDK stream helper too", async () => {
    const body = { messages: [{ role: "user", content: "Weather?" }], tools: TOOLS } as any;
    const r = await client.chat.completions.create(body, scripted(CALL));
    expect(r.choices[0].finish_reason).to.equal("tool_calls");
    expect(r.choices[0].message.content).to.equal("Sure.");
    const calls = r.choices[0].message.tool_calls as any[];
    expect(calls.map((c) => [c.type, c.function.name, JSON.parse(c.function.arguments)])).to.deep.equal([
      ["function", "get_weather", { city: "Paris" }],
      ["function", "get_weather", { city: "Rome" }],
    ]);
    expect(calls[0].id).to.match(/^call_/).and.not.equal(calls[1].id);
    const final = await client.chat.completions.stream(body, scripted(CALL)).finalChatCompletion();
    expect((final.choices[0].message.tool_calls as any[]).map((c) => JSON.parse(c.function.arguments))).to.deep.equal([{ city: "Paris" }, { city: "Rome" }]);
    expect(final.choices[0].message.content).to.equal("Sure.");
    expect(final.choices[0].finish_reason).to.equal("tool_calls");
  });

  it("chat: tool_choice none leaves the block as text; thinking goes to reasoning_content", async () => {
    const none = await client.chat.completions.create({ messages: [{ role: "user", content: "x" }], tools: TOOLS, tool_choice: "none" } as any, scripted(CALL));
    expect(none.choices[0].message.content).to.equal(CALL);
    const t = await client.chat.completions.create({ messages: [{ role: "user", content: "x" }] } as any, scripted("<think>\nhmm\n</think>\n\nYes."));
    expect((t.choices[0].message as any).reasoning_content).to.equal("hmm");
    expect(t.choices[0].message.content).to.equal("Yes.");
  });

  it("chat: stop sequence and max tokens", async () => {
    const s = await client.chat.completions.create({ messages: [{ role: "user", content: "x" }], stop: ["three"] } as any, scripted("one two three four"));
    expect(s.choices[0].message.content).to.equal("one two ");
    expect(s.choices[0].finish_reason).to.equal("stop");
    const m = await client.chat.completions.create({ messages: [{ role: "user", content: "x" }], max_completion_tokens: 2, max_tokens: 50 } as any, scripted("one two three four"));
    expect(m.choices[0].message.content).to.equal("one tw");
    expect(m.choices[0].finish_reason).to.equal("length");
  });

  it("chat: an engine error mid-stream ends the stream with an error payload the SDK raises", async () => {
    const s = await client.chat.completions.create({ messages: [{ role: "user", content: "x" }], stream: true } as any, scripted(`partial${FAIL}`));
    let text = "";
    const err = await (async () => {
      try {
        for await (const c of s as any) text += c.choices[0]?.delta?.content ?? "";
      } catch (e) {
        return e as Error;
      }
      return null;
    })();
    expect(text).to.equal("partial");
    expect(err).to.be.instanceOf(OpenAI.APIError);
    expect(err!.message).to.contain("failed on the device");
    // Raw wire: the error payload then [DONE].
    const raw = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...scriptHeader(`p${FAIL}`) },
      body: JSON.stringify({ messages: [{ role: "user", content: "x" }], stream: true }),
    });
    const frames = (await raw.text()).trim().split("\n\n");
    expect(frames[frames.length - 1]).to.equal("data: [DONE]");
    expect(JSON.parse(frames[frames.length - 2].slice(6)).error.code).to.equal("engine_error");
  });

  it("chat: 400 naming the field, 404 for another model", async () => {
    const e1: any = await client.chat.completions.create({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:," } }] }] } as any).catch((e) => e);
    expect(e1.status).to.equal(400);
    // Request validation may refuse the part before the dialect does; either way the field is named.
    expect(e1.param).to.match(/^messages\[0\]\.content/);
    const e2: any = await client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(e2.status).to.equal(404);
    expect(e2.code).to.equal("model_not_found");
  });

  it("completions: plain prompt, no template, streamed and not", async () => {
    const r = await client.completions.create({ model: "stub-model", prompt: "Once", max_tokens: 3 }, scripted("upon a time"));
    expect(engine.last!.input).to.deep.equal({ kind: "text", text: "Once" });
    expect(r.choices[0].text).to.equal("upon a ti");
    expect(r.choices[0].finish_reason).to.equal("length");
    expect(r.system_fingerprint).to.match(/^seed-/);
    const s = await client.completions.create({ prompt: ["Once"], stream: true } as any, scripted("upon a time"));
    let text = "";
    for await (const c of s as any) text += c.choices[0]?.text ?? "";
    expect(text).to.equal("upon a time");
  });
});
