import { expect } from "chai";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { readOpenapiDocument } from "../../src/contract/validator.js";
import { fillModelId, MODEL_ID_PLACEHOLDER } from "../../src/contract/model-id.js";
import { operations } from "../../src/generated/operations.js";
import { createResponseValidator } from "../../src/contract/validator.js";
import { UNSUPPORTED_KEYWORD } from "../../src/contract/unsupported.js";

const ROOT = join(import.meta.dirname, "..", "..");
const SPEC_DIR = join(ROOT, "test", "fixtures", "spec");
const doc = readOpenapiDocument();

/** The route table of docs/ARCHITECTURE.md (method, path, operationId): the spec's routes, kept in the repo. */
function agreedRoutes(): Array<[string, string, string]> {
  const architecture = readFileSync(join(ROOT, "docs", "ARCHITECTURE.md"), "utf8");
  return [...architecture.matchAll(/^\| (GET|HEAD|POST) \| (\S+) \| (\w+) \|$/gm)].map((m) => [m[1], m[2], m[3]]);
}

describe("contract: openapi.json", () => {
  it("is byte-stable: regenerating openapi.json and src/generated/ changes nothing", () => {
    // --check writes nothing and exits 1 when any file differs from what codegen would write.
    execFileSync(process.execPath, [join(ROOT, "codegen", "generate.mjs"), "--check"], { stdio: "pipe" });
  });

  it("covers exactly the routes of the spec (docs/ARCHITECTURE.md's table), with the agreed operationIds", () => {
    const agreed = agreedRoutes();
    expect(agreed).to.have.length(13);
    const documented = Object.values(operations).map((o) => [o.method, o.path]);
    expect(documented).to.have.deep.members(agreed.map(([method, path]) => [method, path]));
    for (const [method, path, id] of agreed) {
      expect(operations, id).to.have.property(id);
      expect(operations[id as keyof typeof operations]).to.include({ method, path });
    }
  });

  it("uses the Anthropic error shape exactly on /v1/messages*", () => {
    const resolve = (r: any) => (r.$ref ? doc.components.responses[r.$ref.split("/").pop()] : r);
    for (const [id, o] of Object.entries(operations)) {
      const op = doc.paths[o.path][o.method.toLowerCase()];
      const want = o.dialect === "anthropic" ? "#/components/schemas/AnthropicError" : "#/components/schemas/OpenAIError";
      for (const [status, r] of Object.entries<any>(op.responses)) {
        const schema = resolve(r).content?.["application/json"]?.schema?.$ref;
        if (Number(status) >= 400 && schema && !schema.endsWith("/MashboxHealth")) expect(schema, `${id} ${status}`).to.equal(want);
      }
    }
  });

  it("documents the security statuses and retry headers where they can happen", () => {
    for (const [id, o] of Object.entries(operations)) {
      const op = doc.paths[o.path][o.method.toLowerCase()];
      const statuses = Object.keys(op.responses);
      expect(statuses, id).to.include("403");
      if (o.method === "POST") expect(statuses, id).to.include.members(["400", "401", "405", "415"]);
      if (o.path.startsWith("/v1/") || o.path === "/metrics" || o.path === "/openapi.json") {
        expect(op.security, id).to.deep.equal([{}, { bearer: [] }, { api_key: [] }]);
        expect(statuses, id).to.include("401");
      }
    }
    const headersOf = (name: string) => Object.keys(doc.components.responses[name].headers ?? {});
    expect(headersOf("TooManyRequests")).to.include("Retry-After");
    expect(headersOf("Loading")).to.include("Retry-After");
    expect(headersOf("AnthropicTooManyRequests")).to.include("Retry-After");
    expect(headersOf("AnthropicOverloaded")).to.include.members(["Retry-After", "x-should-retry"]);
  });

  it("names a payload schema for every text/event-stream answer", () => {
    const streaming = Object.entries(operations).filter(([, o]) => o.sse_schema !== null).map(([id]) => id);
    expect(streaming).to.have.members(["createChatCompletion", "createCompletion", "createMessage", "createResponse"]);
    for (const id of streaming) {
      const o = operations[id as keyof typeof operations];
      const media = doc.paths[o.path].post.responses["200"].content["text/event-stream"];
      const name = media["x-sse-event-schema"].replace("#/components/schemas/", "");
      expect(doc.components.schemas, id).to.have.property(name);
      expect(o.sse_schema, id).to.equal(name);
      const data = media.schema.properties.data.contentSchema ? media.schema.properties.data : media.schema.else.properties.data;
      expect(data.contentSchema.$ref, id).to.equal(media["x-sse-event-schema"]);
      expect(data.contentMediaType, id).to.equal("application/json");
    }
  });

  it("has every schema the spec names, and one per Responses stream event", () => {
    const names = Object.keys(doc.components.schemas);
    expect(names).to.include.members([
      "MashboxHealth", "OpenAIModel", "OpenAIModelList", "OpenAIError", "AnthropicError", "ChatMessage", "ChatCompletion", "ChatCompletionChunk",
      "MashboxTimings", "ChatUsage", "TextCompletion", "AnthropicMessage", "AnthropicContentBlock", "AnthropicUsage", "AnthropicStreamEvent",
      "AnthropicTokenCount", "ResponsesResponse", "ResponsesOutputItem", "ResponsesStreamEvent", "ChatCompletionRequest", "TextCompletionRequest",
      "AnthropicMessagesRequest", "AnthropicCountTokensRequest", "ResponsesRequest",
    ]);
    const events = readFileSync(join(SPEC_DIR, "responses-stream-events.txt"), "utf8");
    const specEvents = new Set([...events.matchAll(/^`event: ([a-z_.]+)` chunk object$/gm)].map((m) => m[1]));
    expect(specEvents.size).to.equal(15);
    const mapping = Object.fromEntries(doc.components.schemas.ResponsesStreamEvent.oneOf.map((r: { $ref: string }) => { const name = r.$ref.split("/").pop()!; return [doc.components.schemas[name].properties.type.const, name]; }));
    for (const event of specEvents) expect(mapping, event).to.have.property(event);
    expect(doc.components.schemas.ResponsesStreamEvent.oneOf).to.have.length(Object.keys(mapping).length);
  });

  it("gives every operation an operationId, one declared tag, and examples that validate", () => {
    const v = createResponseValidator(doc);
    const declared = doc.tags.map((t: { name: string }) => t.name);
    let checked = 0;
    for (const [id, o] of Object.entries(operations)) {
      const op = doc.paths[o.path][o.method.toLowerCase()];
      expect(op.operationId, id).to.equal(id);
      expect(op.tags, id).to.have.length(1);
      expect(declared, id).to.include(op.tags[0]);
      if (op.requestBody) {
        const examples = Object.values<any>(op.requestBody.content["application/json"].examples ?? {});
        expect(examples, `${id} request examples`).to.not.be.empty;
        for (const e of examples) expect(v.validateRequest(id, e.value), `${id} request ${e.summary}`).to.deep.equal([]);
      }
      const resolve = (r: any) => (r.$ref ? doc.components.responses[r.$ref.split("/").pop()] : r);
      for (const [status, r] of Object.entries<any>(op.responses)) {
        for (const [media, content] of Object.entries<any>(resolve(r).content ?? {})) {
          const examples = Object.values<any>(content.examples ?? {});
          // Every documented answer with a body shows one.
          expect(examples, `${id} ${status} ${media} examples`).to.not.be.empty;
          for (const e of examples) {
            const where = `${id} ${status} ${media} ${e.summary}`;
            if (media === "application/json") expect(v.validateJson(id, Number(status), e.value), where).to.deep.equal([]);
            else if (media === "text/event-stream") expect(v.validateSseEvent(id, e.value.data, e.value.event), where).to.deep.equal([]);
            else expect(e.value, where).to.be.a("string");
            checked++;
          }
        }
      }
    }
    expect(checked).to.be.at.least(60);
  });

  it("names every schema after its API, and none after a generator's runtime class", () => {
    // Generated SDKs put schemas next to their own runtime (typescript-fetch: ResponseError,
    // Configuration; python: ApiResponse; go: APIClient...): a prefix per API keeps them apart.
    const runtime = ["ResponseError", "RequiredError", "FetchError", "Configuration", "ApiResponse", "ApiClient", "ApiException", "APIClient", "APIResponse", "Error", "Response", "Client", "Model"];
    for (const name of Object.keys(doc.components.schemas)) {
      expect(name).to.match(/^(OpenAI|Anthropic|Chat|TextCompletion|Responses|Mashbox)([A-Z]|$)/);
      expect(runtime, name).to.not.include(name);
    }
  });

  it("types no property as null alone or as a boolean enum (generators cannot); refused values sit in x-mashbox-unsupported", () => {
    const walk = (node: unknown, at: string): void => {
      if (Array.isArray(node)) return node.forEach((x, i) => walk(x, `${at}/${i}`));
      if (node === null || typeof node !== "object") return;
      const o = node as Record<string, any>;
      if (o.properties && typeof o.properties === "object") {
        for (const [name, p] of Object.entries<any>(o.properties)) {
          expect(p.type, `${at}/properties/${name}`).to.not.equal("null");
          expect((p.enum ?? []).some((x: unknown) => typeof x === "boolean"), `${at}/properties/${name} enum`).to.equal(false);
        }
      }
      for (const [k, x] of Object.entries(o)) if (k !== UNSUPPORTED_KEYWORD) walk(x, `${at}/${k}`);
    };
    walk(doc.paths, "#/paths");
    walk(doc.components, "#/components");
    const text = JSON.stringify(doc.components.schemas);
    expect(text.split(`"${UNSUPPORTED_KEYWORD}"`).length - 1, "logprobs x3 (answers), chat logprobs + top_logprobs, completions logprobs, responses top_logprobs + include, output_config.format; media part types: chat (ChatContentPart), responses (ResponsesInputPart), anthropic (AnthropicInputBlock, AnthropicInputTextBlock); item_reference").to.equal(14);
  });

  it("marks the model id placeholders, and fillModelId fills every one", () => {
    const text = JSON.stringify(doc);
    expect(text.split(`"${MODEL_ID_PLACEHOLDER}"`).length - 1).to.be.at.least(5);
    const filled = fillModelId(doc, "smollm2-135m");
    // Only the note that documents the placeholder keeps it.
    const { [MODEL_ID_PLACEHOLDER]: note, ...rest } = filled;
    expect(note).to.be.an("object");
    expect(JSON.stringify(rest)).to.not.include(MODEL_ID_PLACEHOLDER);
    expect(filled.paths["/v1/models/{model}"].get.parameters[0].example).to.equal("smollm2-135m");
    expect(filled.components.schemas.OpenAIModel.properties.id.examples).to.deep.equal(["smollm2-135m"]);
    expect(filled["x-mashbox-model-id"].placeholder).to.equal(MODEL_ID_PLACEHOLDER);
    expect(doc.paths["/v1/models/{model}"].get.parameters[0].example, "the input is not modified").to.equal(MODEL_ID_PLACEHOLDER);
  });

  it("waives no redocly rule without a written reason", () => {
    const config = readFileSync(join(ROOT, "redocly.yaml"), "utf8");
    const lines = config.split("\n");
    lines.forEach((line, i) => {
      if (/^\s+[a-z0-9-]+:\s*(off|warn)\b/.test(line)) expect(lines[i - 1] ?? "", `reason above line ${i + 1}`).to.match(/^\s*#\s*\S/);
    });
    expect(existsSync(join(ROOT, "openapi.json"))).to.equal(true);
  });
});
