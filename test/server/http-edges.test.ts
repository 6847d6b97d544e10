// What the HTTP parser refuses still gets an answer in the route's error shape, and the answer
// arrives (no TCP reset): oversize heads 431, bodies over the limit 413, malformed bytes 400,
// unknown methods and CONNECT 405, HTTP versions other than 1.0/1.1 505. Raw sockets, since no
// HTTP client sends these.
import { expect } from "chai";
import { connect } from "node:net";
import { startTestServer, type TestServer } from "../helpers/server.js";

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** The connection ended by a reset (ECONNRESET) rather than a close. */
  reset: boolean;
}

/** Sends `data` on a fresh connection and reads until the server closes it. */
function exchange(port: number, data: string | Buffer): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    let reset = false;
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no close within 10 s; got ${JSON.stringify(Buffer.concat(chunks).toString().slice(0, 200))}`));
    }, 10_000);
    sock.on("data", (d: Buffer) => chunks.push(d));
    sock.on("error", (e: NodeJS.ErrnoException) => {
      if (e.code === "ECONNRESET" || e.code === "EPIPE") reset = true;
      else reject(e);
    });
    sock.on("close", () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString("utf8");
      const [head = "", ...rest] = text.split("\r\n\r\n");
      const [line = "", ...hl] = head.split("\r\n");
      const headers = Object.fromEntries(hl.map((h) => [h.slice(0, h.indexOf(":")).toLowerCase(), h.slice(h.indexOf(":") + 1).trim()]));
      resolve({ status: Number(line.split(" ")[1] ?? NaN), headers, body: rest.join("\r\n\r\n"), reset });
    });
    sock.write(data);
  });
}

function expectOpenAiError(a: RawAnswer, status: number): void {
  expect(a.status, a.body).to.equal(status);
  expect(a.headers["content-type"]).to.match(/^application\/json/);
  const body = JSON.parse(a.body) as { error: { message: string; type: string } };
  expect(body.error.type).to.equal("invalid_request_error");
  expect(body.error.message).to.be.a("string").and.not.equal("");
}

function expectAnthropicError(a: RawAnswer, status: number): void {
  expect(a.status, a.body).to.equal(status);
  const body = JSON.parse(a.body) as { type: string; error: { type: string; message: string } };
  expect(body.type).to.equal("error");
  expect(body.error.message).to.be.a("string").and.not.equal("");
}

describe("HTTP edges: refused requests are answered in the route's shape", function () {
  this.timeout(60_000);
  let server: TestServer;
  const BODY_LIMIT = 4096;
  before(async () => {
    server = await startTestServer({ slots: 1, app: { body_limit_bytes: BODY_LIMIT } });
  });
  after(async () => {
    await server?.close();
  });
  const host = () => `Host: 127.0.0.1:${server.port}\r\n`;

  for (const kb of [17, 64]) {
    it(`a ${kb} KB header gets 431 (OpenAI shape), and the answer arrives`, async () => {
      const a = await exchange(server.port, `GET /v1/models HTTP/1.1\r\n${host()}X-Big: ${"a".repeat(kb * 1024)}\r\n\r\n`);
      expectOpenAiError(a, 431);
      expect(a.headers.connection).to.equal("close");
    });
    it(`a ${kb} KB header under /v1/messages gets 431 in the Anthropic shape`, async () => {
      const a = await exchange(server.port, `POST /v1/messages HTTP/1.1\r\n${host()}X-Big: ${"a".repeat(kb * 1024)}\r\nContent-Length: 2\r\n\r\n{}`);
      expectAnthropicError(a, 431);
    });
  }

  it("a 64 KB URL gets 431", async () => {
    const a = await exchange(server.port, `GET /v1/models?x=${"a".repeat(64 * 1024)} HTTP/1.1\r\n${host()}\r\n`);
    expectOpenAiError(a, 431);
  });

  it("a body over the limit gets 413, and the answer arrives while the body is still coming", async () => {
    const body = JSON.stringify({ messages: [{ role: "user", content: "x".repeat(256 * 1024) }] });
    const a = await exchange(server.port, `POST /v1/chat/completions HTTP/1.1\r\n${host()}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    expect(a.status, a.body).to.equal(413);
    expect(JSON.parse(a.body).error.code).to.equal("payload_too_large");
    const m = await exchange(server.port, `POST /v1/messages HTTP/1.1\r\n${host()}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    expectAnthropicError(m, 413);
    expect(JSON.parse(m.body).error.type).to.equal("request_too_large");
  });

  it("malformed bytes get 400", async () => {
    expectOpenAiError(await exchange(server.port, `GET /v1/models HTTP/1.1\r\n${host()}Not a header line\r\n\r\n`), 400);
    expectAnthropicError(await exchange(server.port, `POST /v1/messages HTTP/1.1\r\n${host()}Content-Length: x\r\n\r\n`), 400);
  });

  it("an unknown method gets 405", async () => {
    const a = await exchange(server.port, `FROB /v1/models HTTP/1.1\r\n${host()}\r\n`);
    expectOpenAiError(a, 405);
    expect(a.headers.allow).to.equal("GET, POST, HEAD");
  });

  it("CONNECT gets 405", async () => {
    const a = await exchange(server.port, `CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n`);
    expectOpenAiError(a, 405);
  });

  for (const version of ["HTTP/2.0", "HTTP/3.0", "HTTP/1.2"]) {
    it(`${version} in an HTTP/1 request line gets 505`, async () => {
      expectOpenAiError(await exchange(server.port, `GET /v1/models ${version}\r\n${host()}\r\n`), 505);
      expectAnthropicError(await exchange(server.port, `POST /v1/messages ${version}\r\n${host()}Content-Length: 2\r\n\r\n{}`), 505);
    });
  }

  it("the server still serves after all of these", async () => {
    const r = await fetch(server.url + "/v1/models");
    expect(r.status).to.equal(200);
  });
});
