import { expect } from "chai";
import { ApiError } from "../../../src/errors.js";
import { createResponse } from "../../../src/handlers/createResponse.js";
import type { GenerationEvent } from "../../../src/engine/types.js";
import { fakeEngine, parseSse, serveHandler } from "../../clients/fake-app.js";

const usage = { prompt_tokens: 10, cached_tokens: 6, completion_tokens: 2, reasoning_tokens: 0 };
const timings = { prompt_n: 4, prompt_ms: 1, prompt_per_second: null, predicted_n: 2, predicted_ms: 1, predicted_per_second: null, cache_n: 6, queue_ms: 0 };
const ok: GenerationEvent[] = [
  { type: "start", prompt_tokens: 10, cached_tokens: 6 },
  { type: "text", text: "Hi" },
  { type: "done", finish_reason: "length", stop_sequence: null, usage, timings },
];
const post = (url: string, body: unknown) => fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("createResponse handler (scripted in-memory engine)", () => {
  it("answers an incomplete Response when the budget ran out", async () => {
    const app = await serveHandler(createResponse, fakeEngine({ events: ok }), "openai");
    try {
      const res = await post(app.url, { input: "hi", max_output_tokens: 2 });
      expect(res.status).to.equal(200);
      const r = await res.json();
      expect(r.id).to.match(/^resp_/);
      expect(r).to.deep.include({ status: "incomplete", model: "fake-model", incomplete_details: { reason: "max_output_tokens" } });
      expect(r.usage).to.deep.equal({ input_tokens: 10, input_tokens_details: { cached_tokens: 6 }, output_tokens: 2, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 12 });
      expect(app.generations).to.deep.equal(["length"]);
    } finally {
      await app.close();
    }
  });

  it("refuses another model id with 404 and accepts the served one", async () => {
    const app = await serveHandler(createResponse, fakeEngine({ events: ok }), "openai");
    try {
      const bad = await post(app.url, { model: "other", input: "hi" });
      expect(bad.status).to.equal(404);
      expect((await bad.json()).error.code).to.equal("model_not_found");
      expect((await post(app.url, { model: "fake-model", input: "hi" })).status).to.equal(200);
    } finally {
      await app.close();
    }
  });

  it("streams with sequence numbers 0,1,2… ending in response.incomplete", async () => {
    const app = await serveHandler(createResponse, fakeEngine({ events: ok }), "openai");
    try {
      const res = await post(app.url, { input: "hi", stream: true });
      const events = parseSse(await res.text());
      events.forEach((e, i) => {
        expect(e.data.sequence_number).to.equal(i);
        expect(e.data.type).to.equal(e.event);
      });
      expect(events[events.length - 1].event).to.equal("response.incomplete");
    } finally {
      await app.close();
    }
  });

  it("a failure after output: error then response.failed; a refusal before: HTTP 429", async () => {
    const failing: GenerationEvent[] = [ok[0], ok[1], { type: "error", code: "engine_error", message: "device fault" }];
    const app = await serveHandler(createResponse, fakeEngine({ events: failing }), "openai");
    try {
      const events = parseSse(await (await post(app.url, { input: "hi", stream: true })).text());
      expect(events.slice(-2).map((e) => e.event)).to.deep.equal(["error", "response.failed"]);
      expect(events[events.length - 1].data.response.error).to.deep.equal({ code: "engine_error", message: "device fault" });
    } finally {
      await app.close();
    }
    const busy = await serveHandler(createResponse, fakeEngine({ events: [new ApiError("queue_full")] }), "openai");
    try {
      const res = await post(busy.url, { input: "hi", stream: true });
      expect(res.status).to.equal(429);
      expect((await res.json()).error.code).to.equal("queue_full");
    } finally {
      await busy.close();
    }
  });
});
