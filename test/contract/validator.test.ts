import { expect } from "chai";
import { createResponseValidator, readOpenapiDocument } from "../../src/contract/validator.js";

const doc = readOpenapiDocument();
const v = createResponseValidator(doc);

const ok = (errors: string[]) => expect(errors, errors.join("\n")).to.deep.equal([]);
const bad = (errors: string[], mention: string) => {
  expect(errors).to.not.be.empty;
  expect(errors.join("\n")).to.include(mention);
};

const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7, prompt_tokens_details: { cached_tokens: 0 } };
const timings = { prompt_n: 5, prompt_ms: 1.5, prompt_per_second: 3333.3, predicted_n: 2, predicted_ms: 2, predicted_per_second: 500, cache_n: 0, queue_ms: 0.1 };
const chatCompletion = {
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1735722153,
  model: "smollm2-135m",
  choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop", logprobs: null }],
  usage,
  timings,
};
const message = {
  id: "msg_1",
  type: "message",
  role: "assistant",
  model: "smollm2-135m",
  content: [
    { type: "thinking", thinking: "hm", signature: "mashbox-local" },
    { type: "text", text: "Hi" },
    { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
  ],
  stop_reason: "tool_use",
  stop_sequence: null,
  usage: { input_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0, output_tokens: 2 },
};
const response = {
  id: "resp_1",
  object: "response",
  created_at: 1735722153,
  status: "completed",
  model: "smollm2-135m",
  output: [
    { id: "rs_1_0", type: "reasoning", status: "completed", summary: [], content: [{ type: "reasoning_text", text: "hm" }] },
    { id: "msg_1_1", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: "Hi" }] },
    { id: "fc_1_2", type: "function_call", status: "completed", call_id: "call_1", name: "f", arguments: "{}" },
    { id: "ctc_1_3", type: "custom_tool_call", status: "completed", call_id: "call_2", name: "apply_patch", input: "*** Begin Patch" },
  ],
  parallel_tool_calls: false,
  tool_choice: "auto",
  tools: [],
  usage: { input_tokens: 9, input_tokens_details: { cached_tokens: 0 }, output_tokens: 11, output_tokens_details: { reasoning_tokens: 1 }, total_tokens: 20 },
};

