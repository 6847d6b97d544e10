// The source of openapi.json. `npm run codegen` writes openapi.json from buildOpenapi() and then
// the TypeScript under src/generated/ from that file. openapi.json is committed (the server serves
// it, schemathesis and redocly read it), but edits belong here: the four generating routes share
// most of their fields, and one definition keeps their bounds from drifting apart.
//
// Wire names stay snake_case. Request schemas never set additionalProperties: false (the spec
// accepts and ignores unknown fields); fields the spec refuses (log probabilities, structured
// output, media parts) are refused by the schema itself, so the 400 names the field. The document
// is also read by SDK generators (docs/CONTRACT.md): schema names start with their API, refused
// values sit in x-mashbox-unsupported, and every operation has a tag and examples.

/** Every string equal to this is replaced with the running model's id when the server serves the document. */
export const MODEL_ID_PLACEHOLDER = "x-mashbox-model-id";

const ref = (name) => ({ $ref: `#/components/schemas/${name}` });

/**
 * A field typed as clients send it whose refused values are named by a vendor keyword, not by
 * JSON Schema (docs/CONTRACT.md): SDK generators cannot type `type: null` or `enum: [false, null]`,
 * and they ignore x- keys. The server's Ajv compiles the keyword (src/contract/unsupported.ts), so
 * a request carrying a refused value still gets a 400 naming the field.
 */
export const UNSUPPORTED_KEYWORD = "x-mashbox-unsupported";
const unsupportedValues = (schema, reason, values) => ({ ...schema, [UNSUPPORTED_KEYWORD]: { reason, values } });
const nullable = (schema) => ({ ...schema, type: [schema.type, "null"] });
/** application/json content; `examples` (name -> { summary, value }) must validate (test/contract/document.test.ts). */
const json = (schema, examples) => ({ "application/json": examples ? { schema, examples } : { schema } });
const ex = (summary, value) => ({ summary, value });
/**
 * Per-`type` rules of an object whose fields depend on its type (content blocks, input items,
 * tools): `cases` maps a type (or a list of types) to the schema that type must also match.
 * if/then rather than a oneOf of whole shapes, so that a 400 names the one field that is wrong.
 */
const byType = (cases) =>
  // One if/then/else chain (the types are exclusive), not an allOf of conditions: generators read
  // an allOf as composition and write a type for it (openapi-generator go: an undefined `Object`),
  // while they ignore if/then/else and keep the object's own properties.
  cases.reduceRight(
    (rest, [types, then]) => ({
      if: { required: ["type"], properties: { type: Array.isArray(types) ? { enum: types } : { const: types } } },
      then,
      ...(rest ? { else: rest } : {}),
    }),
    null,
  );

// ---------------------------------------------------------------- request fields

// The stop matcher's bounds (src/engine/stop.ts reads them from src/generated/limits.ts, which
// codegen writes from these): its automaton is built from the request's strings, so their size
// is what one request may make the engine hold.
const MAX_STOP_STRINGS = 64;
const MAX_STOP_LENGTH = 1024;
const STOP_STRING = { type: "string", minLength: 1, maxLength: MAX_STOP_LENGTH };
const STOP_LIST = { type: "array", maxItems: MAX_STOP_STRINGS, items: STOP_STRING };

const SAMPLING_FIELDS = {
  temperature: nullable({ type: "number", minimum: 0, maximum: 4, default: 0, description: "0 = greedy (default). Up to 4." }),
  top_p: nullable({ type: "number", exclusiveMinimum: 0, maximum: 1, default: 1, description: "Nucleus sampling, in (0, 1]." }),
  top_k: nullable({ type: "integer", minimum: 0, default: 0, description: "Keep the k most likely tokens; 0 = off." }),
  min_p: nullable({ type: "number", minimum: 0, exclusiveMaximum: 1, default: 0, description: "Drop tokens below min_p times the top probability, in [0, 1)." }),
  seed: nullable({
    type: "integer",
    format: "int64",
    // JSON numbers beyond 2^53 are not exact integers once parsed, so they cannot name a seed.
    minimum: -Number.MAX_SAFE_INTEGER,
    maximum: Number.MAX_SAFE_INTEGER,
    description: "Sampling seed; a random one when absent.",
  }),
  stop: {
    description: `A string or a list of non-empty strings; the text ends before the first one. At most ${MAX_STOP_STRINGS} strings of at most ${MAX_STOP_LENGTH} characters.`,
    oneOf: [STOP_STRING, ref("MashboxStopList"), { type: "null" }],
  },
  stop_sequences: nullable({ ...STOP_LIST, description: "Same as stop (Anthropic's name), used when stop is absent." }),
  repetition_penalty: nullable({ type: "number", exclusiveMinimum: 0, default: 1, description: "> 0; 1 = off." }),
  frequency_penalty: nullable({ type: "number", minimum: -2, maximum: 2, default: 0, description: "-2 to 2; 0 = off." }),
  presence_penalty: nullable({ type: "number", minimum: -2, maximum: 2, default: 0, description: "-2 to 2; 0 = off." }),
  n: nullable({ type: "integer", minimum: 1, maximum: 1, description: "Must be 1." }),
};

const COMMON_FIELDS = {
  model: { type: "string", description: "Accepted for compatibility; the server answers with the one model it runs.", examples: [MODEL_ID_PLACEHOLDER] },
  stream: nullable({
    type: "boolean",
    default: false,
    description:
      "Stream the answer as server-sent events (see the 200 text/event-stream response). A client that reads nothing from the stream for 30 s is disconnected and its answer stops.",
  }),
  prompt_cache_key: nullable({ type: "string", description: "Tags the request's session in the server log (as the X-Session-Id header does)." }),
};

