// OpenAI Responses (src/dialects/openai-responses/): its wire schemas, request body and route.
import { MODEL_ID_PLACEHOLDER, ref, UNSUPPORTED_KEYWORD, unsupportedValues, nullable, json, ex, byType, variant, SAMPLING_FIELDS, COMMON_FIELDS, maxTokens, MAX_TOKENS, MAX_COMPLETION_TOKENS, TOP_LOGPROBS, STORE, TOOL_CHOICE_MODE, MEDIA_REFUSED, textOnlyPart, TOOL_NAME, TOOL_DESCRIPTION, TOOL_SCHEMA, EXAMPLE_CREATED, one, responses, sse, OPTIONAL_KEY, openaiGenerationResponses, requestBody } from "./shared.mjs";

export const schemas = {};

const RESPONSES_NAMED_TOOL_CHOICE = {
  type: "object",
  description: "A function or custom tool, by name (or, as Chat Completions writes it, by function.name).",
  required: ["type"],
  properties: {
    type: { type: "string", enum: ["function", "custom"] },
    name: { type: "string" },
    function: ref("ChatToolChoiceFunction"),
  },
  // The rule of an anyOf of the two required lists; if/else so that generators keep the
  // object's own properties instead of writing a type for the anyOf.
  if: { required: ["name"], properties: { name: { type: "string" } } },
  else: { required: ["function"], properties: { function: { type: "object" } } },
};
const RESPONSES_TOOL_CHOICE = {
  description: "auto (default), none, required, or a function / custom tool: {\"type\": \"function\", \"name\": ...}.",
  oneOf: [TOOL_CHOICE_MODE, ref("ResponsesNamedToolChoice"), { type: "null" }],
};

const RESPONSES_PART_TYPES = ["input_text", "output_text", "text", "reasoning_text", "summary_text", "refusal"];
const RESPONSES_MEDIA_PARTS = ["input_image", "input_file", "input_audio"];
// --- responses
const ITEM_STATUS = { type: "string", enum: ["in_progress", "completed", "incomplete"] };
schemas.ResponsesOutputTextPart = {
  type: "object",
  required: ["type", "text"],
  properties: { type: { type: "string", const: "output_text" }, text: { type: "string" }, annotations: { type: "array", items: { type: "object" }, description: "Always empty." } },
};
schemas.ResponsesReasoningTextPart = {
  type: "object",
  required: ["type", "text"],
  properties: { type: { type: "string", const: "reasoning_text" }, text: { type: "string" } },
};
schemas.ResponsesContentPart = {
  oneOf: [ref("ResponsesOutputTextPart"), ref("ResponsesReasoningTextPart")],
};
schemas.ResponsesMessageItem = {
  type: "object",
  required: ["type", "id", "status", "role", "content"],
  properties: {
    type: { type: "string", const: "message" },
    id: { type: "string" },
    status: ITEM_STATUS,
    role: { type: "string", const: "assistant" },
    content: { type: "array", items: ref("ResponsesOutputTextPart") },
  },
};
schemas.ResponsesReasoningItem = {
  type: "object",
  required: ["type", "id", "summary"],
  properties: {
    type: { type: "string", const: "reasoning" },
    id: { type: "string" },
    status: ITEM_STATUS,
    summary: { type: "array", items: { type: "object" }, maxItems: 0, description: "Always empty." },
    content: { type: "array", items: ref("ResponsesReasoningTextPart") },
  },
};
schemas.ResponsesFunctionCallItem = {
  type: "object",
  required: ["type", "id", "call_id", "name", "arguments"],
  properties: {
    type: { type: "string", const: "function_call" },
    id: { type: "string" },
    status: ITEM_STATUS,
    call_id: { type: "string", description: "Call id to answer with a function_call_output item." },
    name: { type: "string" },
    arguments: { type: "string", description: "JSON text." },
    namespace: { type: "string", description: "The namespace tool it came from." },
  },
};
schemas.ResponsesCustomToolCallItem = {
  type: "object",
  required: ["type", "id", "call_id", "name", "input"],
  properties: {
    type: { type: "string", const: "custom_tool_call" },
    id: { type: "string" },
    status: ITEM_STATUS,
    call_id: { type: "string", description: "Call id to answer with a custom_tool_call_output item." },
    name: { type: "string" },
    input: { type: "string", description: "Raw input." },
  },
};
schemas.ResponsesOutputItem = {
  description: "message, reasoning, function_call or custom_tool_call.",
  oneOf: [ref("ResponsesMessageItem"), ref("ResponsesReasoningItem"), ref("ResponsesFunctionCallItem"), ref("ResponsesCustomToolCallItem")],
};
schemas.ResponsesUsage = {
  type: "object",
  required: ["input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"],
  properties: {
    input_tokens: { type: "integer", minimum: 0 },
    input_tokens_details: { type: "object", required: ["cached_tokens"], properties: { cached_tokens: { type: "integer", minimum: 0 } } },
    output_tokens: { type: "integer", minimum: 0 },
    output_tokens_details: { type: "object", required: ["reasoning_tokens"], properties: { reasoning_tokens: { type: "integer", minimum: 0 } } },
    total_tokens: { type: "integer", minimum: 0 },
  },
};
schemas.ResponsesResponse = {
  type: "object",
  required: ["id", "object", "created_at", "status", "model", "output", "usage"],
  properties: {
    id: { type: "string", pattern: "^resp_" },
    object: { type: "string", const: "response" },
    created_at: { type: "integer", format: "int64", minimum: 0, description: "Unix seconds." },
    status: {
      type: "string",
      enum: ["in_progress", "completed", "incomplete", "failed"],
      description: "completed, or incomplete when max_output_tokens ran out; in_progress and failed only in stream events.",
    },
    model: { type: "string", description: "The model field of the request, else the model id." },
    output: { type: "array", items: ref("ResponsesOutputItem") },
    parallel_tool_calls: { type: "boolean" },
    tool_choice: { description: "The request's tool_choice (auto when it had none).", oneOf: [TOOL_CHOICE_MODE, ref("ResponsesNamedToolChoice")] },
    tools: { type: "array", items: { type: "object" } },
    usage: { oneOf: [ref("ResponsesUsage"), { type: "null" }], description: "null while in progress." },
    incomplete_details: {
      type: ["object", "null"],
      properties: { reason: { type: "string", enum: ["max_output_tokens", "content_filter"] } },
    },
    error: { type: ["object", "null"], properties: { code: { type: "string" }, message: { type: "string" } } },
  },
};

