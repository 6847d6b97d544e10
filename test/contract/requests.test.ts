import { expect } from "chai";
import { createResponseValidator, readOpenapiDocument } from "../../src/contract/validator.js";
import { operations, type OperationId } from "../../src/generated/operations.js";
import { capturedRequests } from "../clients/captured.js";

const v = createResponseValidator(readOpenapiDocument());

function operationOf(method: string, path: string): OperationId | undefined {
  return (Object.keys(operations) as OperationId[]).find((id) => operations[id].method === method && operations[id].path === path);
}

const accepted = (op: OperationId, body: unknown) => {
  const errors = v.validateRequest(op, body);
  expect(errors, errors.join("\n")).to.deep.equal([]);
};
/** Refused, and the error names the field (a JSON pointer into the body). */
const refused = (op: OperationId, body: unknown, pointer: string) => {
  const errors = v.validateRequest(op, body);
  expect(errors, `${op} accepted ${JSON.stringify(body)}`).to.not.be.empty;
  expect(errors.join("\n")).to.include(pointer);
};

const chat = { messages: [{ role: "user", content: "hi" }] };
const completion = { prompt: "Once" };
const messages = { max_tokens: 8, messages: [{ role: "user", content: "hi" }] };
const responses = { input: "hi" };
const generating: Array<[OperationId, Record<string, unknown>]> = [
  ["createChatCompletion", chat],
  ["createCompletion", completion],
  ["createMessage", messages],
  ["createResponse", responses],
];

