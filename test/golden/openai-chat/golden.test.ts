import { expect } from "chai";
import { createResponseValidator, readOpenapiDocument } from "../../../src/contract/validator.js";
import { formatSse } from "../../../src/http/sse.js";
import { describeGoldens } from "../harness.js";
import { dialect } from "./dialect.js";

const validator = createResponseValidator(readOpenapiDocument());

describeGoldens(dialect, import.meta.url, (golden) => {
  const include_usage = golden.request.stream_options?.include_usage === true;

  it("the response and each stream frame follow openapi.json", () => {
    const failed = typeof golden.response.status === "number";
    expect(validator.validateJson("createChatCompletion", failed ? golden.response.status : 200, failed ? golden.response.error : golden.response)).to.deep.equal([]);
    for (const f of golden.stream) {
      expect(f.event).to.equal(undefined);
      expect(validator.validateSseEvent("createChatCompletion", formatSse(f).slice("data: ".length, -2))).to.deep.equal([]);
    }
  });

  it("stream invariants: deltas rebuild the response, [DONE] last, timings where the spec puts them", () => {
    const frames = golden.stream as Array<{ data: any }>;
    expect(frames[frames.length - 1].data).to.equal("[DONE]");
    const chunks = frames.slice(0, -1).map((f) => f.data);
    expect(chunks[0].choices[0].delta.role).to.equal("assistant");
    if (golden.response.status) {
      expect(chunks[chunks.length - 1].error).to.deep.equal(golden.response.error.error);
      return;
    }
    let content = "";
    let reasoning = "";
    const calls: any[] = [];
    for (const c of chunks) {
      expect(c.id).to.equal(golden.render.id);
      for (const ch of c.choices) {
        content += ch.delta.content ?? "";
        reasoning += ch.delta.reasoning_content ?? "";
        for (const tc of ch.delta.tool_calls ?? []) {
          if (tc.id) calls[tc.index] = { id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: "" } };
          calls[tc.index].function.arguments += tc.function?.arguments ?? "";
        }
      }
    }
    const msg = golden.response.choices[0].message;
    expect(content).to.equal(msg.content ?? "");
    expect(reasoning).to.equal(msg.reasoning_content ?? "");
    expect(calls).to.deep.equal(msg.tool_calls ?? []);
    for (const tc of calls) expect(tc.id).to.match(/^call_/);
    const finishing = chunks.filter((c) => c.choices.some((ch: any) => ch.finish_reason !== null));
    expect(finishing.length).to.equal(1);
    expect(finishing[0].choices[0].finish_reason).to.equal(golden.response.choices[0].finish_reason);
    expect(finishing[0].timings).to.deep.equal(golden.response.timings);
    const usage = chunks.filter((c) => c.usage);
    if (include_usage) {
      expect(usage.length).to.equal(1);
      expect(chunks[chunks.length - 1].choices).to.deep.equal([]);
      expect(chunks[chunks.length - 1].usage).to.deep.equal(golden.response.usage);
      expect(chunks[chunks.length - 1].timings).to.deep.equal(golden.response.timings);
    } else expect(usage.length).to.equal(0);
  });
});
