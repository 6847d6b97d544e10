// Checks what the server sends against openapi.json. The server's test mode runs every response
// (and every SSE payload) through this, so a test fails the moment an answer leaves the contract,
// not when some client later trips over it.
//
// JSON Schema 2020-12 is the dialect of OpenAPI 3.1, hence Ajv2020. Schemas are compiled lazily,
// by JSON pointer into the document itself, so a $ref inside any schema resolves the way it does
// for every other OpenAPI tool.
import { readFileSync } from "node:fs";
import { packageFile } from "../config.js";
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import { addUnsupportedKeyword } from "./unsupported.js";

type Json = Record<string, any>;

const DOC_ID = "mashbox:openapi";
const METHODS = ["get", "head", "post", "put", "patch", "delete", "options"] as const;

/** openapi.json at the repository root. */
export function readOpenapiDocument(path = packageFile("openapi.json")): Json {
  return JSON.parse(readFileSync(path, "utf8"));
}

export interface ResponseValidator {
  /** Errors of a JSON (or empty) answer; [] = valid. `body` undefined = no body was sent. */
  validateJson(operationId: string, status: number, body: unknown): string[];
  /**
   * Errors of one SSE data: payload of the operation's 200 text/event-stream answer; [] = valid.
   * `payload` is the parsed JSON or the raw data text; `event` is the event: name when the
   * stream sends one (it must equal the payload's type).
   */
  validateSseEvent(operationId: string, payload: unknown, event?: string): string[];
  /**
   * Errors of the documented response headers: required ones present (Retry-After on 429 / 503 /
   * 529), and every documented one that is present matching its schema. Names are case-insensitive.
   */
  validateHeaders(operationId: string, status: number, headers: Record<string, string | string[] | number | undefined>): string[];
  /** Errors of a JSON request body against the operation's request schema; [] = valid. */
  validateRequest(operationId: string, body: unknown): string[];
}

interface Operation {
  path: string;
  method: string;
  op: Json;
  /** JSON pointer of the operation object. */
  pointer: string;
}