describe("contract: request schemas", () => {
  describe("every captured client request validates against its operation", () => {
    const all = capturedRequests();
    it("found captured requests for every generating route", () => {
      const ops = new Set(all.map((r) => operationOf(r.method, r.path)));
      for (const op of ["createChatCompletion", "createMessage", "countMessageTokens", "createResponse", "listModels"] as const) expect(ops).to.include(op);
    });
    for (const r of all) {
      it(`${r.where} ${r.method} ${r.url}`, () => {
        const op = operationOf(r.method, r.path);
        expect(op, `no operation for ${r.method} ${r.path}`).to.be.a("string");
        accepted(op!, r.method === "GET" ? undefined : r.body);
      });
    }
  });

  it("accepts fields no route lists (the spec ignores them)", () => {
    for (const [op, body] of generating) accepted(op, { ...body, frobnicate: { deep: [1, 2] }, user: "u1" });
  });

  it("accepts null for optional sampling fields, as OpenAI clients send them", () => {
    for (const [op, body] of generating) accepted(op, { ...body, temperature: null, top_p: null, stop: null, seed: null, n: null, max_tokens: null });
  });

  it("sampling bounds, on every generating route", () => {
    for (const [op, body] of generating) {
      accepted(op, { ...body, temperature: 4, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 0.01, frequency_penalty: -2, presence_penalty: 2, n: 1, seed: 7, stop: ["\n"] });
      refused(op, { ...body, temperature: 4.01 }, "/temperature");
      refused(op, { ...body, temperature: -0.1 }, "/temperature");
      refused(op, { ...body, top_p: 0 }, "/top_p");
      refused(op, { ...body, top_p: 1.5 }, "/top_p");
      refused(op, { ...body, top_k: -1 }, "/top_k");
      refused(op, { ...body, top_k: 1.5 }, "/top_k");
      refused(op, { ...body, min_p: 1 }, "/min_p");
      refused(op, { ...body, repetition_penalty: 0 }, "/repetition_penalty");
      refused(op, { ...body, frequency_penalty: 2.5 }, "/frequency_penalty");
      refused(op, { ...body, presence_penalty: -3 }, "/presence_penalty");
      refused(op, { ...body, n: 2 }, "/n");
      refused(op, { ...body, max_tokens: 0 }, "/max_tokens");
      refused(op, { ...body, max_completion_tokens: 0 }, "/max_completion_tokens");
      refused(op, { ...body, seed: 1.5 }, "/seed");
      refused(op, { ...body, stop: [""] }, "/stop");
      refused(op, { ...body, stop: "" }, "/stop");
      refused(op, { ...body, stop: 3 }, "/stop");
      refused(op, { ...body, stop_sequences: ["a", ""] }, "/stop_sequences/1");
      refused(op, { ...body, stream: "yes" }, "/stream");
    }
    refused("createResponse", { ...responses, max_output_tokens: 0 }, "/max_output_tokens");
  });

  it("required fields", () => {
    refused("createChatCompletion", {}, "messages");
    refused("createCompletion", {}, "prompt");
    refused("createMessage", { max_tokens: 8 }, "messages");
    refused("countMessageTokens", {}, "messages");
    refused("createResponse", {}, "input");
    refused("createCompletion", { prompt: ["a", "b"] }, "/prompt");
    refused("createCompletion", { prompt: "" }, "/prompt");
    refused("createChatCompletion", { messages: [{ role: "tool", content: "42" }] }, "tool_call_id");
    accepted("createChatCompletion", { messages: [{ role: "tool", content: "42", tool_call_id: "call_1" }] });
    refused("createResponse", { input: [{ type: "item_reference", id: "x" }] }, "/input/0/type");
    refused("createResponse", { input: [{ content: "hi" }] }, "/input/0");
    refused("createResponse", { input: "hi", tool_choice: { type: "web_search" } }, "/tool_choice");
    refused("createChatCompletion", { ...chat, tool_choice: { type: "function" } }, "/tool_choice");
    refused("createChatCompletion", { ...chat, seed: 2 ** 60 }, "/seed");
  });

  it("refuses the unsupported fields by name", () => {
    refused("createChatCompletion", { ...chat, logprobs: true }, "/logprobs");
    accepted("createChatCompletion", { ...chat, logprobs: false });
    refused("createChatCompletion", { ...chat, top_logprobs: 2 }, "/top_logprobs");
    refused("createChatCompletion", { ...chat, response_format: { type: "json_object" } }, "/response_format/type");
    accepted("createChatCompletion", { ...chat, response_format: { type: "text" } });
    refused("createCompletion", { ...completion, logprobs: 3 }, "/logprobs");
    refused("createCompletion", { ...completion, logprobs: true }, "/logprobs");
    accepted("createCompletion", { ...completion, logprobs: 0 });
    refused("createResponse", { ...responses, top_logprobs: 1 }, "/top_logprobs");
    refused("createResponse", { ...responses, text: { format: { type: "json_schema", name: "x", schema: {} } } }, "/text/format/type");
    accepted("createResponse", { ...responses, text: { format: { type: "text" } } });
    refused("createResponse", { ...responses, include: ["reasoning.encrypted_content", "message.output_text.logprobs"] }, "/include/1");
    accepted("createResponse", { ...responses, include: ["reasoning.encrypted_content"] });
    refused("createMessage", { ...messages, output_config: { format: { type: "json_schema", schema: {} } } }, "/output_config/format");
    accepted("createMessage", { ...messages, output_config: { effort: "high" } });
  });

  it("refuses media parts (text-only model)", () => {
    refused("createChatCompletion", { messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "image_url", image_url: { url: "x" } }] }] }, "/messages/0/content/1/type");
    refused("createChatCompletion", { messages: [{ role: "user", content: [{ type: "input_audio", input_audio: {} }] }] }, "/messages/0/content/0/type");
    refused("createResponse", { input: [{ role: "user", content: [{ type: "input_image", image_url: "x" }] }] }, "/input/0/content/0/type");
    refused("createResponse", { input: [{ type: "message", role: "user", content: [{ type: "input_file", file_id: "f" }] }] }, "/input/0/content/0/type");
    refused("createMessage", { max_tokens: 8, messages: [{ role: "user", content: [{ type: "image", source: {} }] }] }, "/messages/0/content/0/type");
    refused("countMessageTokens", { messages: [{ role: "user", content: [{ type: "document", source: {} }] }] }, "/messages/0/content/0/type");
  });

  it("per-type fields of blocks, input items and tools (each type's variant)", () => {
    const call = { type: "function_call", call_id: "call_1", name: "f" };
    accepted("createResponse", { input: [{ ...call, arguments: "{}" }, { type: "function_call_output", call_id: "call_1", output: "ok" }] });
    refused("createResponse", { input: [{ ...call, arguments: { a: 1 } }] }, "/input/0/arguments");
    refused("createResponse", { input: [{ type: "custom_tool_call", call_id: "c", name: "g", input: 5 }] }, "/input/0/input");
    refused("createResponse", { input: [{ type: "custom_tool_call", call_id: "c" }] }, "/input/0");
    refused("createResponse", { input: [{ type: "function_call_output", call_id: "call_1", output: [{ type: "input_image" }] }] }, "/input/0/output/0/type");
    refused("createResponse", { input: [{ type: "reasoning", summary: "thought" }] }, "/input/0/summary");
    accepted("createResponse", { input: [{ type: "local_shell_call", call_id: "s", action: { command: ["ls"] } }, { role: "assistant", content: [{ type: "refusal", refusal: "no" }] }] });
    refused("createResponse", { input: "hi", tools: [{ type: "namespace", name: "ns" }] }, "/tools/0");
    refused("createResponse", { input: "hi", tools: [{ type: "namespace", name: "ns", tools: [{ type: "function", name: "" }] }] }, "/tools/0/tools/0/name");
    accepted("createResponse", { input: "hi", tools: [{ type: "namespace", name: "ns", tools: [{ type: "function", name: "f" }, { type: "web_search" }] }, { type: "web_search" }] });
    const user = (content: unknown) => ({ max_tokens: 8, messages: [{ role: "user", content }] });
    refused("createMessage", user([{ type: "tool_use", name: "f", input: {} }]), "/messages/0/content/0");
    refused("createMessage", user([{ type: "tool_result", tool_use_id: "t", content: [{ type: "text" }] }]), "/messages/0/content/0/content/0");
    refused("createMessage", user([{ type: "tool_result", tool_use_id: "t", is_error: "yes" }]), "/messages/0/content/0/is_error");
    refused("countMessageTokens", { messages: [{ role: "assistant", content: [{ type: "thinking", thinking: 1 }] }] }, "/messages/0/content/0/thinking");
    refused("createMessage", { ...messages, system: [{ type: "text" }] }, "/system/0");
    accepted("createMessage", { ...messages, thinking: { type: "enabled", budget_tokens: 64, display: "omitted" }, messages: [{ role: "assistant", content: [{ type: "text" }, { type: "redacted_thinking", data: "x" }] }] });
  });

  it("the examples in openapi.json validate against their own request schemas", () => {
    const doc = readOpenapiDocument();
    let n = 0;
    for (const [op, info] of Object.entries(operations)) {
      if (!info.request_schema) continue;
      const media = doc.paths[info.path][info.method.toLowerCase()].requestBody.content["application/json"];
      for (const example of Object.values<{ value: unknown }>(media.examples ?? {})) {
        accepted(op as OperationId, example.value);
        n++;
      }
    }
    expect(n).to.be.at.least(5);
  });
});