const maxTokens = (description) => nullable({ type: "integer", minimum: 1, description });
const MAX_TOKENS = maxTokens("Most new tokens (>= 1).");
const MAX_COMPLETION_TOKENS = maxTokens("Same as max_tokens (OpenAI's newer name); wins when both are set.");

const NOT_SUPPORTED_LOGPROBS = "Not supported (log probabilities): a request that sets it gets 400 naming the field.";
const TOP_LOGPROBS = unsupportedValues({ type: ["integer", "null"], description: NOT_SUPPORTED_LOGPROBS }, "log probabilities", { type: "integer" });
const MERGE = nullable({
  type: "boolean",
  default: true,
  description:
    "Accepted and ignored: every request joins the running batch at the next device call, and no request field changes how other requests are scheduled.",
});
const STORE = nullable({ type: "boolean", description: "Accepted and ignored." });

// Inline, not a component: the Kotlin wrappers validate a branch by a method enum classes lack,
// and Go names top-level enum constants by value alone (AUTO twice for two such enums).
const TOOL_CHOICE_MODE = { type: "string", enum: ["auto", "none", "required"] };
const TOOL_CHOICE_FUNCTION = { type: "object", required: ["name"], properties: { name: { type: "string" } } };
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
  description: "Fields: type, budget_tokens.",
  required: ["type"],
  properties: {
    type: { type: "string", enum: ["enabled", "disabled", "adaptive"] },
    budget_tokens: { type: "integer", minimum: 0 },
  },
};

// The part / block types each dialect reads. Media types (image, audio, file, document: the model
// reads text only) are listed as clients send them and refused by x-mashbox-unsupported, so the
// 400 says why (the spec's words); any other type is refused by the allow-list, naming the field.
const CHAT_PART_TYPES = ["text", "input_text"];
const CHAT_MEDIA_PARTS = ["image_url", "input_image", "input_audio", "audio", "file", "input_file", "image"];
const RESPONSES_PART_TYPES = ["input_text", "output_text", "text", "reasoning_text", "summary_text", "refusal"];
const RESPONSES_MEDIA_PARTS = ["input_image", "input_file", "input_audio"];
const ANTHROPIC_BLOCK_TYPES = ["text", "thinking", "redacted_thinking", "tool_use", "tool_result"];
const ANTHROPIC_MEDIA_BLOCKS = ["image", "document"];
const MEDIA_REFUSED = "image, audio and file parts are refused (text-only model)";
const ANTHROPIC_MEDIA_REFUSED = "image and document blocks are refused (text-only model)";

/** A part's `type`: the text types, and the media types named so that their 400 says why. */
const partType = (types, media, reason) =>
  unsupportedValues({ type: "string", enum: [...types, ...media] }, reason, { enum: media });


const textOnlyPart = (types, media, reason, description) => ({
  type: "object",
  description,
  required: ["type"],
  properties: { type: partType(types, media, reason), text: { type: "string" } },
});
// A text part's then names `type` too: redocly checks examples with unevaluated properties
// refused, and once the part is a referenced component a then naming only `text` refuses `type`.
const TEXT_REQUIRED = { required: ["text"], properties: { type: { type: "string" }, text: { type: "string" } } };
/** Tool names are strings a forced call can write (a tool without one cannot be called). */
const TOOL_NAME = { type: "string", minLength: 1 };
const TOOL_DESCRIPTION = { type: ["string", "null"] };
const TOOL_SCHEMA = { type: ["object", "null"], description: "JSON Schema of the arguments." };

// ---------------------------------------------------------------- component schemas

const schemas = {};

// --- errors
schemas.OpenAIError = {
  type: "object",
  description: "OpenAI error shape (all routes except /v1/messages*).",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      // param and code are always present (null when none): src/errors.ts renders every error.
      required: ["message", "type", "param", "code"],
      properties: {
        message: { type: "string" },
        type: { type: "string", examples: ["invalid_request_error"] },
        param: { type: ["string", "null"], description: "The request field the error is about." },
        code: { type: ["string", "null"], description: "Catalog code (src/errors.ts), e.g. model_not_found." },
      },
    },
  },
};
schemas.AnthropicError = {
  type: "object",
  description: "Anthropic error shape (/v1/messages and /v1/messages/count_tokens).",
  required: ["type", "error"],
  properties: {
    type: { type: "string", const: "error" },
    error: {
      type: "object",
      required: ["type", "message"],
      properties: {
        type: {
          type: "string",
          enum: ["invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large", "rate_limit_error", "api_error", "overloaded_error"],
        },
        message: { type: "string" },
      },
    },
    request_id: { type: "string" },
  },
};
schemas.OpenAIStreamError = {
  type: "object",
  description: "data: payload that ends an OpenAI Chat or Completions stream that failed after sending output.",
  required: ["error"],
  properties: {
    error: schemas.OpenAIError.properties.error,
    request_id: { type: "string", description: "The response id." },
  },
};

