// Anthropic Messages and token counting (src/dialects/anthropic-messages/): its wire schemas, request bodies and routes.
import { MODEL_ID_PLACEHOLDER, ref, unsupportedValues, json, ex, byType, variant, SAMPLING_FIELDS, COMMON_FIELDS, maxTokens, MAX_COMPLETION_TOKENS, textOnlyPart, TOOL_NAME, TOOL_DESCRIPTION, TOOL_SCHEMA, errorSchemas, one, resp, sse, OPTIONAL_KEY, requestBody } from "./shared.mjs";

export const schemas = {};

const ANTHROPIC_TOOL_CHOICE = {
  type: "object",
  description: "{\"type\": \"auto\" | \"any\" | \"tool\" | \"none\", \"name\": ...}.",
  required: ["type"],
  properties: {
    type: { type: "string", enum: ["auto", "any", "tool", "none"] },
    name: { type: "string" },
    disable_parallel_tool_use: { type: "boolean" },
  },
  ...byType([["tool", { required: ["name"], properties: { name: { type: "string" } } }]]),
};

const ANTHROPIC_THINKING = {
  type: "object",
  description: "Fields: type, budget_tokens, display.",
  required: ["type"],
  properties: {
    type: { type: "string", enum: ["enabled", "disabled", "adaptive"] },
    budget_tokens: { type: "integer", minimum: 0 },
    display: { description: "omitted leaves thinking text out of the answer; any other value is accepted and ignored." },
  },
};
const ANTHROPIC_BLOCK_TYPES = ["text", "thinking", "redacted_thinking", "tool_use", "tool_result"];
const ANTHROPIC_MEDIA_BLOCKS = ["image", "document"];
const ANTHROPIC_MEDIA_REFUSED = "image and document blocks are refused (text-only model)";
// --- anthropic messages
const STOP_REASON = { type: ["string", "null"], enum: ["end_turn", "max_tokens", "stop_sequence", "tool_use", null] };
schemas.AnthropicUsage = {
  type: "object",
  required: ["input_tokens", "output_tokens"],
  properties: {
    input_tokens: { type: "integer", minimum: 0, description: "Prompt tokens not served from the prefix cache." },
    cache_read_input_tokens: { type: "integer", minimum: 0, description: "Prompt tokens served from the prefix cache." },
    cache_creation_input_tokens: { type: "integer", minimum: 0, maximum: 0, description: "Always 0." },
    output_tokens: { type: "integer", minimum: 0, description: "New tokens." },
  },
};
schemas.AnthropicTextBlock = {
  type: "object",
  required: ["type", "text"],
  properties: { type: { type: "string", const: "text" }, text: { type: "string" } },
};
schemas.AnthropicThinkingBlock = {
  type: "object",
  required: ["type", "thinking", "signature"],
  properties: {
    type: { type: "string", const: "thinking" },
    thinking: { type: "string" },
    signature: { type: "string", description: "mashbox-local (empty in content_block_start)." },
  },
};
schemas.AnthropicToolUseBlock = {
  type: "object",
  required: ["type", "id", "name", "input"],
  properties: {
    type: { type: "string", const: "tool_use" },
    id: { type: "string", pattern: "^toolu_" },
    name: { type: "string" },
    input: { type: "object", description: "Arguments ({} in content_block_start)." },
  },
};
schemas.AnthropicContentBlock = {
  description: "text, thinking or tool_use.",
  oneOf: [ref("AnthropicTextBlock"), ref("AnthropicThinkingBlock"), ref("AnthropicToolUseBlock")],
};
schemas.AnthropicMessage = {
  type: "object",
  required: ["id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"],
  properties: {
    id: { type: "string", pattern: "^msg_" },
    type: { type: "string", const: "message" },
    role: { type: "string", const: "assistant" },
    model: { type: "string", description: "The model field of the request, else the model id." },
    content: { type: "array", items: ref("AnthropicContentBlock") },
    stop_reason: { ...STOP_REASON, description: "end_turn, max_tokens, stop_sequence or tool_use; null in message_start." },
    stop_sequence: { type: ["string", "null"], description: "The stop sequence that ended the text." },
    usage: ref("AnthropicUsage"),
  },
};
schemas.AnthropicTokenCount = {
  type: "object",
  required: ["input_tokens"],
  properties: { input_tokens: { type: "integer", minimum: 0, description: "Prompt tokens after the chat template." } },
};

