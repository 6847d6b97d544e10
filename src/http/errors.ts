// Turning failures into answers: every error leaves through renderError, in the OpenAI shape
// except on /v1/messages* (Anthropic shape), with Retry-After / x-should-retry where due.
import type Koa from "koa";
import { ApiError, badField, unsupported, type ErrorDialect } from "../errors.js";
import { UNSUPPORTED_KEYWORD } from "../contract/unsupported.js";

export function dialectOf(path: string): ErrorDialect {
  return path === "/v1/messages" || path.startsWith("/v1/messages/") ? "anthropic" : "openai";
}

/** Any thrown value as an ApiError (koa/http-errors keep their 4xx meaning; the rest is 500). */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  // decodeURIComponent on a path with bad percent-encoding (/v1/models/%ff): it names nothing here.
  if (err instanceof URIError) return new ApiError("not_found", "The request path is not valid percent-encoded UTF-8.");
  const status = (err as { status?: unknown })?.status;
  if (typeof status === "number" && status >= 400 && status < 500 && (err as { expose?: boolean }).expose !== false) {
    const message = (err as Error).message;
    if (status === 413) return new ApiError("payload_too_large");
    if (status === 404) return new ApiError("not_found", message);
    if (status === 415) return new ApiError("unsupported_media_type");
    return new ApiError("invalid_request", message);
  }
  return new ApiError("internal_error");
}

export function renderError(ctx: Koa.Context, err: ApiError): void {
  const dialect = dialectOf(ctx.path);
  const status = err.status(dialect);
  ctx.status = status;
  ctx.body = err.body(dialect);
  if (err.retry_after !== null) ctx.set("Retry-After", String(err.retry_after));
  if (dialect === "anthropic" && status === 529) ctx.set("x-should-retry", "true");
}

interface AjvError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

/** "/requestBody/messages/0/content" → "messages[0].content". */
export function fieldName(instancePath: string): string {
  const parts = instancePath.split("/").slice(2).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
  let out = "";
  for (const p of parts) out += /^\d+$/.test(p) ? `[${p}]` : out === "" ? p : `.${p}`;
  return out;
}

/**
 * One 400 naming the field, from openapi-backend's (Ajv) errors. Fields the contract marks
 * "Not supported" become unsupported_field with the documented reason.
 */
export function requestValidationError(errors: AjvError[] | null | undefined, requestSchema: Record<string, any> | null): ApiError {
  const list = errors ?? [];
  // oneOf/anyOf summaries say less than the branch errors they collect; prefer a concrete one,
  // and of those the deepest: a oneOf of a string or a list of parts reports "must be string"
  // first, while the branch that matched the value's JSON type failed further in, where the
  // client's mistake is.
  const concrete = list.filter((e) => !["oneOf", "anyOf", "if", "not"].includes(e.keyword));
  // A missing property is a field one level below the object that lacks it.
  const depth = (x: AjvError) => x.instancePath.split("/").length + (x.keyword === "required" ? 1 : 0);
  // At one depth, a branch that took the value's JSON type and failed on something else says more.
  const rank = (x: AjvError) => depth(x) * 2 + (x.keyword === "type" ? 0 : 1);
  const e = concrete.reduce<AjvError | undefined>((best, x) => (best === undefined || rank(x) > rank(best) ? x : best), undefined) ?? list[0];
  if (!e) return new ApiError("invalid_request");
  let field = fieldName(e.instancePath);
  if (e.keyword === "required" && typeof e.params.missingProperty === "string") {
    field = field ? `${field}.${e.params.missingProperty}` : e.params.missingProperty;
    return badField(field, "is required");
  }
  if (!field) return new ApiError("invalid_request", `request body: ${e.message ?? "is invalid"}`);
  if (e.keyword === UNSUPPORTED_KEYWORD) return unsupported(field, String(e.params.reason));
  const top = field.split(/[.[]/)[0];
  const description: unknown = requestSchema?.properties?.[top]?.description;
  if (field === top && typeof description === "string" && /^not supported/i.test(description)) {
    const reason = /\(([^)]+)\)/.exec(description)?.[1] ?? description.replace(/^not supported:?\s*/i, "");
    return unsupported(field, reason);
  }
  let why = e.message ?? "is invalid";
  if (e.keyword === "type") {
    // Each branch of a union by JSON type (a string or a list of parts) refuses the value alike.
    const types = concrete.filter((x) => x.keyword === "type" && x.instancePath === e.instancePath).flatMap((x) => String(x.params.type).split(","));
    why = `must be ${[...new Set(types)].join(" or ")}`;
  }
  if (e.keyword === "enum" && Array.isArray(e.params.allowedValues)) why = `must be one of ${e.params.allowedValues.map((v) => JSON.stringify(v)).join(", ")}`;
  if (e.keyword === "const") why = `must be ${JSON.stringify(e.params.allowedValue)}`;
  return badField(field, why);
}
