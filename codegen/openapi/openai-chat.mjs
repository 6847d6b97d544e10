// OpenAI Chat Completions (src/dialects/openai-chat/): its wire schemas, request body and route.
import { MODEL_ID_PLACEHOLDER, ref, unsupportedValues, nullable, json, ex, byType, SAMPLING_FIELDS, COMMON_FIELDS, maxTokens, MAX_TOKENS, NOT_SUPPORTED_LOGPROBS, TOP_LOGPROBS, MERGE, STORE, TOOL_CHOICE_MODE, TOOL_CHOICE_FUNCTION, MEDIA_REFUSED, textOnlyPart, TEXT_REQUIRED, TOOL_NAME, TOOL_DESCRIPTION, TOOL_SCHEMA, CHAT_FINISH, LOGPROBS_OUT, EXAMPLE_CREATED, EXAMPLE_TIMINGS, one, sse, OPTIONAL_KEY, openaiGenerationResponses, requestBody, openaiEnvelope } from "./shared.mjs";

export const schemas = {};

const CHAT_NAMED_TOOL_CHOICE = {
  type: "object",
  required: ["type", "function"],
  properties: {
    type: { type: "string", const: "function" },
    function: ref("ChatToolChoiceFunction"),
  },
};
const CHAT_TOOL_CHOICE = {
  description: "auto (default), none, required, or {\"type\": \"function\", \"function\": {\"name\": ...}}.",
  oneOf: [TOOL_CHOICE_MODE, ref("ChatNamedToolChoice"), { type: "null" }],
};