const anthropicEvent = (type, required, properties, description) => ({
  type: "object",
  description,
  required: ["type", ...required],
  properties: { type: { type: "string", const: type }, ...properties },
});
const anthropicDelta = (type, field) => ({ type: "object", required: ["type", field], properties: { type: { type: "string", const: type }, [field]: { type: "string" } } });
schemas.AnthropicTextDelta = anthropicDelta("text_delta", "text");
schemas.AnthropicThinkingDelta = anthropicDelta("thinking_delta", "thinking");
schemas.AnthropicSignatureDelta = anthropicDelta("signature_delta", "signature");
schemas.AnthropicInputJsonDelta = anthropicDelta("input_json_delta", "partial_json");
schemas.AnthropicContentBlockDelta = {
  description: "text_delta, thinking_delta, signature_delta or input_json_delta.",
  oneOf: [ref("AnthropicTextDelta"), ref("AnthropicThinkingDelta"), ref("AnthropicSignatureDelta"), ref("AnthropicInputJsonDelta")],
};
const MESSAGE_EVENTS = {
  AnthropicMessageStartEvent: anthropicEvent("message_start", ["message"], { message: ref("AnthropicMessage") }),
  AnthropicPingEvent: anthropicEvent("ping", [], {}),
  AnthropicContentBlockStartEvent: anthropicEvent("content_block_start", ["index", "content_block"], {
    index: { type: "integer", minimum: 0 },
    content_block: ref("AnthropicContentBlock"),
  }),
  AnthropicContentBlockDeltaEvent: anthropicEvent("content_block_delta", ["index", "delta"], {
    index: { type: "integer", minimum: 0 },
    delta: ref("AnthropicContentBlockDelta"),
  }),
  AnthropicContentBlockStopEvent: anthropicEvent("content_block_stop", ["index"], { index: { type: "integer", minimum: 0 } }),
  AnthropicMessageDeltaEvent: anthropicEvent("message_delta", ["delta", "usage"], {
    delta: {
      type: "object",
      required: ["stop_reason", "stop_sequence"],
      properties: { stop_reason: STOP_REASON, stop_sequence: { type: ["string", "null"] } },
    },
    usage: ref("AnthropicUsage"),
  }),
  AnthropicMessageStopEvent: anthropicEvent("message_stop", [], {}),
  AnthropicErrorEvent: anthropicEvent(
    "error",
    ["error"],
    { error: errorSchemas.AnthropicError.properties.error, request_id: { type: "string" } },
    "Ends a stream that failed after it started.",
  ),
};
Object.assign(schemas, MESSAGE_EVENTS);
const MESSAGE_EVENT_TYPES = {
  message_start: "AnthropicMessageStartEvent",
  ping: "AnthropicPingEvent",
  content_block_start: "AnthropicContentBlockStartEvent",
  content_block_delta: "AnthropicContentBlockDeltaEvent",
  content_block_stop: "AnthropicContentBlockStopEvent",
  message_delta: "AnthropicMessageDeltaEvent",
  message_stop: "AnthropicMessageStopEvent",
  error: "AnthropicErrorEvent",
};
schemas.AnthropicStreamEvent = {
  description:
    "One event: + data: pair: message_start, ping, then per block content_block_start / _delta / _stop, then message_delta and message_stop. type is the same as the SSE event name.",
  oneOf: Object.values(MESSAGE_EVENT_TYPES).map(ref),
};

