// Cross-check: what each dialect actually renders, for the same engine event scripts, against
// openapi.json. The dialects are written by others against the agreed types; this catches a
// field that drifts from the contract before a live server ever sends it.
import { expect } from "chai";
import type { GenerationEvent } from "../../src/engine/types.js";
import type { SseFrame } from "../../src/http/sse.js";
import { createResponseValidator, readOpenapiDocument } from "../../src/contract/validator.js";
import * as chat from "../../src/dialects/openai-chat/index.js";
import * as completions from "../../src/dialects/openai-completions/index.js";
import * as messages from "../../src/dialects/anthropic-messages/index.js";
import * as responses from "../../src/dialects/openai-responses/index.js";

const v = createResponseValidator(readOpenapiDocument());
const MODEL = "smollm2-135m";

const usage = { prompt_tokens: 12, cached_tokens: 4, completion_tokens: 9, reasoning_tokens: 3 };
const timings = { prompt_n: 8, prompt_ms: 3.2, prompt_per_second: 2500, predicted_n: 9, predicted_ms: 20, predicted_per_second: 400, cache_n: 4, queue_ms: 0.2 };
const start: GenerationEvent = { type: "start", prompt_tokens: 12, cached_tokens: 4 };
const done = (finish_reason: "stop" | "length" | "tool_calls" | "stop_sequence", stop_sequence: string | null = null): GenerationEvent => ({
  type: "done",
  finish_reason,
  stop_sequence,
  usage,
  timings,
});

/** Engine event scripts every dialect must render inside the contract. */
const SCRIPTS: Record<string, GenerationEvent[]> = {
  text: [start, { type: "text", text: "Mercury, " }, { type: "text", text: "Venus" }, done("stop")],
  thinking_then_text: [start, { type: "thinking", text: "Planets..." }, { type: "thinking", text: " closest" }, { type: "text", text: "Mercury" }, done("stop")],
  stop_sequence: [start, { type: "text", text: "Mercury" }, done("stop_sequence", "\n")],
  length: [start, { type: "text", text: "Mer" }, done("length")],
  tool_call: [
    start,
    { type: "text", text: "Let me check." },
    { type: "tool_call_start", index: 0, id: "call_abc", name: "get_weather", kind: "function" },
    { type: "tool_call_delta", index: 0, arguments: "{\"city\":" },
    { type: "tool_call_end", index: 0, arguments: "{\"city\":\"Paris\"}" },
    done("tool_calls"),
  ],
  custom_tool_call: [
    start,
    { type: "tool_call_start", index: 0, id: "call_p", name: "apply_patch", kind: "custom" },
    { type: "tool_call_delta", index: 0, arguments: "*** Begin" },
    { type: "tool_call_end", index: 0, arguments: "*** Begin Patch" },
    done("tool_calls"),
  ],
  error_mid_stream: [start, { type: "text", text: "Mer" }, { type: "error", code: "engine_error", message: "device fault" }],
};

function check(label: string, errors: string[]) {
  expect(errors, `${label}\n${errors.join("\n")}`).to.deep.equal([]);
}

function checkFrames(op: string, label: string, frames: SseFrame[], named: boolean) {
  expect(frames.length, label).to.be.greaterThan(0);
  frames.forEach((f, i) => {
    const payload = typeof f.data === "string" ? f.data : JSON.parse(JSON.stringify(f.data));
    check(`${label} frame ${i}`, v.validateSseEvent(op, payload, named ? f.event : undefined));
    if (named) expect(f.event, `${label} frame ${i} has an event name`).to.be.a("string");
  });
}

describe("contract: dialect output validates against openapi.json", () => {
  for (const [name, events] of Object.entries(SCRIPTS)) {
    const failed = events.some((e) => e.type === "error");

    it(`chat: ${name}`, () => {
      const rc = { id: "chatcmpl-1", model_id: MODEL, created: 1735722153 };
      const enc = new chat.ChatStreamEncoder(rc, { include_usage: true });
      checkFrames("createChatCompletion", `chat ${name}`, events.flatMap((e) => enc.push(e)), false);
      if (!failed) check(`chat ${name} json`, v.validateJson("createChatCompletion", 200, JSON.parse(JSON.stringify(chat.fromInternal(events, rc)))));
    });

    it(`completions: ${name}`, () => {
      const rc = { id: "cmpl-1", model_id: MODEL, created: 1735722153 };
      const enc = new completions.CompletionStreamEncoder(rc, {});
      checkFrames("createCompletion", `completions ${name}`, events.flatMap((e) => enc.push(e)), false);
      if (!failed) check(`completions ${name} json`, v.validateJson("createCompletion", 200, JSON.parse(JSON.stringify(completions.fromInternal(events, rc)))));
    });

    it(`messages: ${name}`, () => {
      const enc = new messages.MessagesStreamEncoder({ id: "msg_1", model: MODEL });
      checkFrames("createMessage", `messages ${name}`, events.flatMap((e) => enc.push(e)), true);
      const body = { max_tokens: 64, messages: [{ role: "user", content: "hi" }] } as unknown as messages.MessagesRequest;
      if (!failed) check(`messages ${name} json`, v.validateJson("createMessage", 200, JSON.parse(JSON.stringify(messages.fromInternal(events, body, { id: "msg_1", model_id: MODEL })))));
    });

    it(`responses: ${name}`, () => {
      const body = { input: "hi" } as responses.ResponsesRequest;
      const rc = { id: "resp_1", model_id: MODEL, created_at: 1735722153 };
      const enc = new responses.ResponsesStreamEncoder(body, rc);
      checkFrames("createResponse", `responses ${name}`, events.flatMap((e) => enc.push(e)), true);
      if (!failed) check(`responses ${name} json`, v.validateJson("createResponse", 200, JSON.parse(JSON.stringify(responses.fromInternal(events, body, rc)))));
    });
  }
});