const CHAT_PART_TYPES = ["text", "input_text"];
const CHAT_MEDIA_PARTS = ["image_url", "input_image", "input_audio", "audio", "file", "input_file", "image"];
// --- chat completions
const CHAT_TOOL_CALL = {
  type: "object",
  required: ["id", "type", "function"],
  properties: {
    id: { type: "string" },
    type: { type: "string", const: "function" },
    function: { type: "object", required: ["name", "arguments"], properties: { name: { type: "string" }, arguments: { type: "string", description: "JSON text." } } },
  },
};
schemas.ChatMessage = {
  type: "object",
  required: ["role"],
  properties: {
    role: { type: "string", enum: ["system", "developer", "user", "assistant", "tool"], description: "system and developer join the system prompt." },
    content: {
      description: "Text, or a list of text parts. Text parts only: image, audio and file parts are refused with 400 (text-only model).",
      oneOf: [{ type: "string" }, ref("ChatContentPartList"), { type: "null" }],
    },
    tool_calls: nullable({
      type: "array",
      description: "assistant: the calls it made.",
      items: { type: "object", properties: { id: { type: "string" }, type: { type: "string" }, function: { type: "object" } } },
    }),
    tool_call_id: { type: "string", description: "tool: the call this answers." },
    reasoning_content: { type: ["string", "null"], description: "assistant: its earlier thinking." },
    name: { type: "string", description: "Accepted and ignored." },
  },
  if: { required: ["role"], properties: { role: { const: "tool" } } },
  then: { required: ["tool_call_id"], properties: { tool_call_id: { type: "string" } } },
};
schemas.ChatContentPart = {
  ...textOnlyPart(CHAT_PART_TYPES, CHAT_MEDIA_PARTS, MEDIA_REFUSED, "A text part; image_url, input_audio and file parts are refused."),
  ...byType([[CHAT_PART_TYPES, TEXT_REQUIRED]]),
};
schemas.ChatContentPartList = { type: "array", description: "Text parts.", items: ref("ChatContentPart") };
schemas.ChatToolChoiceFunction = TOOL_CHOICE_FUNCTION;
schemas.ChatNamedToolChoice = CHAT_NAMED_TOOL_CHOICE;
schemas.ChatTool = {
  type: "object",
  description: "A function tool: its name, description and parameters (JSON Schema).",
  required: ["type", "function"],
  properties: {
    type: { type: "string", const: "function" },
    function: {
      type: "object",
      required: ["name"],
      properties: { name: TOOL_NAME, description: TOOL_DESCRIPTION, parameters: TOOL_SCHEMA },
    },
  },
};
schemas.ChatUsage = {
  type: "object",
  required: ["prompt_tokens", "completion_tokens", "total_tokens"],
  properties: {
    prompt_tokens: { type: "integer", minimum: 0 },
    completion_tokens: { type: "integer", minimum: 0 },
    total_tokens: { type: "integer", minimum: 0 },
    prompt_tokens_details: { type: "object", properties: { cached_tokens: { type: "integer", minimum: 0 } } },
  },
};
schemas.MashboxTimings = {
  type: "object",
  description: "Server timings, the fields of llama-server's timings block.",
  required: ["prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n", "queue_ms"],
  properties: {
    prompt_n: { type: "integer", minimum: 0, description: "Prompt tokens prefilled (not served from the prefix cache)." },
    prompt_ms: { type: "number", minimum: 0, description: "Milliseconds from the start of the run to the first new token." },
    prompt_per_second: { type: ["number", "null"], description: "prompt_n per second of prompt_ms." },
    predicted_n: { type: "integer", minimum: 0, description: "New tokens." },
    predicted_ms: { type: "number", minimum: 0, description: "Milliseconds from the first to the last new token." },
    predicted_per_second: { type: ["number", "null"], description: "New tokens after the first, per second of predicted_ms." },
    cache_n: { type: "integer", minimum: 0, description: "Prompt tokens served from the prefix cache." },
    queue_ms: { type: "number", minimum: 0, description: "Milliseconds the request waited before it ran." },
    draft_n: { type: "integer", minimum: 0, description: "Draft tokens verified by speculative decoding (0 when it is off)." },
    draft_n_accepted: { type: "integer", minimum: 0, description: "Draft tokens the output kept, of draft_n." },
  },
};
schemas.ChatCompletion = {
  type: "object",
  required: ["id", "object", "created", "model", "choices", "usage"],
  properties: {
    ...openaiEnvelope("^chatcmpl-", "chat.completion"),
    choices: {
      type: "array",
      items: {
        type: "object",
        required: ["index", "message", "finish_reason"],
        properties: {
          index: { type: "integer", minimum: 0 },
          message: {
            type: "object",
            required: ["role", "content"],
            properties: {
              role: { type: "string", const: "assistant" },
              content: { type: ["string", "null"] },
              reasoning_content: { type: ["string", "null"] },
              tool_calls: { type: "array", items: CHAT_TOOL_CALL },
            },
          },
          finish_reason: { type: "string", enum: CHAT_FINISH },
          logprobs: LOGPROBS_OUT,
        },
      },
    },
    usage: ref("ChatUsage"),
    timings: ref("MashboxTimings"),
    system_fingerprint: { type: "string" },
  },
};
schemas.ChatCompletionChunk = {
  type: "object",
  description:
    "One data: line. The stream ends with data: [DONE]. With stream_options.include_usage the last chunk has empty choices and usage. The chunk with the finish_reason, and the usage chunk, carry timings.",
  required: ["id", "object", "created", "model", "choices"],
  properties: {
    ...openaiEnvelope("^chatcmpl-", "chat.completion.chunk"),
    choices: {
      type: "array",
      items: {
        type: "object",
        required: ["index", "delta", "finish_reason"],
        properties: {
          index: { type: "integer", minimum: 0 },
          delta: {
            type: "object",
            properties: {
              role: { type: "string", const: "assistant" },
              content: { type: ["string", "null"] },
              reasoning_content: { type: ["string", "null"] },
              tool_calls: {
                type: "array",
                items: {
                  type: "object",
                  required: ["index"],
                  properties: {
                    index: { type: "integer", minimum: 0 },
                    id: { type: "string" },
                    type: { type: "string", const: "function" },
                    function: { type: "object", properties: { name: { type: "string" }, arguments: { type: "string" } } },
                  },
                },
              },
            },
          },
          finish_reason: { type: ["string", "null"], enum: [...CHAT_FINISH, null] },
          logprobs: LOGPROBS_OUT,
        },
      },
    },
    usage: { oneOf: [ref("ChatUsage"), { type: "null" }] },
    timings: ref("MashboxTimings"),
    system_fingerprint: { type: "string" },
  },
};
schemas.ChatCompletionStreamPayload = {
  description: "What one data: line of a chat stream carries (besides the final [DONE]).",
  oneOf: [ref("ChatCompletionChunk"), ref("OpenAIStreamError")],
};

