// src/generated/limits.ts against openapi.json, and the shared request reader against both: the
// ranges and defaults a dialect applies are the contract's, not a copy of them.
import { expect } from "chai";
import { readFileSync } from "node:fs";
import { FIELD_LIMITS } from "../../src/generated/limits.js";
import { maxTokens, rangeText, requireSingleChoice, samplingParams, stopStrings, withinLimits } from "../../src/dialects/shared/request.js";
import { MAX_STOP_LENGTH, MAX_STOP_STRINGS } from "../../src/engine/stop.js";
import { ApiError } from "../../src/errors.js";

const doc = JSON.parse(readFileSync("openapi.json", "utf8"));
const BODIES = ["ChatCompletionRequest", "TextCompletionRequest", "AnthropicMessagesRequest", "ResponsesRequest"];

describe("generated field limits", () => {
  it("every generating request body's sampling bounds are the generated ones", () => {
    for (const name of BODIES) {
      const props = doc.components.schemas[name].properties;
      for (const field of ["temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty", "seed"] as const) {
        const s = props[field];
        const l = FIELD_LIMITS[field] as Record<string, unknown>;
        for (const k of ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "default"]) expect(l[k], `${name}.${field}.${k}`).to.equal(s[k]);
        expect(s.type, `${name}.${field}`).to.include(l.type);
      }
    }
    expect(MAX_STOP_STRINGS).to.equal(doc.components.schemas.MashboxStopList.maxItems);
    expect(MAX_STOP_LENGTH).to.equal(doc.components.schemas.MashboxStopList.items.maxLength);
  });

  it("the reader applies the contract's defaults and refuses what it refuses, in its words", () => {
    expect(samplingParams({})).to.deep.equal({ temperature: 0, top_p: 1, top_k: 0, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 });
    const refused = (body: Record<string, unknown>) => {
      try {
        samplingParams(body);
      } catch (e) {
        return (e as ApiError).message;
      }
      return null;
    };
    expect(refused({ temperature: 4 })).to.equal(null);
    expect(refused({ temperature: 4.01 })).to.match(/temperature.*must be between 0 and 4/);
    expect(refused({ top_p: 0 })).to.match(/must be in \(0, 1\]/);
    expect(refused({ top_k: 1.5 })).to.match(/must be an integer >= 0/);
    expect(refused({ min_p: 1 })).to.match(/must be in \[0, 1\)/);
    expect(refused({ repetition_penalty: 0 })).to.match(/must be > 0/);
    expect(refused({ presence_penalty: -2.5 })).to.match(/must be between -2 and 2/);
    expect(() => maxTokens({ max_tokens: 0 }, ["max_tokens"])).to.throw(ApiError, /must be an integer >= 1/);
    expect(maxTokens({ max_output_tokens: 5, max_tokens: 7 }, ["max_output_tokens", "max_tokens"])).to.equal(5);
    expect(stopStrings({ stop: ["a", "a", "b"] })).to.deep.equal(["a", "b"]);
  });

  it("n, seed and stop strings are read with the contract's bounds", () => {
    expect(FIELD_LIMITS.n).to.deep.include({ minimum: doc.components.schemas.ChatCompletionRequest.properties.n.minimum, maximum: doc.components.schemas.ChatCompletionRequest.properties.n.maximum });
    expect(() => requireSingleChoice({ n: 1 })).to.not.throw();
    expect(() => requireSingleChoice({ n: 2 })).to.throw(ApiError, /n: must be 1$/);
    expect(() => requireSingleChoice({ n: "1" })).to.throw(ApiError, /n: must be 1$/);
    expect(samplingParams({ seed: FIELD_LIMITS.seed.maximum }).seed).to.equal(Number.MAX_SAFE_INTEGER);
    expect(() => samplingParams({ seed: FIELD_LIMITS.seed.maximum + 2 })).to.throw(ApiError, /seed: must be an integer/);
    expect(() => samplingParams({ seed: 1.5 })).to.throw(ApiError, /seed: must be an integer/);
    expect(FIELD_LIMITS.stop.minLength).to.equal(doc.components.schemas.MashboxStopList.items.minLength);
    expect(() => stopStrings({ stop: ["a", ""] })).to.throw(ApiError, /stop\[1\]: must be a non-empty string/);
    expect(() => stopStrings({ stop_sequences: [""] })).to.throw(ApiError, /stop_sequences\[0\]: must be a non-empty string/);
  });

  it("bounds in words, for each kind of range", () => {
    expect(rangeText({ type: "number", minimum: 0, maximum: 4 })).to.equal("between 0 and 4");
    expect(rangeText({ type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 3 })).to.equal("an integer in (0, 3)");
    expect(rangeText({ type: "number", maximum: 2 })).to.equal("<= 2");
    expect(rangeText({ type: "integer", minimum: 1, maximum: 1 })).to.equal("1");
    expect(withinLimits({ type: "integer", minimum: 1 }, 1)).to.equal(true);
    expect(withinLimits({ type: "integer", minimum: 1 }, Infinity)).to.equal(false);
  });
});
