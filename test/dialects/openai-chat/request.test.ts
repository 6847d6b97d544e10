import { expect } from "chai";
import { capturedRequests } from "../../clients/captured.js";
import { createResponseValidator, readOpenapiDocument } from "../../../src/contract/validator.js";
import { toInternal, type ChatCompletionRequest } from "../../../src/dialects/openai-chat/index.js";
import { ApiError } from "../../../src/errors.js";

const rc = { id: "chatcmpl-test" };
const req = (body: Record<string, unknown>) => toInternal({ messages: [{ role: "user", content: "Hi" }], ...body } as ChatCompletionRequest, rc);

function refused(body: Record<string, unknown>, code: string, param: string): void {
  try {
    req(body);
  } catch (e) {
    expect(e).to.be.instanceOf(ApiError);
    expect((e as ApiError).code).to.equal(code);
    expect((e as ApiError).param).to.equal(param);
    expect((e as ApiError).message).to.contain(param);
    return;
  }
  expect.fail(`accepted ${JSON.stringify(body)}`);
}

describe("openai-chat toInternal", () => {
  it("applies the spec defaults", () => {
    const r = req({});
    expect(r.sampling).to.deep.equal({ temperature: 0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 });
    expect(r.max_tokens).to.equal(null);
    expect(r.stop).to.deep.equal([]);
    expect(r.input).to.deep.equal({ kind: "chat", chat: { system: [], turns: [{ role: "user", content: "Hi" }], tools: [], tool_choice: { type: "auto" } } });
  });

  it("reads sampling, budget precedence and stop precedence; carries the tenant", () => {
    const r = req({ temperature: 0.7, top_p: 0.9, top_k: 40, min_p: 0.05, seed: 7, repetition_penalty: 1.1, frequency_penalty: 0.5, presence_penalty: -0.5, max_tokens: 10, max_completion_tokens: 20, stop: "END", stop_sequences: ["X"], prompt_cache_key: "s1" });
    expect(r.sampling).to.deep.equal({ temperature: 0.7, top_p: 0.9, top_k: 40, min_p: 0.05, repetition_penalty: 1.1, frequency_penalty: 0.5, presence_penalty: -0.5, seed: 7 });
    expect(r.max_tokens).to.equal(20);
    expect(r.stop).to.deep.equal(["END"]);
    expect(req({ max_tokens: 5 }).max_tokens).to.equal(5);
    expect(req({ stop_sequences: ["A", "B"] }).stop).to.deep.equal(["A", "B"]);
    expect(toInternal({ messages: [{ role: "user", content: "x" }] }, { id: "i", tenant: "t" })).to.include({ id: "i", tenant: "t" });
  });

  it("joins system and developer text, keeps text parts, replays tool calls, reasoning and results", () => {
    const r = req({
      messages: [
        { role: "system", content: "A" },
        { role: "developer", content: [{ type: "text", text: "B" }] },
        { role: "user", content: [{ type: "text", text: "Hi " }, { type: "text", text: "there" }] },
        { role: "assistant", content: null, reasoning_content: "think", tool_calls: [{ id: "call_9", type: "function", function: { name: "f", arguments: '{"a":1}' } }] },
        { role: "tool", tool_call_id: "call_9", content: "ok" },
      ],
      tools: [{ type: "function", function: { name: "f", description: "d", parameters: { type: "object", properties: { a: { type: "integer" } } } } }],
      tool_choice: { type: "function", function: { name: "f" } },
      chat_template_kwargs: { enable_thinking: false },
    });
    expect(r.input).to.deep.equal({
      kind: "chat",
      chat: {
        system: ["A", "B"],
        turns: [
          { role: "user", content: "Hi there" },
          { role: "assistant", content: "", thinking: "think", tool_calls: [{ id: "call_9", name: "f", arguments: '{"a":1}' }] },
          { role: "tool", tool_call_id: "call_9", name: "f", content: "ok" },
        ],
        tools: [{ name: "f", description: "d", parameters: { type: "object", properties: { a: { type: "integer" } } }, kind: "function" }],
        tool_choice: { type: "tool", name: "f" },
        enable_thinking: false,
      },
    });
  });

  it("maps tool_choice and enable_thinking", () => {
    const tools = [{ type: "function", function: { name: "f" } }];
    const choice = (tool_choice: unknown) => (req({ tools, tool_choice }).input as any).chat.tool_choice;
    expect(choice("none")).to.deep.equal({ type: "none" });
    expect((req({ tools, tool_choice: "none" }).input as any).chat.tools).to.deep.equal([]);
    expect(choice("required")).to.deep.equal({ type: "required" });
    expect(choice(undefined)).to.deep.equal({ type: "auto" });
    expect((req({ enable_thinking: true, chat_template_kwargs: { enable_thinking: false } }).input as any).chat.enable_thinking).to.equal(true);
  });

  it("refuses what it cannot do, naming the field", () => {
    refused({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, "unsupported_field", "messages[0].content[0]");
    refused({ messages: [{ role: "user", content: [{ type: "input_audio", input_audio: {} }] }] }, "unsupported_field", "messages[0].content[0]");
    refused({ logprobs: true }, "unsupported_field", "logprobs");
    refused({ top_logprobs: 2 }, "unsupported_field", "top_logprobs");
    refused({ response_format: { type: "json_object" } }, "unsupported_field", "response_format");
    refused({ n: 2 }, "invalid_request", "n");
    refused({ temperature: 5 }, "invalid_request", "temperature");
    refused({ top_p: 0 }, "invalid_request", "top_p");
    refused({ max_tokens: 0 }, "invalid_request", "max_tokens");
    refused({ stop: ["ok", ""] }, "invalid_request", "stop[1]");
    refused({ tool_choice: { type: "function", function: { name: "g" } }, tools: [{ type: "function", function: { name: "f" } }] }, "invalid_request", "tool_choice.function.name");
    refused({ tool_choice: "required" }, "invalid_request", "tool_choice");
    refused({ messages: [{ role: "tool", content: "x" }] }, "invalid_request", "messages[0].tool_call_id");
  });

  describe("captured client requests", () => {
    const validator = createResponseValidator(readOpenapiDocument());
    const captured = capturedRequests((r) => r.path.split("?")[0] === "/v1/chat/completions" && r.body !== null);
    it("found some", () => expect(captured.length).to.be.greaterThan(10));
    for (const c of captured) {
      it(c.where, () => {
        expect(validator.validateRequest("createChatCompletion", c.body)).to.deep.equal([]);
        const r = toInternal(c.body as ChatCompletionRequest, rc);
        expect(r.input.kind).to.equal("chat");
        const chat = (r.input as any).chat;
        const msgs = c.body!.messages as any[];
        expect(chat.turns.length).to.equal(msgs.filter((m) => m.role !== "system" && m.role !== "developer").length);
        expect(chat.system.length).to.equal(msgs.filter((m) => m.role === "system" || m.role === "developer").length);
        expect(chat.tools.map((t: any) => t.name)).to.deep.equal((c.body!.tools ?? []).map((t: any) => t.function.name));
        expect(r.max_tokens).to.equal(c.body!.max_completion_tokens ?? c.body!.max_tokens ?? null);
        // Every replayed call keeps its id, and every tool result finds its call's name.
        for (const t of chat.turns) if (t.role === "tool") expect(t.name, t.tool_call_id).to.be.a("string");
      });
    }
  });
});
