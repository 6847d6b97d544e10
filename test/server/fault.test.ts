// A forward pass that throws (not a worker crash) takes the crash path through HTTP: the worker
// reports the fault and exits, the server starts another, and a request whose client has
// received nothing is sent again once; when that fails too it gets the 500 (in the route's
// shape), and the server serves on. The fault is real: a copy of the fixture whose embedding and
// output matrices keep only their first 1024 rows while its tokenizer still has all 49,152
// tokens, so a prompt with a later token id fails the model's batch check inside forward().
// No test-only code path is involved.
import { expect } from "chai";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readHeader } from "../helpers/gguf-header.js";
import { postJson, startTestServer, type TestServer } from "../helpers/server.js";

const FIXTURE = "test/fixtures/llama-q8_0.gguf";
const ROWS = 1024n;

/** The fixture with its vocabulary matrices cut to ROWS rows (their data stays where it was). */
function cutVocabulary(dir: string): string {
  const bytes = readFileSync(FIXTURE);
  const { tensors } = readHeader(bytes);
  for (const name of ["token_embd.weight", "output.weight"]) {
    const t = tensors.find((x) => x.name === name)!;
    expect(t.ne[1]! > ROWS, `${name} has more rows than ${ROWS}`).to.equal(true);
    bytes.writeBigUInt64LE(ROWS, t.neAt + 8);
  }
  const out = join(dir, "cut-vocab.gguf");
  writeFileSync(out, bytes);
  return out;
}

interface Health {
  status: string;
  worker_pid: number;
  worker_restarts: number;
}
const health = async (s: TestServer) => (await (await fetch(`${s.url}/v1/health`)).json()) as Health;
/** Health once the worker is back (a failed request is answered while its successor starts). */
async function healthOk(s: TestServer): Promise<Health> {
  for (let i = 0; i < 600; i++) {
    const h = await health(s);
    if (h.status === "ok") return h;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("the worker did not come back in 30 s");
}

describe("a forward pass that throws takes the crash path, through HTTP", function () {
  this.timeout(120_000);
  let dir: string;
  let s: TestServer;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "mb-fault-"));
    s = await startTestServer({ model_path: cutVocabulary(dir), slots: 1, ctx: 256 });
  });
  after(async () => {
    await s?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  // "x" is token 104; "information" is 14243, past the 1024 rows the model has.
  const fine = () => postJson(`${s.url}/v1/completions`, { prompt: "x", max_tokens: 3 });

  it("a prompt the forward pass refuses: restart, one retry, then the 500; the next request is served", async () => {
    expect((await fine()).status, "the cut model runs prompts within its rows").to.equal(200);
    const h0 = await healthOk(s);

    const whole = await postJson(`${s.url}/v1/completions`, { prompt: "information", max_tokens: 3 });
    expect(whole.status).to.equal(500);
    const err = (await whole.json()).error;
    expect(err.type).to.equal("server_error");
    const h1 = await healthOk(s);
    // The first run and its one retry each took a worker down: two restarts, not one, not more.
    expect(h1.worker_restarts).to.equal(h0.worker_restarts + 2);
    expect(h1.worker_pid).to.not.equal(h0.worker_pid);
    expect((await fine()).status, "served after the fault").to.equal(200);

    // Anthropic route, streamed: nothing was sent before the fault, so the same one retry, and the
    // failure comes in the route's own error shape.
    const streamed = await postJson(`${s.url}/v1/messages`, { max_tokens: 3, stream: true, messages: [{ role: "user", content: "information" }] });
    const text = await streamed.text();
    if (streamed.status === 200) {
      expect(text).to.match(/event: error\ndata: \{"type":"error","error":\{"type":"api_error"/);
      expect(text).to.not.match(/content_block_delta/);
    } else {
      expect(streamed.status).to.equal(500);
      expect(JSON.parse(text)).to.deep.include({ type: "error" });
      expect(JSON.parse(text).error.type).to.equal("api_error");
    }
    const h2 = await healthOk(s);
    expect(h2.worker_restarts).to.equal(h1.worker_restarts + 2);
    expect((await fine()).status, "served after the second fault").to.equal(200);
    const m = await (await fetch(`${s.url}/metrics`)).text();
    expect(Number(/^mashbox:worker_restarts_total (\d+)/m.exec(m)?.[1])).to.equal(h2.worker_restarts);
  });
});
