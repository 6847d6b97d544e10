// A streaming client that stops reading (its socket left open) is disconnected once it has
// taken no byte for the stall limit, its generation is cancelled and its slot freed (issue 12.1).
// The clock starts when a write stays undrained, not when megabytes of socket buffers are full:
// the stream's socket gets a small kernel send buffer (src/http/socket.ts).
import { expect } from "chai";
import { connect, type Socket } from "node:net";
import { capSendBuffer } from "../../src/http/socket.js";
import { startLiveServer, type LiveServer } from "../helpers/live.js";

const STALL_MS = 1000;

function streamRequest(port: number, body: unknown): { sock: Socket; received: () => number; closed: Promise<number> } {
  const json = JSON.stringify(body);
  const sock = connect(port, "127.0.0.1");
  let got = 0;
  sock.on("data", (d: Buffer) => (got += d.length));
  const closed = new Promise<number>((resolve) => sock.once("close", () => resolve(performance.now())));
  sock.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`,
  );
  return { sock, received: () => got, closed };
}

async function health(url: string): Promise<{ live_rows: number | null }> {
  return (await fetch(url + "/v1/health")).json() as Promise<{ live_rows: number | null }>;
}

async function cancelledCount(url: string): Promise<number> {
  const text = await (await fetch(url + "/metrics")).text();
  return Number(/^mashbox:request_success_total\{finished_reason="cancelled"\} (\d+)/m.exec(text)?.[1] ?? NaN);
}

const until = async (cond: () => boolean | Promise<boolean>, ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await cond()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
};

describe("stalled stream readers", function () {
  this.timeout(60_000);
  let server: LiveServer;
  // Long enough that a stream finishing by itself cannot pass for a cut one.
  const body = { stream: true, max_tokens: 6000, temperature: 0, messages: [{ role: "user", content: "Count on and on." }] };
  before(async () => {
    server = await startLiveServer({ ctx: 8192, slots: 1, app: { sse_stall_ms: STALL_MS } });
  });
  after(async () => {
    await server?.close();
  });

  it("the native addon caps a socket's kernel send buffer", async () => {
    // Without the cap Linux lets a socket buffer up to 4 MiB, minutes of a token stream.
    const probe = connect(server.port, "127.0.0.1");
    await new Promise((r) => probe.once("connect", r));
    const size = capSendBuffer(probe, 16 * 1024);
    probe.destroy();
    expect(size, "setSendBuffer from the native addon").to.be.a("number").within(16 * 1024, 64 * 1024);
  });

  it("a client that stops reading is disconnected, its generation cancelled and its slot freed", async () => {
    const cancelled0 = await cancelledCount(server.url);
    const c = streamRequest(server.port, body);
    expect(await until(() => c.received() >= 2048, 20_000), "the stream started").to.equal(true);
    c.sock.pause(); // stops reading; the socket stays open
    const paused_at = performance.now();
    // A paused client does not see the server's close until it reads again: watch the log.
    const cut = () => server.logs.some((l) => l.startsWith("POST /v1/chat/completions 200") && l.includes("client-closed"));
    expect(await until(cut, 20_000), "the server closed the connection").to.equal(true);
    // Not before the limit: the bytes in flight fill the buffers first, then the clock runs.
    expect(performance.now() - paused_at).to.be.greaterThan(STALL_MS);
    c.sock.on("error", () => undefined);
    c.sock.resume();
    expect(await Promise.race([c.closed.then(() => true), new Promise((r) => setTimeout(() => r(false), 5_000))]), "the client sees the close").to.equal(true);
    expect(await until(async () => (await health(server.url)).live_rows === 0, 5_000), "Health shows the slot free").to.equal(true);
    expect(await cancelledCount(server.url)).to.equal(cancelled0 + 1);
  });

  it("a client that keeps reading, however slowly, is not disconnected", async () => {
    const c = streamRequest(server.port, body);
    expect(await until(() => c.received() > 0, 20_000)).to.equal(true);
    // A few bytes at a time: well under the generation's pace, never nothing for the limit.
    c.sock.pause();
    const reader = setInterval(() => c.sock.read(256), STALL_MS / 4);
    let closed = false;
    void c.closed.then(() => (closed = true));
    await new Promise((r) => setTimeout(r, 4 * STALL_MS));
    clearInterval(reader);
    expect(closed, "still connected after 4x the limit").to.equal(false);
    c.sock.destroy();
    expect(await until(async () => (await health(server.url)).live_rows === 0, 10_000)).to.equal(true);
  });
});