// --- request bodies
export const requests = {};
requests.ChatCompletionRequest = {
  type: "object",
  required: ["messages"],
  properties: {
    model: COMMON_FIELDS.model,
    messages: { type: "array", minItems: 1, items: ref("ChatMessage"), description: "The conversation." },
    tools: nullable({ type: "array", items: ref("ChatTool"), description: "Function tools the model may call." }),
    tool_choice: CHAT_TOOL_CHOICE,
    stream: COMMON_FIELDS.stream,
    stream_options: nullable({ type: "object", description: "Fields: include_usage.", properties: { include_usage: { type: "boolean" } } }),
    chat_template_kwargs: nullable({ type: "object", description: "Chat template options. Fields: enable_thinking.", properties: { enable_thinking: { type: "boolean" } } }),
    enable_thinking: nullable({ type: "boolean", description: "Same as chat_template_kwargs.enable_thinking." }),
    merge: MERGE,
    prompt_cache_key: COMMON_FIELDS.prompt_cache_key,
    store: STORE,
    logprobs: unsupportedValues({ type: ["boolean", "null"], description: `${NOT_SUPPORTED_LOGPROBS} false is accepted.` }, "log probabilities", { const: true }),
    top_logprobs: TOP_LOGPROBS,
    response_format: nullable({
      type: "object",
      description: "Only {\"type\": \"text\"}. Not supported: json_object and json_schema (structured output), answered with 400.",
      required: ["type"],
      properties: { type: { type: "string", const: "text" } },
    }),
    max_tokens: MAX_TOKENS,
    max_completion_tokens: maxTokens("Most new tokens (>= 1); max_tokens is the same. Default: up to the end of the context (--ctx)."),
    ...SAMPLING_FIELDS,
  },
};

const EXAMPLES = {
  chatCompletion: {
    id: "chatcmpl-3f9c2a7e",
    object: "chat.completion",
    created: EXAMPLE_CREATED,
    model: MODEL_ID_PLACEHOLDER,
    choices: [{ index: 0, message: { role: "assistant", content: "Mercury, Venus and Earth." }, finish_reason: "stop", logprobs: null }],
    usage: { prompt_tokens: 14, completion_tokens: 8, total_tokens: 22, prompt_tokens_details: { cached_tokens: 0 } },
    timings: EXAMPLE_TIMINGS,
  },
  chatChunk: {
    id: "chatcmpl-3f9c2a7e",
    object: "chat.completion.chunk",
    created: EXAMPLE_CREATED,
    model: MODEL_ID_PLACEHOLDER,
    choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: null, logprobs: null }],
  },
};

export const paths = {
  "/v1/chat/completions": {
    post: {
      operationId: "createChatCompletion",
      summary: "Chat completion",
      description: "OpenAI Chat Completions with function tools, thinking and streaming. Coding agents such as Pi use it.",
      tags: ["chat"],
      security: OPTIONAL_KEY,
      requestBody: requestBody("ChatCompletionRequest", {
        basic: ex("A short answer", { model: MODEL_ID_PLACEHOLDER, messages: [{ role: "user", content: "Name three planets." }], max_tokens: 16 }),
        streamed: ex("Streamed, with usage", {
          messages: [{ role: "user", content: "Say hi." }],
          stream: true,
          stream_options: { include_usage: true },
          max_completion_tokens: 8,
        }),
      }),
      responses: openaiGenerationResponses({
        ...json(ref("ChatCompletion"), one("A short answer", EXAMPLES.chatCompletion)),
        ...sse("ChatCompletionStreamPayload", "Server-sent events: data: lines, each a ChatCompletionChunk (or an OpenAIStreamError after a failure), then data: [DONE].", {
          done: true,
          example: EXAMPLES.chatChunk,
        }),
      }),
    },
  },
};
