import { expect } from "chai";
import { ApiError } from "../../../src/errors.js";
import { toInternal, type ResponsesRequest } from "../../../src/dialects/openai-responses/index.js";
import type { ChatPrompt } from "../../../src/engine/types.js";
import { capturedRequests } from "../../clients/captured.js";

const ctx = { id: "req-1" };

function chat(body: unknown): ChatPrompt {
  const req = toInternal(body as ResponsesRequest, ctx);
  if (req.input.kind !== "chat") return expect.fail("not a chat request");
  return req.input.chat;
}

function rejects(body: unknown, param: string, code = "invalid_request"): void {
  try {
    toInternal(body as ResponsesRequest, ctx);
  } catch (e) {
    expect(e).to.be.instanceOf(ApiError);
    const err = e as ApiError;
    expect(err.param, err.message).to.equal(param);
    expect(err.code).to.equal(code);
    expect(err.status("openai")).to.equal(400);
    return;
  }
  expect.fail(`accepted a request that should name ${param}`);
}

describe("openai-responses toInternal", () => {
  describe("every captured client request is accepted", () => {
    const captured = capturedRequests((r) => r.path === "/v1/responses");
    it("finds the captured Codex, Pi and SDK requests", () => {
      expect(captured.length).to.be.greaterThan(40);
      for (const stem of ["requests-codex", "requests-pi-responses", "requests-sdk", "tool/", "think/"]) {
        expect(captured.some((r) => r.file.includes(stem)), stem).to.equal(true);
      }
    });
    for (const r of captured) {
      it(r.where, () => {
        const body = r.body as ResponsesRequest;
        const prompt = chat(body);
        const items = typeof body.input === "string" ? [{ role: "user" }] : body.input;
        const systemItems = items.filter((i: any) => i.role === "system" || i.role === "developer").length;
        expect(prompt.system.length).to.equal(systemItems + (body.instructions ? 1 : 0));
        // function and namespaced function tools are offered; hosted tools (web_search) are not.
        const expected = (body.tools ?? []).flatMap((t: any) => (t.type === "namespace" ? t.tools : [t])).filter((t: any) => t.type === "function" || t.type === "custom");
        expect(prompt.tools.map((t) => t.name)).to.deep.equal(expected.map((t: any) => t.name));
        for (const ns of (body.tools ?? []).filter((t: any) => t.type === "namespace")) {
          for (const inner of ns.tools ?? []) expect(prompt.tools.find((t) => t.name === inner.name)?.namespace).to.equal(ns.name);
        }
        const calls = prompt.turns.flatMap((t) => (t.role === "assistant" ? (t.tool_calls ?? []) : []));
        expect(calls.length).to.equal(items.filter((i: any) => i.type === "function_call").length);
        for (const call of calls) {
          const answer = prompt.turns.find((t) => t.role === "tool" && t.tool_call_id === call.id);
          expect((answer as { name?: string } | undefined)?.name, call.id).to.equal(call.name);
        }
        // A reasoning item's summary is replayed as the thinking of the assistant turn after it.
        if (items.some((i: any) => i.type === "reasoning")) {
          expect(prompt.turns.some((t) => t.role === "assistant" && t.thinking === "The user wants a greeting.")).to.equal(true);
        }
      });
    }
  });

  it("turns a string input into one user turn and instructions into system text", () => {
    const prompt = chat({ input: "hi", instructions: "Be brief." });
    expect(prompt.system).to.deep.equal(["Be brief."]);
    expect(prompt.turns).to.deep.equal([{ role: "user", content: "hi" }]);
    expect(prompt.tool_choice).to.deep.equal({ type: "auto" });
  });

  it("replays messages, reasoning, function / custom / local shell calls and their outputs", () => {
    const prompt = chat({
      input: [
        { type: "message", role: "developer", content: [{ type: "input_text", text: "dev" }] },
        { role: "user", content: "go", id: "msg_u" },
        { type: "reasoning", id: "rs_1", summary: [{ type: "summary_text", text: "sum" }], content: [{ type: "reasoning_text", text: "full" }] },
        { type: "message", role: "assistant", id: "msg_a", content: [{ type: "output_text", text: "on it" }] },
        { type: "function_call", id: "fc_1", call_id: "call_1", name: "exec", arguments: '{"cmd":"ls"}' },
        { type: "custom_tool_call", id: "ctc_1", call_id: "call_2", name: "apply_patch", input: "*** Begin Patch" },
        { type: "function_call_output", call_id: "call_1", output: "a.txt" },
        { type: "custom_tool_call_output", call_id: "call_2", output: [{ type: "input_text", text: "done" }] },
        { type: "local_shell_call", id: "lsh_1", call_id: "call_3", action: { type: "exec", command: ["ls"] }, status: "completed" },
        { type: "local_shell_call_output", id: "call_3", output: "b.txt" },
      ],
    });
    expect(prompt.system).to.deep.equal(["dev"]);
    expect(prompt.turns).to.deep.equal([
      { role: "user", content: "go" },
      {
        role: "assistant",
        content: "on it",
        thinking: "full",
        tool_calls: [
          { id: "call_1", name: "exec", arguments: '{"cmd":"ls"}' },
          { id: "call_2", name: "apply_patch", arguments: "*** Begin Patch" },
        ],
      },
      { role: "tool", tool_call_id: "call_1", name: "exec", content: "a.txt" },
      { role: "tool", tool_call_id: "call_2", name: "apply_patch", content: "done" },
      { role: "assistant", content: "", tool_calls: [{ id: "call_3", name: "local_shell", arguments: '{"type":"exec","command":["ls"]}' }] },
      { role: "tool", tool_call_id: "call_3", name: "local_shell", content: "b.txt" },
    ]);
  });

  it("offers function, custom and namespaced tools; accepts hosted tools without offering them", () => {
    const prompt = chat({
      input: "x",
      tools: [
        { type: "function", name: "f", parameters: { type: "object" } },
        { type: "custom", name: "c", description: "raw" },
        { type: "namespace", name: "ns", tools: [{ type: "function", name: "g", parameters: { type: "object" } }] },
        { type: "web_search" },
        { type: "local_shell" },
      ],
    });
    expect(prompt.tools).to.deep.equal([
      { name: "f", parameters: { type: "object" }, kind: "function" },
      { name: "c", description: "raw", kind: "custom" },
      { name: "g", parameters: { type: "object" }, kind: "function", namespace: "ns" },
    ]);
  });

  it("maps tool_choice strings and named choices", () => {
    const tools = [{ type: "function", name: "f", parameters: {} }];
    expect(chat({ input: "x", tools, tool_choice: "none" }).tool_choice).to.deep.equal({ type: "none" });
    expect(chat({ input: "x", tools, tool_choice: "required" }).tool_choice).to.deep.equal({ type: "required" });
    expect(chat({ input: "x", tools, tool_choice: { type: "function", name: "f" } }).tool_choice).to.deep.equal({ type: "tool", name: "f" });
    expect(chat({ input: "x", tools, tool_choice: { type: "function", function: { name: "f" } } }).tool_choice).to.deep.equal({ type: "tool", name: "f" });
    rejects({ input: "x", tools, tool_choice: { type: "function", name: "g" } }, "tool_choice.name");
  });

  it("maps reasoning.effort onto enable_thinking", () => {
    expect(chat({ input: "x" }).enable_thinking).to.equal(undefined);
    expect(chat({ input: "x", reasoning: { summary: "auto" } }).enable_thinking).to.equal(undefined);
    expect(chat({ input: "x", reasoning: { effort: "high" } }).enable_thinking).to.equal(true);
    expect(chat({ input: "x", reasoning: { effort: "none" } }).enable_thinking).to.equal(false);
  });

  it("refuses structured output, logprobs and media parts with 400 naming the field", () => {
    rejects({ input: "x", text: { format: { type: "json_schema" } } }, "text.format", "unsupported_field");
    rejects({ input: "x", include: ["reasoning.encrypted_content", "message.output_text.logprobs"] }, "include[1]", "unsupported_field");
    rejects({ input: "x", top_logprobs: 2 }, "top_logprobs", "unsupported_field");
    rejects({ input: [{ role: "user", content: [{ type: "input_image", image_url: "data:" }] }] }, "input[0].content[0]", "unsupported_field");
    rejects({ input: [{ type: "item_reference", id: "msg_1" }] }, "input[0]", "unsupported_field");
    expect(() => toInternal({ input: "x", text: { format: { type: "text" } }, include: ["reasoning.encrypted_content"] }, ctx)).to.not.throw();
  });

  it("takes max_output_tokens first, then max_completion_tokens, then max_tokens", () => {
    expect(toInternal({ input: "x" }, ctx).max_tokens).to.equal(null);
    expect(toInternal({ input: "x", max_tokens: 9 }, ctx).max_tokens).to.equal(9);
    expect(toInternal({ input: "x", max_tokens: 9, max_completion_tokens: 8 }, ctx).max_tokens).to.equal(8);
    expect(toInternal({ input: "x", max_tokens: 9, max_completion_tokens: 8, max_output_tokens: 7 }, ctx).max_tokens).to.equal(7);
  });
});
