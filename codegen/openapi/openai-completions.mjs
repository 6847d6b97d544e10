// OpenAI Completions (src/dialects/openai-completions/): its wire schemas, request body and route.
import { MODEL_ID_PLACEHOLDER, ref, unsupportedValues, json, ex, SAMPLING_FIELDS, COMMON_FIELDS, MAX_TOKENS, MAX_COMPLETION_TOKENS, NOT_SUPPORTED_LOGPROBS, MERGE, LOGPROBS_OUT, EXAMPLE_CREATED, EXAMPLE_TIMINGS, one, sse, OPTIONAL_KEY, openaiGenerationResponses, requestBody, openaiEnvelope } from "./shared.mjs";

export const schemas = {};

// --- completions
schemas.TextCompletion = {
  type: "object",
  description: "Whole answer, or one data: line of a stream (no usage); the stream ends with data: [DONE].",
  required: ["id", "object", "created", "model", "choices"],
  properties: {
    ...openaiEnvelope("^cmpl-", "text_completion"),
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

// --- request bodies
export const requests = {};
requests.TextCompletionPromptList = { type: "array", description: "One non-empty string.", minItems: 1, maxItems: 1, items: { type: "string", minLength: 1 } };
requests.TextCompletionRequest = {
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

const EXAMPLES = {
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
};

export const paths = {
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
};