// --- health and models
schemas.MashboxHealth = {
  type: "object",
  required: ["status"],
  properties: {
    status: { type: "string", enum: ["ok", "loading"], description: "ok when the model is loaded, loading before (and while its worker restarts)." },
    live_rows: { type: ["integer", "null"], minimum: 0, description: "Requests being answered now." },
    waiting: { type: "integer", minimum: 0, description: "Requests waiting for a slot." },
    cache_bytes: { type: "integer", format: "int64", minimum: 0, description: "host_cache_bytes plus snapshot_bytes, each copy counted once." },
    host_cache_bytes: { type: "integer", format: "int64", minimum: 0, description: "Bytes of the host memory prompt cache, each copy counted once." },
    snapshot_bytes: { type: "integer", format: "int64", minimum: 0, description: "Bytes of saved slot state points that host_cache_bytes does not already count." },
    host_cache_cap_bytes: { type: "integer", format: "int64", minimum: 0, description: "Most bytes the host memory prompt cache holds (0 = off)." },
    host_cache_evictions: { type: "integer", minimum: 0, description: "Prompt cache entries removed from host memory to stay under that cap." },
    host_cache_disk_bytes: { type: "integer", format: "int64", minimum: 0, description: "Bytes of this server's namespace in the prompt cache's disk tier (--cache-dir)." },
    host_cache_disk_cap_bytes: { type: "integer", format: "int64", minimum: 0, description: "Most bytes the disk tier holds (0 = off)." },
    host_cache_disk_hits: { type: "integer", format: "int64", minimum: 0, description: "Prompt tokens read back from the disk tier." },
    host_cache_disk_evictions: { type: "integer", minimum: 0, description: "Disk tier blocks removed to stay under its cap." },
    cache_namespace: { type: ["string", "null"], description: "Id of what cached prompts are valid for: model, weights, tokenizer, chat template and cache policy." },
    deployment_id: { type: ["string", "null"], description: "Id of the compiled programs this server runs (null until set)." },
    component_set_sha: { type: ["string", "null"], description: "Id of the model's component set (null until set)." },
    certification: { type: "string", description: "Whether this server's build passed the certification gate on its chip." },
    compiles_after_ready: { type: ["integer", "null"], minimum: 0, description: "Programs compiled since the server reported ready (null before ready or where not counted)." },
    routed_experts: {
      type: ["object", "null"],
      description: "Mixture-of-experts models only: the path the routed experts run on. Null for a dense model and before the first routed call.",
      properties: {
        path: { type: "string", enum: ["kernel", "exact", "mixed"] },
        kernel: { type: ["object", "null"] },
        sites: {
          type: "object",
          description: "Per path (kernel, exact), the routed call sites that ran on it and their call counts.",
          additionalProperties: { type: "object", additionalProperties: { type: "integer", minimum: 0 } },
        },
        exact_why: { type: ["string", "null"] },
      },
    },
    worker_pid: { type: "integer", minimum: 0, description: "Process id of the model's worker." },
    worker_restarts: { type: "integer", minimum: 0, description: "Times the worker was started again after a fault." },
  },
};
schemas.OpenAIModel = {
  type: "object",
  required: ["id", "object", "owned_by", "created", "max_model_len"],
  properties: {
    id: { type: "string", description: "Model id, as in models.json.", examples: [MODEL_ID_PLACEHOLDER] },
    object: { type: "string", const: "model" },
    owned_by: { type: "string", const: "mashbox-labs" },
    created: { type: "integer", minimum: 0, maximum: 0, description: "Always 0." },
    max_model_len: { type: "integer", minimum: 1, description: "Context length the server runs (--ctx)." },
    weights: { type: "string", description: "Weights file loaded." },
    gb: { type: "number", minimum: 0, description: "Weights in device memory, GB." },
    bpw: { type: "number", minimum: 0, description: "Bits per weight of the weights file." },
    prefix_cache: { type: "boolean", description: "Whether the server reuses cached prompt starts." },
    slots: { type: "integer", minimum: 1, description: "Requests decoded together (--slots)." },
    cache_ram_mib: { type: "integer", minimum: 0, description: "Host memory for saved prompt states (--cache-ram)." },
  },
};
schemas.OpenAIModelList = {
  type: "object",
  required: ["object", "data"],
  properties: { object: { type: "string", const: "list" }, data: { type: "array", items: ref("OpenAIModel") } },
};