// One schema per Responses stream event (spec/responses-stream-events.txt), plus the custom
// tool input events and the error event this server also sends.
const SEQ = { type: "integer", minimum: 0, description: "0, 1, 2, ... in send order." };
const AT_ITEM = { item_id: { type: "string" }, output_index: { type: "integer", minimum: 0 } };
const AT_PART = { ...AT_ITEM, content_index: { type: "integer", minimum: 0 } };
const responseEvent = (type, required, properties) => ({
  type: "object",
  required: ["type", "sequence_number", ...required],
  properties: { type: { type: "string", const: type }, sequence_number: SEQ, ...properties },
});
const RESPONSE_EVENTS = [
  ["response.created", "ResponsesCreatedEvent", ["response"], { response: ref("ResponsesResponse") }],
  ["response.in_progress", "ResponsesInProgressEvent", ["response"], { response: ref("ResponsesResponse") }],
  ["response.completed", "ResponsesCompletedEvent", ["response"], { response: ref("ResponsesResponse") }],
  ["response.failed", "ResponsesFailedEvent", ["response"], { response: ref("ResponsesResponse") }],
  ["response.incomplete", "ResponsesIncompleteEvent", ["response"], { response: ref("ResponsesResponse") }],
  ["response.output_item.added", "ResponsesOutputItemAddedEvent", ["output_index", "item"], { output_index: AT_ITEM.output_index, item: ref("ResponsesOutputItem") }],
  ["response.output_item.done", "ResponsesOutputItemDoneEvent", ["output_index", "item"], { output_index: AT_ITEM.output_index, item: ref("ResponsesOutputItem") }],
  ["response.content_part.added", "ResponsesContentPartAddedEvent", ["item_id", "output_index", "content_index", "part"], { ...AT_PART, part: ref("ResponsesContentPart") }],
  ["response.content_part.done", "ResponsesContentPartDoneEvent", ["item_id", "output_index", "content_index", "part"], { ...AT_PART, part: ref("ResponsesContentPart") }],
  ["response.output_text.delta", "ResponsesOutputTextDeltaEvent", ["item_id", "output_index", "content_index", "delta"], { ...AT_PART, delta: { type: "string" } }],
  ["response.output_text.done", "ResponsesOutputTextDoneEvent", ["item_id", "output_index", "content_index", "text"], { ...AT_PART, text: { type: "string" } }],
  ["response.function_call_arguments.delta", "ResponsesFunctionCallArgumentsDeltaEvent", ["item_id", "output_index", "delta"], { ...AT_ITEM, delta: { type: "string" } }],
  [
    "response.function_call_arguments.done",
    "ResponsesFunctionCallArgumentsDoneEvent",
    ["item_id", "output_index", "arguments", "name"],
    { ...AT_ITEM, arguments: { type: "string" }, name: { type: "string" } },
  ],
  ["response.reasoning_text.delta", "ResponsesReasoningTextDeltaEvent", ["item_id", "output_index", "content_index", "delta"], { ...AT_PART, delta: { type: "string" } }],
  ["response.reasoning_text.done", "ResponsesReasoningTextDoneEvent", ["item_id", "output_index", "content_index", "text"], { ...AT_PART, text: { type: "string" } }],
  ["response.custom_tool_call_input.delta", "ResponsesCustomToolCallInputDeltaEvent", ["item_id", "output_index", "delta"], { ...AT_ITEM, delta: { type: "string" } }],
  ["response.custom_tool_call_input.done", "ResponsesCustomToolCallInputDoneEvent", ["item_id", "output_index", "input"], { ...AT_ITEM, input: { type: "string" } }],
  [
    "error",
    "ResponsesErrorEvent",
    ["code", "message"],
    { code: { type: ["string", "null"] }, message: { type: "string" }, param: { type: ["string", "null"] }, request_id: { type: "string", description: "The response id." } },
  ],
];
for (const [type, name, required, properties] of RESPONSE_EVENTS) schemas[name] = responseEvent(type, required, properties);
schemas.ResponsesStreamEvent = {
  description:
    "One event: + data: pair; type is the same as the SSE event name. An error after the stream started is sent as event error, then response.failed (the response with status failed and its error).",
  oneOf: RESPONSE_EVENTS.map(([, name]) => ref(name)),
};