describe("contract: response validator", () => {
  it("health: 200 and 503 carry Health; status must be ok or loading", () => {
    ok(v.validateJson("getHealth", 200, { status: "ok", live_rows: 0, waiting: 0, worker_restarts: 0 }));
    ok(v.validateJson("getHealthShort", 503, { status: "loading", live_rows: null }));
    ok(v.validateJson("getRoot", 200, { status: "ok" }));
    bad(v.validateJson("getHealth", 200, { status: "ready" }), "/status");
    bad(v.validateJson("getHealth", 200, { waiting: 0 }), "status");
  });

  it("HEAD /v1/health has no body", () => {
    ok(v.validateJson("headHealth", 200, undefined));
    bad(v.validateJson("headHealth", 200, { status: "ok" }), "no JSON body");
  });

  it("models: ModelList and Model", () => {
    const model = { id: "smollm2-135m", object: "model", owned_by: "mashbox-labs", created: 0, max_model_len: 512, slots: 2 };
    ok(v.validateJson("listModels", 200, { object: "list", data: [model] }));
    ok(v.validateJson("getModel", 200, model));
    bad(v.validateJson("getModel", 200, { ...model, created: 1735722153 }), "/created");
    bad(v.validateJson("listModels", 200, { object: "list", data: [{ id: "x" }] }), "/data/0");
  });

  it("errors: OpenAI shape on OpenAI routes, Anthropic shape on /v1/messages*", () => {
    const openai = { error: { message: "temperature: must be between 0 and 4", type: "invalid_request_error", param: "temperature", code: "invalid_request" } };
    const anthropic = { type: "error", error: { type: "overloaded_error", message: "The model is still loading." } };
    ok(v.validateJson("createChatCompletion", 400, openai));
    ok(v.validateJson("getModel", 404, openai));
    ok(v.validateJson("createResponse", 503, openai));
    ok(v.validateJson("createMessage", 529, anthropic));
    ok(v.validateJson("countMessageTokens", 400, { type: "error", error: { type: "invalid_request_error", message: "x" } }));
    bad(v.validateJson("createChatCompletion", 400, anthropic), "error");
    bad(v.validateJson("createMessage", 400, openai), "type");
  });

  it("undocumented statuses are errors", () => {
    bad(v.validateJson("createMessage", 503, { type: "error", error: { type: "overloaded_error", message: "x" } }), "not documented");
    bad(v.validateJson("createChatCompletion", 529, { error: { message: "x", type: "y", param: null, code: "loading" } }), "not documented");
    bad(v.validateJson("getHealth", 201, { status: "ok" }), "not documented");
    expect(() => v.validateJson("noSuchOperation", 200, {})).to.throw(/noSuchOperation/);
  });

  it("chat: ChatCompletion", () => {
    ok(v.validateJson("createChatCompletion", 200, chatCompletion));
    const toolCall = { id: "call_1", type: "function", function: { name: "f", arguments: "{\"a\":1}" } };
    ok(
      v.validateJson("createChatCompletion", 200, {
        ...chatCompletion,
        choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [toolCall] }, finish_reason: "tool_calls" }],
      }),
    );
    bad(v.validateJson("createChatCompletion", 200, { ...chatCompletion, usage: undefined }), "usage");
    bad(v.validateJson("createChatCompletion", 200, { ...chatCompletion, choices: [{ ...chatCompletion.choices[0], finish_reason: "eos" }] }), "finish_reason");
    bad(v.validateJson("createChatCompletion", 200, { ...chatCompletion, timings: { prompt_n: 1 } }), "/timings");
  });

  it("chat stream: chunks, the usage chunk, [DONE] and the error payload", () => {
    const chunk = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] };
    ok(v.validateSseEvent("createChatCompletion", chunk));
    ok(v.validateSseEvent("createChatCompletion", JSON.stringify({ ...chunk, choices: [{ index: 0, delta: {}, finish_reason: "length" }], timings })));
    ok(v.validateSseEvent("createChatCompletion", { ...chunk, choices: [], usage, timings }));
    ok(v.validateSseEvent("createChatCompletion", { ...chunk, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "f", arguments: "" } }] }, finish_reason: null }] }));
    ok(v.validateSseEvent("createChatCompletion", "[DONE]"));
    ok(v.validateSseEvent("createChatCompletion", { error: { message: "device fault", type: "server_error", param: null, code: "engine_error" }, request_id: "chatcmpl-1" }));
    bad(v.validateSseEvent("createChatCompletion", { ...chunk, object: "chat.completion" }), "object");
    bad(v.validateSseEvent("createChatCompletion", "{not json"), "not JSON");
    bad(v.validateSseEvent("getHealth", {}), "does not stream");
  });

  it("completions: Completion, whole and streamed", () => {
    const completion = { id: "cmpl-1", object: "text_completion", created: 1, model: "m", choices: [{ index: 0, text: " Jupiter", finish_reason: "length", logprobs: null }] };
    ok(v.validateJson("createCompletion", 200, { ...completion, usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 }, system_fingerprint: "seed-42" }));
    ok(v.validateSseEvent("createCompletion", { ...completion, choices: [{ index: 0, text: "J", finish_reason: null }] }));
    ok(v.validateSseEvent("createCompletion", "[DONE]"));
    bad(v.validateJson("createCompletion", 200, { ...completion, id: "chatcmpl-1" }), "/id");
    bad(v.validateJson("createCompletion", 200, { ...completion, choices: [{ index: 0, finish_reason: "stop" }] }), "text");
  });

  it("messages: Message and TokenCount", () => {
    ok(v.validateJson("createMessage", 200, message));
    ok(v.validateJson("countMessageTokens", 200, { input_tokens: 12 }));
    bad(v.validateJson("createMessage", 200, { ...message, stop_reason: "stop" }), "stop_reason");
    bad(v.validateJson("createMessage", 200, { ...message, content: [{ type: "tool_use", id: "toolu_1", name: "f" }] }), "/content/0");
    bad(v.validateJson("countMessageTokens", 200, { tokens: 12 }), "input_tokens");
  });

  it("messages stream: every MessageStreamEvent, named as its type", () => {
    const events: Array<[string, unknown]> = [
      ["message_start", { type: "message_start", message: { ...message, content: [], stop_reason: null } }],
      ["ping", { type: "ping" }],
      ["content_block_start", { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } }],
      ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "hm" } }],
      ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "mashbox-local" } }],
      ["content_block_stop", { type: "content_block_stop", index: 0 }],
      ["content_block_start", { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_1", name: "f", input: {} } }],
      ["content_block_delta", { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "{\"a\":" } }],
      ["content_block_delta", { type: "content_block_delta", index: 2, delta: { type: "text_delta", text: "Hi" } }],
      ["message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { input_tokens: 5, output_tokens: 3 } }],
      ["message_stop", { type: "message_stop" }],
      ["error", { type: "error", error: { type: "api_error", message: "device fault" }, request_id: "msg_1" }],
    ];
    for (const [event, payload] of events) ok(v.validateSseEvent("createMessage", payload, event));
    bad(v.validateSseEvent("createMessage", { type: "ping" }, "message_stop"), "differs");
    bad(v.validateSseEvent("createMessage", { type: "content_block_delta", index: 0, delta: { type: "text_delta", thinking: "x" } }, "content_block_delta"), "/delta");
    bad(v.validateSseEvent("createMessage", { type: "message_delta", delta: { stop_reason: "end_turn" } }, "message_delta"), "usage");
    bad(v.validateSseEvent("createMessage", { type: "bogus" }), "/type");
  });

  it("responses: Response with every item kind", () => {
    ok(v.validateJson("createResponse", 200, response));
    ok(v.validateJson("createResponse", 200, { ...response, status: "incomplete", incomplete_details: { reason: "max_output_tokens" } }));
    bad(v.validateJson("createResponse", 200, { ...response, status: "done" }), "/status");
    bad(v.validateJson("createResponse", 200, { ...response, output: [{ id: "fc", type: "function_call", call_id: "c", name: "f" }] }), "/output/0");
    bad(v.validateJson("createResponse", 200, { ...response, usage: undefined }), "usage");
  });

  it("responses stream: one schema per event, discriminated by type", () => {
    const inProgress = { ...response, status: "in_progress", output: [], usage: null };
    const at = { item_id: "msg_1_1", output_index: 1 };
    const events: Array<[string, Record<string, unknown>]> = [
      ["response.created", { response: inProgress }],
      ["response.in_progress", { response: inProgress }],
      ["response.output_item.added", { output_index: 1, item: { id: "msg_1_1", type: "message", status: "in_progress", role: "assistant", content: [] } }],
      ["response.content_part.added", { ...at, content_index: 0, part: { type: "output_text", text: "" } }],
      ["response.output_text.delta", { ...at, content_index: 0, delta: "Hi" }],
      ["response.output_text.done", { ...at, content_index: 0, text: "Hi" }],
      ["response.content_part.done", { ...at, content_index: 0, part: { type: "reasoning_text", text: "hm" } }],
      ["response.output_item.done", { output_index: 1, item: response.output[1] }],
      ["response.reasoning_text.delta", { ...at, content_index: 0, delta: "h" }],
      ["response.reasoning_text.done", { ...at, content_index: 0, text: "hm" }],
      ["response.function_call_arguments.delta", { ...at, delta: "{" }],
      ["response.function_call_arguments.done", { ...at, arguments: "{}", name: "f" }],
      ["response.custom_tool_call_input.delta", { ...at, delta: "*** " }],
      ["response.custom_tool_call_input.done", { ...at, input: "*** Begin Patch" }],
      ["response.completed", { response }],
      ["response.incomplete", { response: { ...response, status: "incomplete", incomplete_details: { reason: "max_output_tokens" } } }],
      ["error", { code: "engine_error", message: "device fault", param: null, request_id: "resp_1" }],
      ["response.failed", { response: { ...response, status: "failed", usage: null, error: { code: "engine_error", message: "device fault" } } }],
    ];
    events.forEach(([type, fields], i) => ok(v.validateSseEvent("createResponse", { type, sequence_number: i, ...fields }, type)));
    bad(v.validateSseEvent("createResponse", { type: "response.output_text.delta", ...at, content_index: 0, delta: "x" }), "sequence_number");
    bad(v.validateSseEvent("createResponse", { type: "response.function_call_arguments.done", sequence_number: 3, ...at, arguments: "{}" }), "name");
    bad(v.validateSseEvent("createResponse", { type: "response.content_part.added", sequence_number: 3, ...at, content_index: 0, part: { type: "refusal" } }), "/part");
    bad(v.validateSseEvent("createResponse", { type: "response.reasoning_summary_text.delta", sequence_number: 3 }), "/type");
  });

  it("headers: Retry-After required on 429/503/529, x-should-retry checked when sent", () => {
    ok(v.validateHeaders("createChatCompletion", 429, { "retry-after": "3" }));
    ok(v.validateHeaders("createResponse", 503, { "Retry-After": 5 }));
    ok(v.validateHeaders("createMessage", 529, { "retry-after": "5", "x-should-retry": "true" }));
    ok(v.validateHeaders("countMessageTokens", 529, { "retry-after": "1" }));
    ok(v.validateHeaders("createChatCompletion", 200, {}));
    bad(v.validateHeaders("createChatCompletion", 503, {}), "Retry-After is required");
    bad(v.validateHeaders("createMessage", 529, { "x-should-retry": "true" }), "Retry-After is required");
    bad(v.validateHeaders("createMessage", 529, { "retry-after": "soon" }), "header Retry-After");
    bad(v.validateHeaders("createMessage", 529, { "retry-after": "5", "x-should-retry": "yes" }), "header x-should-retry");
  });

  it("metrics and the document itself", () => {
    ok(v.validateJson("getMetrics", 200, undefined));
    ok(v.validateJson("getOpenapi", 200, doc));
    bad(v.validateJson("getOpenapi", 200, { openapi: "3.0.3", info: {}, paths: {} }), "/openapi");
  });
});