// --- request unions: every branch is a named component, so generated types keep their names
schemas.MashboxStopList = { ...STOP_LIST, description: "Stop strings." };

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
  },
};
const CHAT_FINISH = ["stop", "length", "tool_calls"];
// Always null. Typed as the object OpenAI sends there, so generated clients can read the field.
const LOGPROBS_OUT = unsupportedValues({ type: ["object", "null"], description: "Always null: log probabilities are not supported." }, "log probabilities", { type: "object" });
schemas.ChatCompletion = {
  type: "object",
  required: ["id", "object", "created", "model", "choices", "usage"],
  properties: {
    id: { type: "string", pattern: "^chatcmpl-" },
    object: { type: "string", const: "chat.completion" },
    created: { type: "integer", format: "int64", minimum: 0, description: "Unix seconds." },
    model: { type: "string" },
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
    id: { type: "string", pattern: "^chatcmpl-" },
    object: { type: "string", const: "chat.completion.chunk" },
    created: { type: "integer", format: "int64", minimum: 0, description: "Unix seconds." },
    model: { type: "string" },
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

// --- completions
schemas.TextCompletion = {
  type: "object",
  description: "Whole answer, or one data: line of a stream (no usage); the stream ends with data: [DONE].",
  required: ["id", "object", "created", "model", "choices"],
  properties: {
    id: { type: "string", pattern: "^cmpl-" },
    object: { type: "string", const: "text_completion" },
    created: { type: "integer", format: "int64", minimum: 0, description: "Unix seconds." },
    model: { type: "string" },
    choices: {
      type: "array",
      items: {
        type: "object",
        required: ["index", "text", "finish_reason"],
        properties: {
          index: { type: "integer", minimum: 0 },
          text: { type: "string" },
          finish_reason: { type: ["string", "null"], enum: ["stop", "length", null] },
          logprobs: LOGPROBS_OUT,
        },
      },
    },
    usage: {
      type: "object",
      required: ["prompt_tokens", "completion_tokens", "total_tokens"],
      properties: {
        prompt_tokens: { type: "integer", minimum: 0 },
        completion_tokens: { type: "integer", minimum: 0 },
        total_tokens: { type: "integer", minimum: 0 },
      },
    },
    timings: ref("MashboxTimings"),
    system_fingerprint: { type: "string", pattern: "^seed-" },
  },
};
schemas.TextCompletionStreamPayload = {
  description: "What one data: line of a completions stream carries (besides the final [DONE]).",
  oneOf: [ref("TextCompletion"), ref("OpenAIStreamError")],
};

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
    { error: schemas.AnthropicError.properties.error, request_id: { type: "string" } },
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
schemas.ChatCompletionRequest = {
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
schemas.TextCompletionPromptList = { type: "array", description: "One non-empty string.", minItems: 1, maxItems: 1, items: { type: "string", minLength: 1 } };
schemas.TextCompletionRequest = {
  type: "object",
  required: ["prompt"],
  properties: {
    model: COMMON_FIELDS.model,
    prompt: {
      description: "The text to continue (a string, or a list of one string); not empty.",
      oneOf: [{ type: "string", minLength: 1 }, ref("TextCompletionPromptList")],
    },
    stream: COMMON_FIELDS.stream,
    merge: MERGE,
    prompt_cache_key: COMMON_FIELDS.prompt_cache_key,
    // Completions' logprobs is a count: 0 asks for none, so only 0 (or null) passes.
    logprobs: unsupportedValues(
      { type: ["integer", "null"], description: `${NOT_SUPPORTED_LOGPROBS} 0 (none) is accepted.` },
      "log probabilities",
      { type: "integer", not: { const: 0 } },
    ),
    max_tokens: MAX_TOKENS,
    max_completion_tokens: MAX_COMPLETION_TOKENS,
    ...SAMPLING_FIELDS,
  },
};
schemas.AnthropicInputMessage = {
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
schemas.AnthropicInputTextBlock = {
  ...textOnlyPart(["text"], ANTHROPIC_MEDIA_BLOCKS, ANTHROPIC_MEDIA_REFUSED, "A text block."),
  ...byType([["text", TEXT_REQUIRED]]),
};
schemas.AnthropicInputTextBlockList = { type: "array", description: "Text blocks.", items: ref("AnthropicInputTextBlock") };
schemas.AnthropicInputBlock = {
  ...textOnlyPart(ANTHROPIC_BLOCK_TYPES, ANTHROPIC_MEDIA_BLOCKS, ANTHROPIC_MEDIA_REFUSED, "A content block; image and document blocks are refused."),
  ...byType([
    ["thinking", { properties: { thinking: { type: "string" }, signature: { type: "string" } } }],
    ["redacted_thinking", { properties: { data: { type: "string" } } }],
    ["tool_use", { required: ["id", "name"], properties: { id: { type: "string" }, name: { type: "string" } } }],
    [
      "tool_result",
      {
        required: ["tool_use_id"],
        properties: {
          tool_use_id: { type: "string" },
          content: { description: "Text, or text blocks.", oneOf: [{ type: "string" }, ref("AnthropicInputTextBlockList")] },
          is_error: { type: "boolean" },
        },
      },
    ],
  ]),
};
schemas.AnthropicInputBlockList = { type: "array", description: "Content blocks.", items: ref("AnthropicInputBlock") };
const ANTHROPIC_MESSAGES = { type: "array", minItems: 1, description: "The conversation.", items: ref("AnthropicInputMessage") };
const ANTHROPIC_SYSTEM = {
  description: "System prompt: a string or text blocks.",
  oneOf: [{ type: "string" }, ref("AnthropicInputTextBlockList")],
};
schemas.AnthropicTool = {
  type: "object",
  description: "A client tool (no type, or custom), or an Anthropic-hosted one (a versioned type), which is accepted and not offered.",
  required: ["name"],
  properties: { name: TOOL_NAME, description: TOOL_DESCRIPTION, input_schema: TOOL_SCHEMA, type: { type: "string" } },
};
const ANTHROPIC_TOOLS = { type: "array", items: ref("AnthropicTool"), description: "Client tools the model may call." };
schemas.AnthropicMessagesRequest = {
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
schemas.AnthropicCountTokensRequest = {
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
schemas.ResponsesInputPart = textOnlyPart(RESPONSES_PART_TYPES, RESPONSES_MEDIA_PARTS, MEDIA_REFUSED, "A text part; input_image, input_file and input_audio parts are refused.");
schemas.ResponsesInputPartList = { type: "array", description: "Text parts.", items: ref("ResponsesInputPart") };
const RESPONSES_PARTS = ref("ResponsesInputPartList");
schemas.ResponsesInputItem = {
  type: "object",
  description: "One input item: a message (type message, or no type with a role) or a tool call, tool output or reasoning item.",
  // An item without type is a message (EasyInputMessage) and needs a role. if/else rather
  // than anyOf of two required lists: typescript-fetch drops the enums of such an object.
  // The per-type rules below sit in the then branch.
  if: { required: ["type"], properties: { type: { type: "string" } } },
  else: { required: ["role"], properties: { role: { type: "string" } } },
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
  then: byType([
    [["function_call", "custom_tool_call"], { required: ["call_id", "name"], properties: { call_id: { type: "string" }, name: { type: "string" }, namespace: { type: "string" } } }],
    ["function_call", { properties: { arguments: { type: "string" } } }],
    ["custom_tool_call", { properties: { input: { type: "string" } } }],
    [
      ["function_call_output", "custom_tool_call_output", "local_shell_call_output"],
      { properties: { output: { description: "Text, or text parts.", oneOf: [{ type: "string" }, RESPONSES_PARTS] } } },
    ],
    ["reasoning", { properties: { summary: { oneOf: [RESPONSES_PARTS, { type: "null" }] } } }],
  ]),
};
// function and custom tools need a name; a namespace groups such tools; hosted tools (web_search,
// local_shell ...) are accepted and not offered.
const RESPONSES_TOOL_FIELDS = { type: { type: "string" }, name: TOOL_NAME, description: TOOL_DESCRIPTION };
const RESPONSES_NAMED_TOOLS = [["function", "custom"], { required: ["name"], properties: { name: TOOL_NAME, parameters: TOOL_SCHEMA } }];
schemas.ResponsesTool = {
  type: "object",
  description: "A function, custom or namespace tool, or a hosted one (accepted, not offered).",
  required: ["type"],
  properties: {
    ...RESPONSES_TOOL_FIELDS,
    tools: {
      type: "array",
      description: "namespace: the function and custom tools it groups.",
      items: { type: "object", required: ["type"], properties: RESPONSES_TOOL_FIELDS, ...byType([RESPONSES_NAMED_TOOLS]) },
    },
  },
  ...byType([RESPONSES_NAMED_TOOLS, ["namespace", { required: ["name", "tools"], properties: { name: TOOL_NAME, tools: { type: "array" } } }]]),
};
schemas.ResponsesInputItemList = { type: "array", description: "Input items.", items: ref("ResponsesInputItem") };
schemas.ResponsesNamedToolChoice = RESPONSES_NAMED_TOOL_CHOICE;
schemas.ResponsesRequest = {
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


// ---------------------------------------------------------------- examples
// Answers as this server gives them (the model id is the placeholder). Every example validates
// against its schema (test/contract/document.test.ts), so a schema change that breaks one fails.

const EXAMPLE_CREATED = 1764547200;
const EXAMPLE_TIMINGS = { prompt_n: 14, prompt_ms: 21.4, prompt_per_second: 654.2, predicted_n: 8, predicted_ms: 48.1, predicted_per_second: 145.5, cache_n: 0, queue_ms: 0.2 };
const EXAMPLES = {
  health: { status: "ok", live_rows: 0, waiting: 0, cache_bytes: 0, host_cache_bytes: 0, snapshot_bytes: 0, host_cache_cap_bytes: 0, host_cache_evictions: 0, worker_pid: 4242, worker_restarts: 0 },
  loading: { status: "loading", live_rows: null, waiting: 0, worker_restarts: 0 },
  model: { id: MODEL_ID_PLACEHOLDER, object: "model", owned_by: "mashbox-labs", created: 0, max_model_len: 8192, slots: 4, prefix_cache: true, cache_ram_mib: 0 },
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
  completion: {
    id: "cmpl-5b1d8e40",
    object: "text_completion",
    created: EXAMPLE_CREATED,
    model: MODEL_ID_PLACEHOLDER,
    choices: [{ index: 0, text: " Jupiter, Saturn, Uranus and Neptune.", finish_reason: "length", logprobs: null }],
    usage: { prompt_tokens: 6, completion_tokens: 16, total_tokens: 22 },
    timings: EXAMPLE_TIMINGS,
  },
  completionChunk: { id: "cmpl-5b1d8e40", object: "text_completion", created: EXAMPLE_CREATED, model: MODEL_ID_PLACEHOLDER, choices: [{ index: 0, text: " there", finish_reason: null, logprobs: null }] },
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
const one = (summary, value) => ({ example: ex(summary, value) });
const openaiError = (code, type, message, param = null) => one(message, { error: { message, type, param, code } });
const anthropicError = (type, message) => one(message, { type: "error", error: { type, message } });

// ---------------------------------------------------------------- responses and headers

const headers = {
  RetryAfter: { description: "Seconds to wait before retrying.", required: true, schema: { type: "integer", minimum: 0 } },
  XShouldRetry: { description: "true while the server is not ready (loading or restarting its worker).", schema: { type: "string", enum: ["true", "false"] } },
  Allow: { description: "The methods this path answers.", schema: { type: "string" } },
};
const hdr = (name) => ({ $ref: `#/components/headers/${name}` });
const resp = (name) => ({ $ref: `#/components/responses/${name}` });

const TOO_MANY =
  "Too many requests are waiting for a slot: 32 of yours (per tenant), or the server's queue is full (256 waiting in all). Retry after the Retry-After header's seconds.";
const DEVICE_FAILED =
  "The request failed on the device: its one retry failed too, or it failed after its stream had sent output (a stream then ends with the route's error event instead, carrying the response id as request_id).";
const OVERLOADED =
  "overloaded_error: the model is still loading, or its worker is starting again after a fault, or the server's queue is full (256 waiting in all). Retry after the Retry-After header's seconds (x-should-retry: true while not ready).";

const responses = {
  // Any route, bodies or not: a request that is malformed before it reaches its operation.
  MalformedRequest: { description: "Bad request: two Host headers, or a request target that is neither a path nor an http(s) URL.", content: json(ref("OpenAIError"), openaiError("invalid_request", "invalid_request_error", "The request has more than one Host header.")) },
  BadRequest: { description: "Bad request: invalid JSON, a field out of bounds, or a field that is not supported (named in the message and in error.param).", content: json(ref("OpenAIError"), openaiError("unsupported_field", "invalid_request_error", "logprobs is not supported: log probabilities", "logprobs")) },
  Unauthorized: { description: "An API key is configured and the request has none or a wrong one (Authorization: Bearer <key> or x-api-key: <key>).", content: json(ref("OpenAIError"), openaiError("unauthorized", "authentication_error", "Missing or invalid API key.")) },
  Forbidden: { description: "A request from a web page of another origin, or naming the server by a host name it does not answer to.", content: json(ref("OpenAIError"), openaiError("forbidden_origin", "permission_error", "Requests from another origin are not allowed.")) },
  MethodNotAllowed: {
    description: "The path exists but does not answer this method; every path of this document answers 405 to the methods it does not list.",
    headers: { Allow: hdr("Allow") },
    content: json(ref("OpenAIError"), openaiError("method_not_allowed", "invalid_request_error", "Method not allowed.")),
  },
  UnsupportedMediaType: { description: "The POST body is not Content-Type: application/json.", content: json(ref("OpenAIError"), openaiError("unsupported_media_type", "invalid_request_error", "Content-Type must be application/json.")) },
  PayloadTooLarge: { description: "The request body is over the server's limit (--body-limit, default 8 MiB).", content: json(ref("OpenAIError"), openaiError("payload_too_large", "invalid_request_error", "The request body is over the server limit (--body-limit).")) },
  ModelNotFound: {
    description: "A model id other than the one this server serves (GET /v1/models), code model_not_found. Leaving model out is accepted.",
    content: json(ref("OpenAIError"), openaiError("model_not_found", "invalid_request_error", "The model does not exist on this server.", "model")),
  },
  TooManyRequests: { description: TOO_MANY, headers: { "Retry-After": hdr("RetryAfter") }, content: json(ref("OpenAIError"), openaiError("rate_limited", "rate_limit_error", "Too many requests are waiting for a slot.")) },
  ServerError: { description: DEVICE_FAILED, content: json(ref("OpenAIError"), openaiError("engine_error", "server_error", "The request failed on the device.")) },
  Loading: { description: "The model is still loading. Retry after the Retry-After header's seconds.", headers: { "Retry-After": hdr("RetryAfter") }, content: json(ref("OpenAIError"), openaiError("loading", "service_unavailable", "The model is still loading.")) },
  AnthropicBadRequest: { description: "Bad request (as BadRequest, in the Anthropic shape).", content: json(ref("AnthropicError"), anthropicError("invalid_request_error", "temperature: must be <= 4")) },
  AnthropicUnauthorized: { description: "An API key is configured and the request has none or a wrong one.", content: json(ref("AnthropicError"), anthropicError("authentication_error", "Missing or invalid API key.")) },
  AnthropicForbidden: { description: "A request from a web page of another origin, or naming the server by a host name it does not answer to.", content: json(ref("AnthropicError"), anthropicError("permission_error", "Requests from another origin are not allowed.")) },
  AnthropicMethodNotAllowed: { description: "The path does not answer this method.", headers: { Allow: hdr("Allow") }, content: json(ref("AnthropicError"), anthropicError("invalid_request_error", "Method not allowed.")) },
  AnthropicUnsupportedMediaType: { description: "The POST body is not Content-Type: application/json.", content: json(ref("AnthropicError"), anthropicError("invalid_request_error", "Content-Type must be application/json.")) },
  AnthropicPayloadTooLarge: { description: "The request body is over the server's limit (--body-limit, default 8 MiB): request_too_large.", content: json(ref("AnthropicError"), anthropicError("request_too_large", "The request body is over the server limit (--body-limit).")) },
  AnthropicTooManyRequests: { description: TOO_MANY, headers: { "Retry-After": hdr("RetryAfter") }, content: json(ref("AnthropicError"), anthropicError("rate_limit_error", "Too many requests are waiting for a slot.")) },
  AnthropicServerError: { description: DEVICE_FAILED, content: json(ref("AnthropicError"), anthropicError("api_error", "The request failed on the device.")) },
  AnthropicOverloaded: {
    description: OVERLOADED,
    headers: { "Retry-After": hdr("RetryAfter"), "x-should-retry": hdr("XShouldRetry") },
    content: json(ref("AnthropicError"), anthropicError("overloaded_error", "The model is still loading.")),
  },
};

/**
 * text/event-stream content. OpenAPI 3.1 has no itemSchema (3.2 does), so `schema` describes one
 * event the way 3.2's itemSchema would and tools reading 3.1 streams do (schemathesis among them):
 * an object of the SSE fields whose `data` is a JSON-encoded payload, typed by contentSchema. The
 * payload component is also named in x-sse-event-schema for the server's own validator.
 * `done`: data-only OpenAI streams end with the literal data: [DONE], which is not JSON.
 */
const sse = (component, description, { done = false, example }) => {
  const payload = {
    type: "string",
    contentMediaType: "application/json",
    contentSchema: ref(component),
    description: `A JSON-encoded ${component}.`,
  };
  const fields = {
    event: { type: "string", description: done ? "Not sent (data-only stream)." : "The payload's type." },
    id: { type: "string" },
    retry: { type: "integer" },
  };
  const event = done
    ? {
        type: "object",
        required: ["data"],
        properties: { ...fields, data: { type: "string", description: `A JSON-encoded ${component}, or [DONE] at the end.` } },
        if: { properties: { data: { const: "[DONE]" } } },
        else: { properties: { data: payload } },
      }
    : { type: "object", required: ["event", "data"], properties: { ...fields, data: payload } };
  // The example is one event whose data is the JSON text of a payload example.
  const value = done ? { data: JSON.stringify(example) } : { event: example.type, data: JSON.stringify(example) };
  return {
    "text/event-stream": {
      schema: { ...event, description: `${description} Each event (this schema) carries a ${component} as data.` },
      examples: { event: ex(`One event: a ${component}`, value) },
      "x-sse-event-schema": `#/components/schemas/${component}`,
    },
  };
};

const OPTIONAL_KEY = [{}, { bearer: [] }, { api_key: [] }];

const healthResponses = (extra = {}) => ({
  200: { description: "OK", content: json(ref("MashboxHealth"), one("Ready", EXAMPLES.health)), ...extra },
  503: { description: "The model is still loading.", content: json(ref("MashboxHealth"), one("Loading", EXAMPLES.loading)) },
});

const openaiGenerationResponses = (okContent) => ({
  200: { description: "OK", content: okContent },
  400: resp("BadRequest"),
  401: resp("Unauthorized"),
  403: resp("Forbidden"),
  404: resp("ModelNotFound"),
  405: resp("MethodNotAllowed"),
  413: resp("PayloadTooLarge"),
  415: resp("UnsupportedMediaType"),
  429: resp("TooManyRequests"),
  500: resp("ServerError"),
  503: resp("Loading"),
});

/** Every operation that documents no 400 of its own answers a malformed request with one. */
function withMalformed(paths) {
  for (const item of Object.values(paths))
    for (const [method, op] of Object.entries(item)) {
      if (op.responses[400]) continue;
      op.responses[400] = method === "head" ? { description: "A malformed request: two Host headers, or a request target that is neither a path nor an http(s) URL." } : resp("MalformedRequest");
      op.responses = Object.fromEntries(Object.entries(op.responses).sort(([a], [b]) => a.localeCompare(b)));
    }
  return paths;
}

const requestBody = (schema, examples) => ({
  required: true,
  content: { "application/json": { schema: ref(schema), examples } },
});

const paths = {
  "/v1/health": {
    get: {
      operationId: "getHealth",
      summary: "MashboxHealth",
      description: "200 when the model is loaded and the server takes requests, 503 while it loads.",
      tags: ["health"],
      security: OPTIONAL_KEY,
      responses: { ...healthResponses(), 401: resp("Unauthorized"), 403: resp("Forbidden"), 405: resp("MethodNotAllowed") },
    },
    head: {
      operationId: "headHealth",
      summary: "Ready check without a body",
      description: "200 when ready, 503 while loading, no body. The server answers HEAD the same way on every path.",
      tags: ["health"],
      security: OPTIONAL_KEY,
      responses: {
        200: { description: "Ready." },
        401: { description: "An API key is configured and the request has none or a wrong one." },
        403: { description: "Another origin, or a host name the server does not answer to." },
        503: { description: "Loading." },
      },
    },
  },
  "/health": {
    get: {
      operationId: "getHealthShort",
      summary: "Health (short path)",
      description: "Same as GET /v1/health.",
      tags: ["health"],
      security: [],
      responses: { ...healthResponses(), 403: resp("Forbidden"), 405: resp("MethodNotAllowed") },
    },
  },
  "/": {
    get: {
      operationId: "getRoot",
      summary: "Health, or the chat page",
      description: "Same as GET /v1/health. With mashbox run <model> --ui it is the MASHBOX Chat page instead.",
      tags: ["health"],
      security: [],
      responses: {
        200: {
          description: "OK: the health object, or the chat page with --ui.",
          content: { ...json(ref("MashboxHealth"), one("Ready", EXAMPLES.health)), "text/html": { schema: { type: "string" }, examples: { page: ex("The chat page (--ui)", "<!doctype html>") } } },
        },
        503: { description: "The model is still loading.", content: json(ref("MashboxHealth"), one("Loading", EXAMPLES.loading)) },
        403: resp("Forbidden"),
        405: resp("MethodNotAllowed"),
      },
    },
  },
  "/v1/models": {
    get: {
      operationId: "listModels",
      summary: "List models",
      description: "The one model this server runs.",
      tags: ["models"],
      security: OPTIONAL_KEY,
      responses: { 200: { description: "OK", content: json(ref("OpenAIModelList"), one("The one model", { object: "list", data: [EXAMPLES.model] })) }, 401: resp("Unauthorized"), 403: resp("Forbidden"), 405: resp("MethodNotAllowed") },
    },
  },
  "/v1/models/{model}": {
    get: {
      operationId: "getModel",
      summary: "Get a model",
      description: "The model, when {model} is its id; 404 otherwise.",
      tags: ["models"],
      security: OPTIONAL_KEY,
      parameters: [{ name: "model", in: "path", required: true, description: "Model id.", schema: { type: "string", examples: [MODEL_ID_PLACEHOLDER] }, example: MODEL_ID_PLACEHOLDER }],
      responses: {
        200: { description: "OK", content: json(ref("OpenAIModel"), one("The model", EXAMPLES.model)) },
        401: resp("Unauthorized"),
        403: resp("Forbidden"),
        404: { description: "Another model id.", content: json(ref("OpenAIError"), openaiError("model_not_found", "invalid_request_error", "The model does not exist on this server.", "model")) },
        405: resp("MethodNotAllowed"),
      },
    },
  },
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
  "/v1/completions": {
    post: {
      operationId: "createCompletion",
      summary: "Text completion",
      description: "Continue a plain prompt, no chat template.",
      tags: ["completions"],
      security: OPTIONAL_KEY,
      requestBody: requestBody("TextCompletionRequest", {
        basic: ex("Continue a prompt", { prompt: "The three largest planets are", max_tokens: 16 }),
        streamed: ex("Streamed", { model: MODEL_ID_PLACEHOLDER, prompt: ["Once upon a time"], stream: true, max_tokens: 8, temperature: 0.7, seed: 1 }),
      }),
      responses: openaiGenerationResponses({
        ...json(ref("TextCompletion"), one("A continuation", EXAMPLES.completion)),
        ...sse("TextCompletionStreamPayload", "Server-sent events: data: lines, each a TextCompletion without usage (or an OpenAIStreamError after a failure), then data: [DONE].", {
          done: true,
          example: EXAMPLES.completionChunk,
        }),
      }),
    },
  },
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
  "/metrics": {
    get: {
      operationId: "getMetrics",
      summary: "Metrics (Prometheus text)",
      description:
        "What the server does, in the Prometheus text format: requests running and waiting, KV cache use and layout, requests by finish reason, tokens, prefix cache lookups and hits, worker restarts, and latency histograms. Every name starts with mashbox:. No label names a user, an API key or a session.",
      tags: ["operations"],
      security: OPTIONAL_KEY,
      responses: {
        200: {
          description: "Prometheus text exposition format.",
          content: {
            "text/plain": {
              schema: { type: "string" },
              examples: {
                metrics: ex(
                  "Two of the series",
                  "# TYPE mashbox:num_requests_running gauge\nmashbox:num_requests_running 0\n# TYPE mashbox:num_requests_waiting gauge\nmashbox:num_requests_waiting 0\n",
                ),
              },
            },
          },
        },
        401: resp("Unauthorized"),
        403: resp("Forbidden"),
        405: resp("MethodNotAllowed"),
      },
    },
  },
  "/openapi.json": {
    get: {
      operationId: "getOpenapi",
      summary: "This description",
      description: "The OpenAPI 3.1 description of this server, with the running model's id.",
      tags: ["operations"],
      security: OPTIONAL_KEY,
      responses: {
        200: {
          description: "OpenAPI 3.1 document.",
          content: json(
            {
              type: "object",
              required: ["openapi", "info", "paths"],
              properties: { openapi: { type: "string", const: "3.1.0" }, info: { type: "object" }, paths: { type: "object" } },
            },
            one("This document (shortened)", { openapi: "3.1.0", info: { title: "mashbox", version: "0.1.0" }, paths: {} }),
          ),
        },
        401: resp("Unauthorized"),
        403: resp("Forbidden"),
        405: resp("MethodNotAllowed"),
      },
    },
  },
};

export function buildOpenapi() {
  return {
    openapi: "3.1.0",
    info: {
      title: "mashbox",
      version: "0.1.0",
      summary: "Local LLM inference server",
      description:
        "Speaks the OpenAI Chat Completions, Completions and Responses APIs and the Anthropic Messages API. On 127.0.0.1 no API key is checked; with --api-key-file or MASHBOX_API_KEY, and always when --host is not loopback, /v1 routes, /metrics and /openapi.json need a key (401 without). POST bodies must be application/json (415 otherwise); another origin or an unknown Host gets 403. Fields a route does not list are accepted and ignored.",
      license: { name: "Apache-2.0", identifier: "Apache-2.0" },
    },
    "x-mashbox-model-id": {
      placeholder: MODEL_ID_PLACEHOLDER,
      description: `Every string value equal to "${MODEL_ID_PLACEHOLDER}" (request and answer examples, the model path parameter's example, OpenAIModel.id's example), and every JSON string literal of it inside the JSON text of an SSE example's data, stands for the running model's id. GET /openapi.json serves the document with each replaced by that id (src/contract/model-id.ts: fillModelId).`,
    },
    "x-mashbox-source": "Generated by `npm run codegen` from codegen/openapi.src.mjs; edit that file, not this one.",
    servers: [{ url: "http://127.0.0.1:8000", description: "mashbox run <model> (default port)" }],
    tags: [
      { name: "health", description: "Readiness." },
      { name: "models", description: "The one model this server runs." },
      { name: "chat", description: "OpenAI Chat Completions." },
      { name: "completions", description: "OpenAI Completions (legacy text completion)." },
      { name: "responses", description: "OpenAI Responses." },
      { name: "messages", description: "Anthropic Messages and token counting." },
      { name: "operations", description: "Metrics and this description." },
    ],
    paths: withMalformed(paths),
    components: {
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer", description: "Authorization: Bearer <key>." },
        api_key: { type: "apiKey", in: "header", name: "x-api-key", description: "x-api-key: <key>." },
      },
      headers,
      responses,
      schemas,
    },
  };
}
