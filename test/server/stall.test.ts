// A streaming client that stops reading (its socket left open, default socket options) is
// disconnected once it has read nothing for the stall limit, its generation cancelled and its
// slot freed; a client that reads slowly but steadily keeps its stream (docs/STREAMS.md).
//
// The clients read through a 1 KiB buffer of their own (net.Socket's onread), so that what the
// kernel sees is what the test means: 2 KiB then nothing, or 1 KiB a second. A plain 'data'
// listener would have libuv drain the kernel 64 KiB at a time.
import { expect } from "chai";
import { existsSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { MAX_SEGMENT, capSendBuffer, peerWindow } from "../../src/http/socket.js";
import { startLiveServer, type LiveServer } from "../helpers/live.js";
import { scriptHeader, startTestServer } from "../helpers/server.js";

// A real model's token stream: a few hundred small writes a second at most, the case where Linux
// lets a receive buffer that stopped being read grow instead of closing its window. The tiny
// fixtures write so fast that any client's window closes in a moment. The model is scripted to a
// long text (test/helpers/script.ts) so that its stream does not end by itself.
const REAL_MODEL = process.env.MB_MODEL ?? `${process.env.HOME}/.cache/mashbox/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const STALL_MS = 20_000;
/** Thousands of tokens, within a header's size. */
const SCRIPT = Array.from({ length: 2500 }, (_, i) => String(i + 1)).join("-");
/** The clock starts at most a quarter of the limit after the last read (the padding probe), plus ticks. */
const CUT_BY_MS = STALL_MS + STALL_MS / 4 + 5_000;

interface Client {
  sock: Socket;
  received: () => number;
  closed: Promise<number>;
  /** Reads up to 1 KiB more (the socket reads nothing between calls). */
  readMore: () => void;
}

function streamClient(port: number, body: unknown, opts: { read_first: number }): Client {
  const json = JSON.stringify(body);
  let got = 0;
  let budget = opts.read_first;
  const sock = connect({
    port,
    host: "127.0.0.1",
    onread: {
      buffer: Buffer.alloc(1024),
      callback: (n: number) => {
        got += n;
        budget -= n;
        return budget > 0; // false stops reading from the kernel until resume()
      },
    },
  });
  sock.on("error", () => undefined);
  const closed = new Promise<number>((resolve) => sock.once("close", () => resolve(performance.now())));
  const script = Object.entries(scriptHeader(SCRIPT)).map(([k, v]) => `${k}: ${v}\r\n`).join("");
  sock.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${script}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`,
  );
  return {
    sock,
    received: () => got,
    closed,
    readMore: () => {
      budget = 1;
      sock.resume();
    },
  };
}

async function health(url: string): Promise<{ live_rows: number | null }> {
  return (await fetch(url + "/v1/health")).json() as Promise<{ live_rows: number | null }>;
}

async function cancelledCount(url: string): Promise<number> {
  const text = await (await fetch(url + "/metrics")).text();
  return Number(/^mashbox:request_success_total\{finished_reason="cancelled"\} (\d+)/m.exec(text)?.[1] ?? NaN);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const until = async (cond: () => boolean | Promise<boolean>, ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await cond()) return true;
    await sleep(50);
  }
  return false;
};

