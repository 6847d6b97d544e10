// Shared components of the contract (codegen/openapi.src.mjs assembles the document): the
// schema helpers, the request fields every generating route shares (sampling, budget, stop), the
// error shapes, the common responses and headers, and the SSE content every stream uses.

/** Every string equal to this is replaced with the running model's id when the server serves the document. */
export const MODEL_ID_PLACEHOLDER = "x-mashbox-model-id";

export const ref = (name) => ({ $ref: `#/components/schemas/${name}` });

/**
 * A field typed as clients send it whose refused values are named by a vendor keyword, not by
 * JSON Schema (docs/CONTRACT.md): SDK generators cannot type `type: null` or `enum: [false, null]`,
 * and they ignore x- keys. The server's Ajv compiles the keyword (src/contract/unsupported.ts), so
 * a request carrying a refused value still gets a 400 naming the field.
 */
export const UNSUPPORTED_KEYWORD = "x-mashbox-unsupported";
export const unsupportedValues = (schema, reason, values) => ({ ...schema, [UNSUPPORTED_KEYWORD]: { reason, values } });
export const nullable = (schema) => ({ ...schema, type: [schema.type, "null"] });
/** application/json content; `examples` (name -> { summary, value }) must validate (test/contract/document.test.ts). */
export const json = (schema, examples) => ({ "application/json": examples ? { schema, examples } : { schema } });
export const ex = (summary, value) => ({ summary, value });
/**
 * Per-`type` rules of an object whose fields depend on its type (content blocks, input items,
 * tools): `cases` maps a type (or a list of types) to the schema that type must also match, or to
 * the name of a component holding it. if/then rather than a oneOf of whole shapes, so that a 400
 * names the one field that is wrong.
 *
 * A component named here is one variant of the object: codegen types the object as its own fields
 * and one of its variants (generate.mjs: variantsOf), which generated types would otherwise not
 * carry (openapi-typescript ignores if/then). Such a variant (variant() below) names its `type`
 * by const and every field the type adds. `rest` is what an object no case matches must match.
 */
export const byType = (cases, rest = null) => {
  // The chain applies the first case whose type matches: a type in two cases would never reach
  // its second.
  const types = cases.flatMap(([t]) => (Array.isArray(t) ? t : [t]));
  const twice = types.find((t, i) => types.indexOf(t) !== i);
  if (twice !== undefined) throw new Error(`byType: ${twice} is in two cases; only the first would apply`);
  // One if/then/else chain (the types are exclusive), not an allOf of conditions: generators read
  // an allOf as composition and write a type for it (openapi-generator go: an undefined `Object`),
  // while they ignore if/then/else and keep the object's own properties.
  return cases.reduceRight(
    (otherwise, [types, then]) => ({
      if: { required: ["type"], properties: { type: Array.isArray(types) ? { enum: types } : { const: types } } },
      then: typeof then === "string" ? ref(then) : then,
      ...(otherwise ? { else: otherwise } : {}),
    }),
    rest,
  );
};

/**
 * One variant of an object whose fields depend on its type, for byType: its type by const (the
 * case's `if` has already matched it, so the const refuses nothing), the fields that type adds,
 * and those it requires. No `type: object`: the object's own schema says that, once.
 */
export const variant = (type, description, required, properties) => ({
  description,
  required: ["type", ...required],
  properties: { type: { type: "string", const: type }, ...properties },
});

// ---------------------------------------------------------------- request fields

// The stop matcher's bounds (src/engine/stop.ts reads them from src/generated/limits.ts, which
// codegen writes from these): its automaton is built from the request's strings, so their size
// is what one request may make the engine hold.
export const MAX_STOP_STRINGS = 64;
export const MAX_STOP_LENGTH = 1024;
export const STOP_STRING = { type: "string", minLength: 1, maxLength: MAX_STOP_LENGTH };
export const STOP_LIST = { type: "array", maxItems: MAX_STOP_STRINGS, items: STOP_STRING };

