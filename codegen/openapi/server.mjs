// The server's own routes: health, the model list, metrics and this document.
import { MODEL_ID_PLACEHOLDER, ref, json, ex, one, openaiError, resp, OPTIONAL_KEY } from "./shared.mjs";

export const schemas = {};

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
    spec: { type: "string", enum: ["off", "ngram", "draft"], description: "Speculative decoding that runs (--spec): off, n-gram drafts from the request's own text, or drafts from a draft model (--draft)." },
    draft_model: { type: ["string", "null"], description: "Id of the draft model (--draft) with spec draft; null otherwise." },
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
    spec: { type: "string", enum: ["off", "ngram", "draft"], description: "Speculative decoding that runs (--spec)." },
    draft_model: { type: ["string", "null"], description: "Id of the draft model (--draft) with spec draft; null otherwise." },
  },
};
schemas.OpenAIModelList = {
  type: "object",
  required: ["object", "data"],
  properties: { object: { type: "string", const: "list" }, data: { type: "array", items: ref("OpenAIModel") } },
};

const healthResponses = (extra = {}) => ({
  200: { description: "OK", content: json(ref("MashboxHealth"), one("Ready", EXAMPLES.health)), ...extra },
  503: { description: "The model is still loading.", content: json(ref("MashboxHealth"), one("Loading", EXAMPLES.loading)) },
});

const EXAMPLES = {
  health: { status: "ok", live_rows: 0, waiting: 0, cache_bytes: 0, host_cache_bytes: 0, snapshot_bytes: 0, host_cache_cap_bytes: 0, host_cache_evictions: 0, spec: "off", draft_model: null, worker_pid: 4242, worker_restarts: 0 },
  loading: { status: "loading", live_rows: null, waiting: 0, worker_restarts: 0 },
  model: { id: MODEL_ID_PLACEHOLDER, object: "model", owned_by: "mashbox-labs", created: 0, max_model_len: 8192, slots: 4, prefix_cache: true, cache_ram_mib: 0, spec: "off", draft_model: null },
};

export const probePaths = {
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
};

export const operationPaths = {
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
