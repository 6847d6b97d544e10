import { expect } from "chai";
import { formatSse } from "../../../src/http/sse.js";
import { schemaErrors } from "../../clients/openapi-schema.js";
import { describeGoldens } from "../harness.js";
import { dialect } from "./dialect.js";

describeGoldens(dialect, import.meta.url, (golden) => {
  it("every output matches openapi.json (Response, ResponseStreamEvent / Error)", () => {
    if (golden.response.status === 500) expect(schemaErrors("OpenAIError", golden.response.error)).to.equal(null);
    else expect(schemaErrors("ResponsesResponse", golden.response)).to.equal(null);
    for (const f of golden.stream) expect(schemaErrors("ResponsesStreamEvent", f.data), f.event).to.equal(null);
  });

  it("stream invariants: sequence 0,1,2…, names match types, output_item.done items rebuild the output", () => {
    const frames = golden.stream as Array<{ event: string; data: Record<string, any> }>;
    frames.forEach((f, i) => {
      expect(f.data.type, f.event).to.equal(f.event);
      expect(f.data.sequence_number, f.event).to.equal(i);
      expect(formatSse(f)).to.match(new RegExp(`^event: ${f.event.replace(/\./g, "\\.")}\ndata: \\{.*\\}\n\n$`));
    });
    expect(frames.slice(0, 2).map((f) => f.event)).to.deep.equal(["response.created", "response.in_progress"]);
    const done = frames.filter((f) => f.event === "response.output_item.done");
    const added = frames.filter((f) => f.event === "response.output_item.added");
    added.forEach((f, i) => expect(f.data.output_index).to.equal(i));
    const last = frames[frames.length - 1];
    if (last.event === "response.failed") {
      expect(frames[frames.length - 2].event).to.equal("error");
      expect(last.data.response.status).to.equal("failed");
      return;
    }
    expect(done.length).to.equal(added.length);
    expect(done.map((f) => f.data.item)).to.deep.equal(golden.response.output);
    expect(last.data.response).to.deep.equal(golden.response);
    expect(last.event).to.equal(golden.response.status === "incomplete" ? "response.incomplete" : "response.completed");
    // Deltas add up to the done text / arguments of their item.
    const sums = new Map<string, string>();
    for (const f of frames) if (f.event.endsWith(".delta")) sums.set(f.data.item_id, (sums.get(f.data.item_id) ?? "") + f.data.delta);
    for (const f of frames) {
      if (f.event === "response.output_text.done" || f.event === "response.reasoning_text.done") expect(sums.get(f.data.item_id)).to.equal(f.data.text);
      if (f.event === "response.function_call_arguments.done") expect(sums.get(f.data.item_id)).to.equal(f.data.arguments);
      if (f.event === "response.custom_tool_call_input.done") expect(sums.get(f.data.item_id)).to.equal(f.data.input);
    }
  });
});
