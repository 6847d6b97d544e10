// The test-mode contract check itself: an SSE tap that passes bytes through unchanged while
// validating each event, and records (never swallows) what does not match openapi.json.
import { expect } from "chai";
import { PassThrough } from "node:stream";
import { ContractRecorder } from "../../src/http/contract.js";
import { createResponseValidator, readOpenapiDocument } from "../../src/contract/validator.js";

describe("contract recorder", () => {
  const validator = createResponseValidator(readOpenapiDocument());

  async function tap(op: string, chunks: string[]) {
    const logged: string[] = [];
    const rec = new ContractRecorder(validator, (l) => logged.push(l));
    const src = new PassThrough();
    const out = src.pipe(rec.sseTap(op, "test"));
    let passed = "";
    out.on("data", (d: Buffer) => (passed += d.toString()));
    const done = new Promise((r) => out.on("end", r));
    for (const c of chunks) src.write(c);
    src.end();
    await done;
    return { passed, violations: rec.violations, logged };
  }

  it("passes a valid stream through byte for byte, split anywhere", async () => {
    const chunk = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "hi" }, finish_reason: null }] };
    const text = `data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`;
    const { passed, violations } = await tap("createChatCompletion", [text.slice(0, 7), text.slice(7, 50), text.slice(50)]);
    expect(passed).to.equal(text);
    expect(violations).to.deep.equal([]);
  });

  it("records an event that breaks the schema, and a stream cut mid-event, and logs them", async () => {
    const bad = { object: "chat.completion.chunk" }; // no id, created, model, choices
    const { violations, logged } = await tap("createChatCompletion", [`data: ${JSON.stringify(bad)}\n\n`, "data: {\"trunc"]);
    expect(violations.length).to.be.greaterThan(1);
    expect(violations.join("\n")).to.match(/required/).and.match(/ended inside an event/);
    expect(logged.every((l) => l.startsWith("CONTRACT VIOLATION"))).to.equal(true);
  });

  it("checks the event: name against the payload type on named-event streams", async () => {
    const ping = { type: "ping" };
    const { violations } = await tap("createMessage", [`event: message_stop\ndata: ${JSON.stringify(ping)}\n\n`]);
    expect(violations.join("\n")).to.match(/event name message_stop differs/);
  });
});