// --- request bodies
export const requests = {};
requests.AnthropicInputMessage = {
  type: "object",
  description: "One turn of the conversation.",
  required: ["role", "content"],
  properties: {
    role: { type: "string", enum: ["user", "assistant", "system"] },
    content: {
      description: "Text, or content blocks: text, thinking, redacted_thinking, tool_use, tool_result. image and document blocks are refused with 400 (text-only model).",
      oneOf: [{ type: "string" }, ref("AnthropicInputBlockList")],
    },
  },
};
// tool_result content: text, or text blocks (media refused as elsewhere).
requests.AnthropicInputTextBlock = {
  ...textOnlyPart(["text"], ANTHROPIC_MEDIA_BLOCKS, ANTHROPIC_MEDIA_REFUSED, "A text block."),
  ...byType([["text", "AnthropicInputTextBlockText"]]),
};
requests.AnthropicInputTextBlockText = variant("text", "A text block's text.", ["text"], { text: { type: "string" } });
requests.AnthropicInputTextBlockList = { type: "array", description: "Text blocks.", items: ref("AnthropicInputTextBlock") };
requests.AnthropicInputBlock = {
  ...textOnlyPart(ANTHROPIC_BLOCK_TYPES, ANTHROPIC_MEDIA_BLOCKS, ANTHROPIC_MEDIA_REFUSED, "A content block; image and document blocks are refused."),
  ...byType([
    ["thinking", "AnthropicInputThinkingBlock"],
    ["redacted_thinking", "AnthropicInputRedactedThinkingBlock"],
    ["tool_use", "AnthropicInputToolUseBlock"],
    ["tool_result", "AnthropicInputToolResultBlock"],
  ]),
};
requests.AnthropicInputThinkingBlock = variant("thinking", "A thinking block replayed from an earlier answer.", [], { thinking: { type: "string" }, signature: { type: "string" } });
requests.AnthropicInputRedactedThinkingBlock = variant("redacted_thinking", "Redacted thinking: opaque, not replayed to the model.", [], { data: { type: "string" } });
requests.AnthropicInputToolUseBlock = variant("tool_use", "A tool call replayed from an earlier answer.", ["id", "name"], {
  id: { type: "string" },
  name: { type: "string" },
  input: { description: "The call's arguments (any JSON; {} when absent)." },
});
requests.AnthropicInputToolResultBlock = variant("tool_result", "The answer to a tool call.", ["tool_use_id"], {
  tool_use_id: { type: "string" },
  content: { description: "Text, or text blocks.", oneOf: [{ type: "string" }, ref("AnthropicInputTextBlockList")] },
  is_error: { type: "boolean" },
});
requests.AnthropicInputBlockList = { type: "array", description: "Content blocks.", items: ref("AnthropicInputBlock") };
const ANTHROPIC_MESSAGES = { type: "array", minItems: 1, description: "The conversation.", items: ref("AnthropicInputMessage") };
const ANTHROPIC_SYSTEM = {
  description: "System prompt: a string or text blocks.",
  oneOf: [{ type: "string" }, ref("AnthropicInputTextBlockList")],
};
requests.AnthropicTool = {
  type: "object",
  description: "A client tool (no type, or custom), or an Anthropic-hosted one (a versioned type), which is accepted and not offered.",
  required: ["name"],
  properties: { name: TOOL_NAME, description: TOOL_DESCRIPTION, input_schema: TOOL_SCHEMA, type: { type: "string" } },
};
const ANTHROPIC_TOOLS = { type: "array", items: ref("AnthropicTool"), description: "Client tools the model may call." };
requests.AnthropicMessagesRequest = {
  type: "object",
  required: ["messages"],
  properties: {
    model: COMMON_FIELDS.model,
    messages: ANTHROPIC_MESSAGES,
    system: ANTHROPIC_SYSTEM,
    tools: ANTHROPIC_TOOLS,
    tool_choice: ANTHROPIC_TOOL_CHOICE,
    thinking: ANTHROPIC_THINKING,
    stream: COMMON_FIELDS.stream,
    prompt_cache_key: COMMON_FIELDS.prompt_cache_key,
    metadata: { type: "object", description: "Accepted and ignored." },
    output_config: {
      type: "object",
      description: "effort is accepted and ignored. Not supported: format (structured output), answered with 400.",
      properties: {
        effort: { type: "string" },
        format: unsupportedValues({ type: ["object", "null"], description: "Not supported (structured output)." }, "structured output", { type: "object" }),
      },
    },
    max_tokens: maxTokens("Most new tokens; default: up to the end of the context (--ctx)."),
    max_completion_tokens: MAX_COMPLETION_TOKENS,
    ...SAMPLING_FIELDS,
  },
};
requests.AnthropicCountTokensRequest = {
  type: "object",
  required: ["messages"],
  properties: {
    model: COMMON_FIELDS.model,
    messages: ANTHROPIC_MESSAGES,
    system: ANTHROPIC_SYSTEM,
    tools: ANTHROPIC_TOOLS,
    tool_choice: ANTHROPIC_TOOL_CHOICE,
    thinking: ANTHROPIC_THINKING,
  },
};

