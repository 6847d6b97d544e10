// The x-mashbox-unsupported keyword of openapi.json (docs/CONTRACT.md). A field the spec refuses
// (log probabilities, structured output) is typed in openapi.json as clients send it, so that SDK
// generators can type it; the values the server refuses sit in this vendor keyword, which every
// generator ignores and every Ajv of the server compiles:
//
//   "logprobs": { "type": ["boolean", "null"], "x-mashbox-unsupported": { "reason": "log probabilities", "values": { "const": true } } }
//
// A value matching `values` fails validation at the field itself, so the 400 names the field
// (error.param) exactly as a failing JSON Schema keyword would. On a response field it says the
// server never sends such a value, and test mode checks that.
import type { Ajv, ErrorObject, SchemaObject } from "ajv";

export const UNSUPPORTED_KEYWORD = "x-mashbox-unsupported";

export interface UnsupportedValues {
  /** Why, in a few words: "log probabilities", "structured output". */
  reason: string;
  /** JSON Schema of the refused values. */
  values: SchemaObject;
}

/** Adds the keyword to an Ajv instance (the server's request validator, the contract validator). */
export function addUnsupportedKeyword<A extends Ajv>(ajv: A): A {
  if (ajv.getKeyword(UNSUPPORTED_KEYWORD)) return ajv;
  ajv.addKeyword({
    keyword: UNSUPPORTED_KEYWORD,
    schemaType: "object",
    metaSchema: {
      type: "object",
      required: ["reason", "values"],
      properties: { reason: { type: "string" }, values: { type: ["object", "boolean"] } },
    },
    errors: true,
    compile(spec: UnsupportedValues) {
      const refused = ajv.compile(spec.values);
      const check = (data: unknown): boolean => {
        if (!refused(data)) return true;
        const error: Partial<ErrorObject> = {
          keyword: UNSUPPORTED_KEYWORD,
          message: `is not supported (${spec.reason})`,
          params: { reason: spec.reason },
        };
        (check as unknown as { errors: Array<Partial<ErrorObject>> }).errors = [error];
        return false;
      };
      return check;
    },
  });
  return ajv;
}