describe("stalled stream readers", function () {
  this.timeout(120_000);
  // Long enough that a stream finishing by itself cannot pass for a cut one.
  const body = { stream: true, max_tokens: 6000, temperature: 0, messages: [{ role: "user", content: "Count on and on." }] };

  describe("socket facts from the native addon", () => {
    let server: LiveServer;
    before(async () => {
      server = await startLiveServer({ ctx: 1024, slots: 1 });
    });
    after(async () => {
      await server?.close();
    });

    it("caps a socket's kernel send buffer, reads TCP_INFO and sets the listener's segment size", async () => {
      // Without the cap Linux lets a socket buffer up to 4 MiB, minutes of a token stream.
      const probe = connect(server.port, "127.0.0.1");
      await new Promise((r) => probe.once("connect", r));
      const size = capSendBuffer(probe, 16 * 1024);
      const peer = peerWindow(probe);
      probe.destroy();
      expect(size, "setSendBuffer from the native addon").to.be.a("number").within(16 * 1024, 64 * 1024);
      expect(peer, "tcpInfo from the native addon").to.not.equal(null);
      expect(peer!.window).to.be.greaterThan(0);
      // The server's listener announced Ethernet-sized segments, so this client's are too.
      expect(peer!.segment, "segment size").to.be.at.most(MAX_SEGMENT);
    });
  });

  describe("on a real model's stream, two slots", () => {
    let server: LiveServer;
    before(async function () {
      if (!existsSync(REAL_MODEL)) this.skip();
      server = await startTestServer({ model_path: REAL_MODEL, ctx: 8192, slots: 2, app: { sse_stall_ms: STALL_MS } });
    });
    after(async () => {
      await server?.close();
    });

    it("a client that stops reading is cut within the limit of its last read, its slot serves the next request; a slow steady reader keeps its stream", async () => {
      const cancelled0 = await cancelledCount(server.url);
      // 4 KiB a second: slower than the model writes, never nothing for the limit. (A receiver
      // shows its reads only once about 1/16 of its buffer is free again, tens of KB for a buffer
      // Linux grew: the slowest reader seen to read is that much per limit, docs/STREAMS.md.)
      const slow = streamClient(server.port, body, { read_first: 1 });
      let slow_closed = false;
      void slow.closed.then(() => (slow_closed = true));
      const slow_reader = setInterval(() => slow.readMore(), 250);
      const slow_since = performance.now();
      try {
        const stopper = streamClient(server.port, body, { read_first: 2048 });
        expect(await until(() => stopper.received() >= 2048, 60_000), "the stream started").to.equal(true);
        const last_read = performance.now();
        const read_before = stopper.received();
        // A client that does not read does not see the server's close either: watch the log.
        const cut = () => server.logs.some((l) => l.startsWith("POST /v1/chat/completions 200") && l.includes("client-closed"));
        expect(await until(cut, CUT_BY_MS + 2_000), `the server closed the stopped client within ${CUT_BY_MS} ms of its last read`).to.equal(true);
        const cut_after = performance.now() - last_read;
        expect(cut_after, "not before the limit").to.be.greaterThan(STALL_MS);
        expect(cut_after).to.be.lessThan(CUT_BY_MS);
        expect(stopper.received(), "the stopped client read nothing more").to.equal(read_before);
        stopper.sock.destroy();
        expect(await until(async () => (await health(server.url)).live_rows === 1, 5_000), "its slot is free (the slow reader keeps the other)").to.equal(true);
        expect(await cancelledCount(server.url)).to.equal(cancelled0 + 1);

        // Both slots were taken; the freed one serves a new request while the slow reader goes on.
        const r = await fetch(server.url + "/v1/chat/completions", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ max_tokens: 4, messages: [{ role: "user", content: "Hi" }] }),
        });
        expect(r.status).to.equal(200);
        expect(((await r.json()) as { choices: unknown[] }).choices).to.have.length(1);

        await sleep(Math.max(0, slow_since + 2 * STALL_MS - performance.now()));
        // The slow reader has now been behind the model for over twice the limit.
        const slow_got = slow.received();
        expect(slow_closed, "the slow reader is still connected").to.equal(false);
        expect(slow_got, "and it has been reading").to.be.greaterThan((STALL_MS / 1000) * 4096);
        expect(server.logs.filter((l) => l.includes("client-closed")), "only the stopped client was cut").to.have.length(1);
      } finally {
        clearInterval(slow_reader);
        slow.sock.destroy();
      }
      expect(await until(async () => (await health(server.url)).live_rows === 0, 10_000), "the slow reader's slot is freed when it leaves").to.equal(true);
    });
  });
});