const EXAMPLES = {
  message: {
    id: "msg_7c41d2f09a",
    type: "message",
    role: "assistant",
    model: MODEL_ID_PLACEHOLDER,
    content: [{ type: "text", text: "Mercury, Venus and Earth." }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 14, cache_read_input_tokens: 0, cache_creation_input_tokens: 0, output_tokens: 8 },
  },
  messageEvent: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hi" } },
  tokenCount: { input_tokens: 14 },
};

export const paths = {
  "/v1/messages": {
    post: {
      operationId: "createMessage",
      summary: "Messages (Anthropic)",
      description: "Anthropic Messages with client tools, thinking and streaming, for Claude Code. The ?beta=true query Claude Code adds is accepted.",
      tags: ["messages"],
      security: OPTIONAL_KEY,
      parameters: [{ name: "beta", in: "query", required: false, description: "Claude Code adds ?beta=true; accepted and ignored.", schema: { type: "string" } }],
      requestBody: requestBody("AnthropicMessagesRequest", {
        basic: ex("A short answer", { model: MODEL_ID_PLACEHOLDER, max_tokens: 16, messages: [{ role: "user", content: "Name three planets." }] }),
        streamed: ex("Streamed, with a system prompt", {
          max_tokens: 8,
          system: [{ type: "text", text: "Be brief." }],
          messages: [{ role: "user", content: [{ type: "text", text: "Say hi." }] }],
          stream: true,
        }),
      }),
      responses: {
        200: {
          description: "OK",
          content: {
            ...json(ref("AnthropicMessage"), one("A short answer", EXAMPLES.message)),
            ...sse("AnthropicStreamEvent", "Server-sent events: event: + data: pairs.", { example: EXAMPLES.messageEvent }),
          },
        },
        400: resp("AnthropicBadRequest"),
        401: resp("AnthropicUnauthorized"),
        403: resp("AnthropicForbidden"),
        405: resp("AnthropicMethodNotAllowed"),
        413: resp("AnthropicPayloadTooLarge"),
        415: resp("AnthropicUnsupportedMediaType"),
        429: resp("AnthropicTooManyRequests"),
        500: resp("AnthropicServerError"),
        529: resp("AnthropicOverloaded"),
      },
    },
  },
  "/v1/messages/count_tokens": {
    post: {
      operationId: "countMessageTokens",
      summary: "Count tokens",
      description: "Prompt tokens a Messages request would use, after the chat template.",
      tags: ["messages"],
      security: OPTIONAL_KEY,
      parameters: [{ name: "beta", in: "query", required: false, description: "Accepted and ignored.", schema: { type: "string" } }],
      requestBody: requestBody("AnthropicCountTokensRequest", {
        basic: ex("Count a conversation", { model: MODEL_ID_PLACEHOLDER, messages: [{ role: "user", content: "Name three planets." }] }),
      }),
      responses: {
        200: { description: "OK", content: json(ref("AnthropicTokenCount"), one("The count", EXAMPLES.tokenCount)) },
        400: resp("AnthropicBadRequest"),
        401: resp("AnthropicUnauthorized"),
        403: resp("AnthropicForbidden"),
        405: resp("AnthropicMethodNotAllowed"),
        413: resp("AnthropicPayloadTooLarge"),
        415: resp("AnthropicUnsupportedMediaType"),
        500: resp("AnthropicServerError"),
        529: resp("AnthropicOverloaded"),
      },
    },
  },
};