// --- request bodies
export const requests = {};
requests.ResponsesInputPart = {
  ...textOnlyPart(RESPONSES_PART_TYPES, RESPONSES_MEDIA_PARTS, MEDIA_REFUSED, "A text part; input_image, input_file and input_audio parts are refused."),
  ...byType([["refusal", "ResponsesInputRefusalPart"]]),
};
requests.ResponsesInputRefusalPart = variant("refusal", "A refusal replayed from an earlier answer: its text.", [], { refusal: { description: "The refusal text (read when a string)." } });
requests.ResponsesInputPartList = { type: "array", description: "Text parts.", items: ref("ResponsesInputPart") };
const RESPONSES_PARTS = ref("ResponsesInputPartList");
const CALL_FIELDS = { call_id: { type: "string" }, name: { type: "string" }, namespace: { type: "string" } };
const OUTPUT = { output: { description: "Text, or text parts.", oneOf: [{ type: "string" }, RESPONSES_PARTS] } };
requests.ResponsesInputItem = {
  type: "object",
  description: "One input item: a message (type message, or no type with a role) or a tool call, tool output or reasoning item.",
  properties: {
    type: {
      type: "string",
      enum: [
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "reasoning",
        "item_reference",
      ],
      [UNSUPPORTED_KEYWORD]: { reason: "item_reference (this server stores no responses: send the item itself)", values: { const: "item_reference" } },
    },
    role: { type: "string", enum: ["system", "developer", "user", "assistant"] },
    content: {
      oneOf: [{ type: "string" }, RESPONSES_PARTS, { type: "null" }],
    },
    id: { type: "string" },
    call_id: { type: "string" },
  },
  // One case per type (the chain takes the first case whose type matches). An item of no case
  // that has no type is a message (EasyInputMessage) and needs a role: if/else rather than anyOf
  // of two required lists, as typescript-fetch drops the enums of such an object.
  ...byType(
    [
      ["function_call", "ResponsesInputFunctionCallItem"],
      ["custom_tool_call", "ResponsesInputCustomToolCallItem"],
      ["local_shell_call", "ResponsesInputLocalShellCallItem"],
      ["function_call_output", "ResponsesInputFunctionCallOutputItem"],
      ["custom_tool_call_output", "ResponsesInputCustomToolCallOutputItem"],
      ["local_shell_call_output", "ResponsesInputLocalShellCallOutputItem"],
      ["reasoning", "ResponsesInputReasoningItem"],
    ],
    { if: { required: ["type"], properties: { type: { type: "string" } } }, else: { required: ["role"], properties: { role: { type: "string" } } } },
  ),
};
requests.ResponsesInputFunctionCallItem = variant("function_call", "A function call replayed from an earlier answer.", ["call_id", "name"], { ...CALL_FIELDS, arguments: { type: "string" } });
requests.ResponsesInputCustomToolCallItem = variant("custom_tool_call", "A custom tool call replayed from an earlier answer.", ["call_id", "name"], { ...CALL_FIELDS, input: { type: "string" } });
requests.ResponsesInputLocalShellCallItem = variant("local_shell_call", "A local shell call replayed from an earlier answer (answered by local_shell_call_output).", [], {
  action: { description: "The shell action (any JSON), replayed as the call's arguments." },
});
requests.ResponsesInputFunctionCallOutputItem = variant("function_call_output", "The output of a function call.", [], OUTPUT);
requests.ResponsesInputCustomToolCallOutputItem = variant("custom_tool_call_output", "The output of a custom tool call.", [], OUTPUT);
requests.ResponsesInputLocalShellCallOutputItem = variant("local_shell_call_output", "The output of a local shell call.", [], OUTPUT);
requests.ResponsesInputReasoningItem = variant("reasoning", "Reasoning replayed from an earlier answer: its text (content) or summary.", [], { summary: { oneOf: [RESPONSES_PARTS, { type: "null" }] } });
// function and custom tools need a name; a namespace groups such tools; hosted tools (web_search,
// local_shell ...) are accepted and not offered.
const RESPONSES_TOOL_FIELDS = { type: { type: "string" }, name: TOOL_NAME, description: TOOL_DESCRIPTION };
const NAMED_TOOL = { name: TOOL_NAME, parameters: TOOL_SCHEMA };
const NAMED_TOOLS = [
  ["function", "ResponsesFunctionTool"],
  ["custom", "ResponsesCustomTool"],
];
requests.ResponsesTool = {
  type: "object",
  description: "A function, custom or namespace tool, or a hosted one (accepted, not offered).",
  required: ["type"],
  properties: {
    ...RESPONSES_TOOL_FIELDS,
    tools: { type: "array", description: "namespace: the function and custom tools it groups.", items: ref("ResponsesNamespaceMemberTool") },
  },
  ...byType([...NAMED_TOOLS, ["namespace", "ResponsesNamespaceTool"]]),
};
requests.ResponsesNamespaceMemberTool = {
  type: "object",
  description: "A tool of a namespace: a function or custom tool, or a hosted one (accepted, not offered).",
  required: ["type"],
  properties: RESPONSES_TOOL_FIELDS,
  ...byType(NAMED_TOOLS),
};
requests.ResponsesFunctionTool = variant("function", "A function tool: JSON arguments described by parameters.", ["name"], NAMED_TOOL);
requests.ResponsesCustomTool = variant("custom", "A custom tool: raw text input.", ["name"], NAMED_TOOL);
requests.ResponsesNamespaceTool = variant("namespace", "A namespace: the function and custom tools it groups, offered under its name.", ["name", "tools"], {
  name: TOOL_NAME,
  // items as the tool's own tools field has them: generators refuse an array without items.
  tools: { type: "array", items: ref("ResponsesNamespaceMemberTool") },
});
requests.ResponsesInputItemList = { type: "array", description: "Input items.", items: ref("ResponsesInputItem") };
requests.ResponsesNamedToolChoice = RESPONSES_NAMED_TOOL_CHOICE;
requests.ResponsesRequest = {
  type: "object",
  required: ["input"],
  properties: {
    model: COMMON_FIELDS.model,
    input: {
      description:
        "A string, or items: message (system, developer, user, assistant), function_call, function_call_output, custom_tool_call, custom_tool_call_output, local_shell_call, local_shell_call_output, reasoning. Text parts only: image, audio and file parts are refused with 400 (text-only model).",
      oneOf: [{ type: "string" }, ref("ResponsesInputItemList")],
    },
    instructions: { type: ["string", "null"], description: "System prompt." },
    tools: nullable({ type: "array", items: ref("ResponsesTool"), description: "function, custom and namespace tools." }),
    tool_choice: RESPONSES_TOOL_CHOICE,
    parallel_tool_calls: nullable({ type: "boolean", default: false, description: "Echoed in the response." }),
    reasoning: nullable({ type: "object", description: "Fields: effort.", properties: { effort: { type: ["string", "null"] }, summary: { type: ["string", "null"] } } }),
    stream: COMMON_FIELDS.stream,
    prompt_cache_key: COMMON_FIELDS.prompt_cache_key,
    store: STORE,
    client_metadata: nullable({ type: "object", description: "Accepted and ignored." }),
    include: nullable({
      type: "array",
      description: "Accepted and ignored, except an entry naming logprobs: 400 (log probabilities are not supported).",
      items: unsupportedValues({ type: "string" }, "log probabilities", { pattern: "logprobs" }),
    }),
    top_logprobs: TOP_LOGPROBS,
    text: nullable({
      type: "object",
      description: "Only format {\"type\": \"text\"}. Not supported: other formats (structured output), answered with 400.",
      properties: { format: { type: "object", required: ["type"], properties: { type: { type: "string", const: "text" } } }, verbosity: { type: ["string", "null"] } },
    }),
    max_output_tokens: maxTokens("Most new tokens; default: up to the end of the context (--ctx)."),
    max_tokens: MAX_TOKENS,
    max_completion_tokens: MAX_COMPLETION_TOKENS,
    ...SAMPLING_FIELDS,
  },
};