export const SAMPLING_FIELDS = {
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

export const COMMON_FIELDS = {
  model: { type: "string", description: "Accepted for compatibility; the server answers with the one model it runs.", examples: [MODEL_ID_PLACEHOLDER] },
  stream: nullable({
    type: "boolean",
    default: false,
    description:
      "Stream the answer as server-sent events (see the 200 text/event-stream response). A client that reads nothing from the stream for 30 s is disconnected and its answer stops.",
  }),
  prompt_cache_key: nullable({ type: "string", description: "Tags the request's session in the server log (as the X-Session-Id header does)." }),
};

export const maxTokens = (description) => nullable({ type: "integer", minimum: 1, description });
export const MAX_TOKENS = maxTokens("Most new tokens (>= 1).");
export const MAX_COMPLETION_TOKENS = maxTokens("Same as max_tokens (OpenAI's newer name); wins when both are set.");

export const NOT_SUPPORTED_LOGPROBS = "Not supported (log probabilities): a request that sets it gets 400 naming the field.";
export const TOP_LOGPROBS = unsupportedValues({ type: ["integer", "null"], description: NOT_SUPPORTED_LOGPROBS }, "log probabilities", { type: "integer" });
export const MERGE = nullable({
  type: "boolean",
  default: true,
  description:
    "Accepted and ignored: every request joins the running batch at the next device call, and no request field changes how other requests are scheduled.",
});
export const STORE = nullable({ type: "boolean", description: "Accepted and ignored." });

// Inline, not a component: the Kotlin wrappers validate a branch by a method enum classes lack,
// and Go names top-level enum constants by value alone (AUTO twice for two such enums).
export const TOOL_CHOICE_MODE = { type: "string", enum: ["auto", "none", "required"] };
export const TOOL_CHOICE_FUNCTION = { type: "object", required: ["name"], properties: { name: { type: "string" } } };

// The part / block types each dialect reads. Media types (image, audio, file, document: the model
// reads text only) are listed as clients send them and refused by x-mashbox-unsupported, so the
// 400 says why (the spec's words); any other type is refused by the allow-list, naming the field.
export const MEDIA_REFUSED = "image, audio and file parts are refused (text-only model)";

/** A part's `type`: the text types, and the media types named so that their 400 says why. */
export const partType = (types, media, reason) =>
  unsupportedValues({ type: "string", enum: [...types, ...media] }, reason, { enum: media });


export const textOnlyPart = (types, media, reason, description) => ({
  type: "object",
  description,
  required: ["type"],
  properties: { type: partType(types, media, reason), text: { type: "string" } },
});
// A text part's then names `type` too: redocly checks examples with unevaluated properties
// refused, and once the part is a referenced component a then naming only `text` refuses `type`.
export const TEXT_REQUIRED = { required: ["text"], properties: { type: { type: "string" }, text: { type: "string" } } };
/** Tool names are strings a forced call can write (a tool without one cannot be called). */
export const TOOL_NAME = { type: "string", minLength: 1 };
export const TOOL_DESCRIPTION = { type: ["string", "null"] };
export const TOOL_SCHEMA = { type: ["object", "null"], description: "JSON Schema of the arguments." };

// --- errors
export const errorSchemas = {};
errorSchemas.OpenAIError = {
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
errorSchemas.AnthropicError = {
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
errorSchemas.OpenAIStreamError = {
  type: "object",
  description: "data: payload that ends an OpenAI Chat or Completions stream that failed after sending output.",
  required: ["error"],
  properties: {
    error: errorSchemas.OpenAIError.properties.error,
    request_id: { type: "string", description: "The response id." },
  },
};

// --- request unions: every branch is a named component, so generated types keep their names
export const unionSchemas = {};
unionSchemas.MashboxStopList = { ...STOP_LIST, description: "Stop strings." };
export const CHAT_FINISH = ["stop", "length", "tool_calls"];
// Always null. Typed as the object OpenAI sends there, so generated clients can read the field.
export const LOGPROBS_OUT = unsupportedValues({ type: ["object", "null"], description: "Always null: log probabilities are not supported." }, "log probabilities", { type: "object" });
// ---------------------------------------------------------------- examples
// Answers as this server gives them (the model id is the placeholder). Every example validates
// against its schema (test/contract/document.test.ts), so a schema change that breaks one fails.

export const EXAMPLE_CREATED = 1764547200;
export const EXAMPLE_TIMINGS = { prompt_n: 14, prompt_ms: 21.4, prompt_per_second: 654.2, predicted_n: 8, predicted_ms: 48.1, predicted_per_second: 145.5, cache_n: 0, queue_ms: 0.2 };
export const one = (summary, value) => ({ example: ex(summary, value) });
export const openaiError = (code, type, message, param = null) => one(message, { error: { message, type, param, code } });
export const anthropicError = (type, message) => one(message, { type: "error", error: { type, message } });

// ---------------------------------------------------------------- responses and headers

export const headers = {
  RetryAfter: { description: "Seconds to wait before retrying.", required: true, schema: { type: "integer", minimum: 0 } },
  XShouldRetry: { description: "true while the server is not ready (loading or restarting its worker).", schema: { type: "string", enum: ["true", "false"] } },
  Allow: { description: "The methods this path answers.", schema: { type: "string" } },
};
export const hdr = (name) => ({ $ref: `#/components/headers/${name}` });
export const resp = (name) => ({ $ref: `#/components/responses/${name}` });

export const TOO_MANY =
  "Too many requests are waiting for a slot: 32 of yours (per tenant), or the server's queue is full (256 waiting in all). Retry after the Retry-After header's seconds.";
export const DEVICE_FAILED =
  "The request failed on the device: its one retry failed too, or it failed after its stream had sent output (a stream then ends with the route's error event instead, carrying the response id as request_id).";
export const OVERLOADED =
  "overloaded_error: the model is still loading, or its worker is starting again after a fault, or the server's queue is full (256 waiting in all). Retry after the Retry-After header's seconds (x-should-retry: true while not ready).";

export const responses = {
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
export const sse = (component, description, { done = false, example }) => {
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

export const OPTIONAL_KEY = [{}, { bearer: [] }, { api_key: [] }];

export const openaiGenerationResponses = (okContent) => ({
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
export function withMalformed(paths) {
  for (const item of Object.values(paths))
    for (const [method, op] of Object.entries(item)) {
      if (op.responses[400]) continue;
      op.responses[400] = method === "head" ? { description: "A malformed request: two Host headers, or a request target that is neither a path nor an http(s) URL." } : resp("MalformedRequest");
      op.responses = Object.fromEntries(Object.entries(op.responses).sort(([a], [b]) => a.localeCompare(b)));
    }
  return paths;
}

export const requestBody = (schema, examples) => ({
  required: true,
  content: { "application/json": { schema: ref(schema), examples } },
});

/** The fields every OpenAI answer object opens with: its id (by prefix), object type, time and model. */
export const openaiEnvelope = (idPattern, object) => ({
  id: { type: "string", pattern: idPattern },
  object: { type: "string", const: object },
  created: { type: "integer", format: "int64", minimum: 0, description: "Unix seconds." },
  model: { type: "string" },
});
