// The one error catalog. Every error a route can answer comes from here, so that the status,
// the OpenAI `type` / Anthropic `error.type`, and the message style stay consistent.

export type ErrorCode =
  | "invalid_json"
  | "invalid_request"
  | "unsupported_field"
  | "unsupported_media_type"
  | "payload_too_large"
  | "unauthorized"
  | "forbidden_origin"
  | "forbidden_host"
  | "model_not_found"
  | "not_found"
  | "method_not_allowed"
  | "headers_too_large"
  | "malformed_request"
  | "http_version_not_supported"
  | "context_length_exceeded"
  | "no_chat_template"
  | "rate_limited"
  | "queue_full"
  | "loading"
  | "engine_error"
  | "internal_error";

interface CatalogEntry {
  status: number;
  /** OpenAI error.type */
  openai_type: string;
  /** Anthropic error.type */
  anthropic_type: string;
  default_message: string;
}

export const ERROR_CATALOG: Record<ErrorCode, CatalogEntry> = {
  invalid_json: { status: 400, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "Request body is not valid JSON." },
  invalid_request: { status: 400, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "Invalid request." },
  unsupported_field: { status: 400, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "A field of this request is not supported." },
  unsupported_media_type: { status: 415, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "Content-Type must be application/json." },
  payload_too_large: { status: 413, openai_type: "invalid_request_error", anthropic_type: "request_too_large", default_message: "The request body is over this server's limit (--body-limit)." },
  unauthorized: { status: 401, openai_type: "authentication_error", anthropic_type: "authentication_error", default_message: "Missing or invalid API key." },
  forbidden_origin: { status: 403, openai_type: "permission_error", anthropic_type: "permission_error", default_message: "Requests from another origin are not allowed." },
  forbidden_host: { status: 403, openai_type: "permission_error", anthropic_type: "permission_error", default_message: "This server does not answer to that Host." },
  model_not_found: { status: 404, openai_type: "invalid_request_error", anthropic_type: "not_found_error", default_message: "The model does not exist on this server." },
  not_found: { status: 404, openai_type: "invalid_request_error", anthropic_type: "not_found_error", default_message: "Not found." },
  method_not_allowed: { status: 405, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "Method not allowed." },
  headers_too_large: { status: 431, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "The request line and headers are over this server's limit of 16 KiB." },
  malformed_request: { status: 400, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "The request is not valid HTTP/1.1." },
  http_version_not_supported: { status: 505, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "Only HTTP/1.0 and HTTP/1.1 are served on this port." },
  context_length_exceeded: { status: 400, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "The prompt does not fit in the context window." },
  no_chat_template: { status: 400, openai_type: "invalid_request_error", anthropic_type: "invalid_request_error", default_message: "This model has no chat template (a base model is not trained on conversations), so chat requests cannot be turned into a prompt: send plain text to /v1/completions, or start the server with --chat-template FILE." },
  rate_limited: { status: 429, openai_type: "rate_limit_error", anthropic_type: "rate_limit_error", default_message: "Too many requests are waiting for a slot." },
  queue_full: { status: 429, openai_type: "rate_limit_error", anthropic_type: "overloaded_error", default_message: "The server's queue is full." },
  loading: { status: 503, openai_type: "service_unavailable", anthropic_type: "overloaded_error", default_message: "The model is still loading." },
  engine_error: { status: 500, openai_type: "server_error", anthropic_type: "api_error", default_message: "The request failed on the device." },
  internal_error: { status: 500, openai_type: "server_error", anthropic_type: "api_error", default_message: "Internal server error." },
};

export type ErrorDialect = "openai" | "anthropic";

export class ApiError extends Error {
  readonly code: ErrorCode;
  /** The request field the error is about, when there is one (named in the message too). */
  readonly param: string | null;
  /** Seconds for the Retry-After header (429/503/529). */
  readonly retry_after: number | null;
  constructor(code: ErrorCode, message?: string, opts: { param?: string; retry_after?: number } = {}) {
    super(message ?? ERROR_CATALOG[code].default_message);
    this.code = code;
    this.param = opts.param ?? null;
    this.retry_after = opts.retry_after ?? null;
  }

  /** HTTP status for this dialect. Anthropic says "overloaded" with 529. */
  status(dialect: ErrorDialect): number {
    const entry = ERROR_CATALOG[this.code];
    if (dialect === "anthropic" && (this.code === "loading" || this.code === "queue_full")) return 529;
    return entry.status;
  }

  body(dialect: ErrorDialect): Record<string, unknown> {
    const entry = ERROR_CATALOG[this.code];
    if (dialect === "anthropic") {
      return { type: "error", error: { type: entry.anthropic_type, message: this.message } };
    }
    return { error: { message: this.message, type: entry.openai_type, param: this.param, code: this.code } };
  }
}

/** Most characters of a client's value an error message repeats. */
export const QUOTE_MAX = 64;

/**
 * A client's value as an error message repeats it: JSON-quoted and cut to QUOTE_MAX characters
 * (with its length), so a 1 MB name cannot become a 1 MB error body or log line.
 */
export function quoted(value: unknown): string {
  const text = typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  if (text.length <= QUOTE_MAX) return JSON.stringify(text);
  return `${JSON.stringify(text.slice(0, QUOTE_MAX))}… (${text.length} characters)`;
}

/** A client's text cut as quoted() cuts it, for messages that quote it their own way. */
export function clipped(text: string): string {
  return text.length <= QUOTE_MAX ? text : `${text.slice(0, QUOTE_MAX)}… (${text.length} characters)`;
}

/** Shorthand for a 400 naming the offending field. */
export function badField(field: string, why: string): ApiError {
  return new ApiError("invalid_request", `${field}: ${why}`, { param: field });
}

/** Shorthand for a documented-but-unsupported field (logprobs, structured output, media parts). */
export function unsupported(field: string, why: string): ApiError {
  return new ApiError("unsupported_field", `${field} is not supported: ${why}`, { param: field });
}

/** An engine "error" event (or a refusal before the first event) as a catalog error. */
export function fromEngineError(ev: { code: string; message: string }): ApiError {
  const code = (ev.code in ERROR_CATALOG ? ev.code : "engine_error") as ErrorCode;
  return new ApiError(code, ev.message);
}