const escapePointer = (s: string) => s.replace(/~/g, "~0").replace(/\//g, "~1");

function formatErrors(where: string, errors: ErrorObject[] | null | undefined): string[] {
  if (!errors) return [];
  // oneOf failures repeat each branch's errors; keep the distinct lines, in order.
  const lines = errors.map((e) => {
    const at = e.instancePath === "" ? "(body)" : e.instancePath;
    const extra = e.keyword === "additionalProperties" ? ` (${(e.params as { additionalProperty: string }).additionalProperty})` : "";
    return `${where}: ${at} ${e.message ?? e.keyword}${extra}`;
  });
  return [...new Set(lines)];
}

export function createResponseValidator(doc: Json): ResponseValidator {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false, discriminator: false, validateFormats: false });
  addUnsupportedKeyword(ajv);
  ajv.addSchema({ ...doc, $id: DOC_ID });

  const operations = new Map<string, Operation>();
  for (const [path, item] of Object.entries<Json>(doc.paths ?? {})) {
    for (const method of METHODS) {
      const op = item[method];
      if (op?.operationId) operations.set(op.operationId, { path, method, op, pointer: `/paths/${escapePointer(path)}/${method}` });
    }
  }

  const compiled = new Map<string, ValidateFunction>();
  const compile = (pointer: string): ValidateFunction => {
    let fn = compiled.get(pointer);
    if (!fn) {
      fn = ajv.compile({ $ref: `${DOC_ID}#${pointer}` });
      compiled.set(pointer, fn);
    }
    return fn;
  };

  const operation = (operationId: string): Operation => {
    const found = operations.get(operationId);
    if (!found) throw new Error(`openapi.json has no operation ${operationId}`);
    return found;
  };

  /** The response object for a status and its pointer (following a components/responses $ref). */
  const responseFor = (o: Operation, status: number): { response: Json; pointer: string } | null => {
    const responses: Json = o.op.responses ?? {};
    const key = [String(status), `${String(status)[0]}XX`, "default"].find((k) => k in responses);
    if (key === undefined) return null;
    const response = responses[key];
    if (typeof response.$ref === "string") {
      const name = response.$ref.replace("#/components/responses/", "");
      return { response: doc.components.responses[name], pointer: `/components/responses/${escapePointer(name)}` };
    }
    return { response, pointer: `${o.pointer}/responses/${key}` };
  };

  return {
    validateJson(operationId, status, body) {
      const o = operation(operationId);
      const where = `${operationId} ${status}`;
      const found = responseFor(o, status);
      if (!found) return [`${where}: status ${status} is not documented for ${o.method.toUpperCase()} ${o.path}`];
      const content: Json | undefined = found.response.content;
      if (!content || !content["application/json"]) {
        return body === undefined || body === "" ? [] : [`${where}: no JSON body is documented, got one`];
      }
      if (body === undefined) return [`${where}: a JSON body is documented, got none`];
      const fn = compile(`${found.pointer}/content/application~1json/schema`);
      return fn(body) ? [] : formatErrors(where, fn.errors);
    },

    validateSseEvent(operationId, payload, event) {
      const o = operation(operationId);
      const where = `${operationId} event${event ? ` ${event}` : ""}`;
      const media: Json | undefined = o.op.responses?.["200"]?.content?.["text/event-stream"];
      const target = media?.["x-sse-event-schema"];
      if (typeof target !== "string") return [`${where}: ${operationId} does not stream`];
      let data: unknown = payload;
      if (typeof data === "string") {
        // Data-only (OpenAI Chat / Completions) streams end with the literal [DONE].
        if (data === "[DONE]") return event === undefined ? [] : [`${where}: [DONE] is only sent without an event name`];
        try {
          data = JSON.parse(data as string);
        } catch {
          return [`${where}: data is not JSON: ${(data as string).slice(0, 80)}`];
        }
      }
      const fn = compile(target.replace(/^#/, ""));
      const errors = fn(data) ? [] : formatErrors(where, fn.errors);
      if (event !== undefined && (data as Json)?.type !== event) errors.push(`${where}: event name ${event} differs from payload type ${String((data as Json)?.type)}`);
      return errors;
    },

    validateHeaders(operationId, status, headers) {
      const o = operation(operationId);
      const where = `${operationId} ${status}`;
      const found = responseFor(o, status);
      if (!found) return [`${where}: status ${status} is not documented for ${o.method.toUpperCase()} ${o.path}`];
      const lower = new Map(Object.entries(headers).map(([k, x]) => [k.toLowerCase(), Array.isArray(x) ? x.join(", ") : x]));
      const errors: string[] = [];
      for (const [name, raw] of Object.entries<Json>(found.response.headers ?? {})) {
        const pointer = typeof raw.$ref === "string" ? raw.$ref.replace(/^#/, "") : `${found.pointer}/headers/${escapePointer(name)}`;
        const header: Json = typeof raw.$ref === "string" ? doc.components.headers[String(raw.$ref.split("/").pop())] : raw;
        const value = lower.get(name.toLowerCase());
        if (value === undefined) {
          if (header.required) errors.push(`${where}: header ${name} is required`);
          continue;
        }
        // Header values are text; a number-typed header is checked as the number it spells.
        const type = header.schema?.type;
        const text = String(value).trim();
        const typed = (type === "integer" || type === "number") && text !== "" && !Number.isNaN(Number(text)) ? Number(text) : text;
        const fn = compile(`${pointer}/schema`);
        if (!fn(typed)) errors.push(...formatErrors(`${where} header ${name}`, fn.errors));
      }
      return errors;
    },

    validateRequest(operationId, body) {
      const o = operation(operationId);
      const where = `${operationId} request`;
      if (!o.op.requestBody) return body === undefined ? [] : [`${where}: takes no body`];
      const fn = compile(`${o.pointer}/requestBody/content/application~1json/schema`);
      return fn(body) ? [] : formatErrors(where, fn.errors);
    },
  };
}
