// Validates wire objects against a schema of openapi.json's components (JSON Schema 2020-12).
import Ajv2020Module from "ajv/dist/2020.js";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

type Validator = ((data: unknown) => boolean) & { errors?: unknown };
const Ajv2020 = ((Ajv2020Module as unknown as { default?: unknown }).default ?? Ajv2020Module) as new (opts: object) => {
  addSchema(schema: object): void;
  addFormat(name: string, format: { type: "number"; validate: (n: number) => boolean }): void;
  getSchema(ref: string): Validator | undefined;
};

let ajv: InstanceType<typeof Ajv2020> | null = null;

/** Returns null when `data` matches components/schemas/<name>, else ajv's errors as text. */
export function schemaErrors(name: string, data: unknown): string | null {
  if (!ajv) {
    const doc = JSON.parse(readFileSync(fileURLToPath(new URL("../../openapi.json", import.meta.url)), "utf8"));
    // openapi "discriminator" mappings are documentation here; the oneOf branches' consts decide.
    ajv = new Ajv2020({ strict: false, allErrors: true });
    // int64 (byte counters, timestamps, seeds) is the one format openapi.json uses; Ajv knows none of
    // OpenAPI's numeric formats, so without this it would skip the check and warn on every compile.
    ajv.addFormat("int64", { type: "number", validate: Number.isSafeInteger });
    ajv.addSchema({ $id: "openapi", components: doc.components });
  }
  const validate = ajv.getSchema(`openapi#/components/schemas/${name}`);
  if (!validate) return `no schema ${name} in openapi.json`;
  return validate(data) ? null : JSON.stringify(validate.errors).slice(0, 1000);
}
