// New Claude Code conversations share their prefix: its first system block carries billing
// metadata whose last three hex digits change per conversation, and stays out of the prompt
// (docs/PROMPT-RULES.md), so a new conversation with another first prompt restores the ~18.7k
// tokens of system prompt and tools from the first one's state point. count_tokens counts the
// prompt the model reads.
import { expect } from "chai";
import { capturedRequests } from "../clients/captured.js";
import { startLiveServer, type LiveServer } from "../helpers/live.js";
import { postJson } from "../helpers/server.js";

const captured = capturedRequests((r) => r.file === "requests-claude.jsonl" && r.path === "/v1/messages")[0];

/** The captured first request of a conversation, as Claude Code would send it for another first prompt. */
function conversation(billing_suffix: string, prompt: string): Record<string, any> {
  const body = structuredClone(captured.body!);
  body.system[0].text = body.system[0].text.replace(/cc_version=(\d+\.\d+\.\d+)\.[0-9a-f]{3};/, `cc_version=$1.${billing_suffix};`);
  expect(body.system[0].text).to.include(`.${billing_suffix};`);
  const first = body.messages[0].content as { type: string; text: string }[];
  const i = first.findIndex((b) => b.text === "say hi");
  expect(i).to.be.at.least(0);
  first[i] = { ...first[i], text: prompt };
  return { ...body, model: "cc-model", max_tokens: 2, stream: false };
}

type Usage = { input_tokens: number; cache_read_input_tokens: number };

async function send(url: string, body: Record<string, any>): Promise<Usage> {
  const r = await postJson(`${url}/v1/messages`, body);
  expect(r.status, await r.clone().text()).to.equal(200);
  return ((await r.json()) as { usage: Usage }).usage;
}

describe("new Claude Code conversations over HTTP", function () {
  // Two 18.7k-token prefills of a fixture model on a shared 2-core machine.
  this.timeout(600000);
  let s: LiveServer;
  before(async () => (s = await startLiveServer({ ctx: 24576, model_id: "cc-model", engine_options: { cache_ram_mib: 256 }, app: { cache_ram_mib: 256 } })));
  after(async () => s?.close());

  it("a second conversation with another billing suffix and first prompt is >= 95% cached", async () => {
    const a = conversation("123", "say hi");
    const first = await send(s.url, a);
    expect(first.cache_read_input_tokens).to.equal(0);
    const b = conversation("8a5", "list the files here");
    const second = await send(s.url, b);
    const total = second.input_tokens + second.cache_read_input_tokens;
    expect(total).to.be.greaterThan(15000);
    expect(second.cache_read_input_tokens / total, `${second.cache_read_input_tokens}/${total}`).to.be.at.least(0.95);

    // count_tokens counts what messages prefilled: the billing block is not in either
    const { model, system, messages, tools } = b;
    const r = await postJson(`${s.url}/v1/messages/count_tokens`, { model, system, messages, tools });
    expect(r.status).to.equal(200);
    expect(((await r.json()) as { input_tokens: number }).input_tokens).to.equal(total);
  });
});