const EXAMPLES = {
  response: {
    id: "resp_9a0e6b3c",
    object: "response",
    created_at: EXAMPLE_CREATED,
    status: "completed",
    model: MODEL_ID_PLACEHOLDER,
    output: [{ type: "message", id: "msg_9a0e6b3c", status: "completed", role: "assistant", content: [{ type: "output_text", text: "Mercury, Venus and Earth.", annotations: [] }] }],
    parallel_tool_calls: false,
    tool_choice: "auto",
    tools: [],
    usage: { input_tokens: 14, input_tokens_details: { cached_tokens: 0 }, output_tokens: 8, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 22 },
    incomplete_details: null,
    error: null,
  },
  responseEvent: { type: "response.output_text.delta", sequence_number: 4, item_id: "msg_9a0e6b3c", output_index: 0, content_index: 0, delta: "Hi" },
};

export const paths = {
  "/v1/responses": {
    post: {
      operationId: "createResponse",
      summary: "Responses (OpenAI)",
      description: "OpenAI Responses with function, custom and namespace tools, reasoning and streaming, for Codex.",
      tags: ["responses"],
      security: OPTIONAL_KEY,
      requestBody: requestBody("ResponsesRequest", {
        basic: ex("A short answer", { model: MODEL_ID_PLACEHOLDER, input: "Name three planets.", max_output_tokens: 16 }),
        streamed: ex("Streamed items", {
          instructions: "Be brief.",
          input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "Say hi." }] }],
          stream: true,
          max_output_tokens: 8,
        }),
      }),
      responses: openaiGenerationResponses({
        ...json(ref("ResponsesResponse"), one("A short answer", EXAMPLES.response)),
        ...sse("ResponsesStreamEvent", "Server-sent events: event: + data: pairs.", { example: EXAMPLES.responseEvent }),
      }),
    },
  },
};
