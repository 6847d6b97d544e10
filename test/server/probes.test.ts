// Bad input never hurts anyone else (issue 12.6): bounded probes of malformed JSON, wrong types,
// header and method abuse, oversized bodies, aborts and floods against one live server on a
// fixture model. Each answer must be a clear 4xx in the route's own error shape (OpenAI's on
// /v1/chat etc., Anthropic's on /v1/messages*), never a 500 or a hang; and through all of it
// Health must stay ok and quick, the worker must keep its pid, and a concurrent request must
// keep being answered.
import { expect } from "chai";
import { connect } from "node:net";
import { startLiveServer, type LiveServer } from "../helpers/live.js";

const BODY_LIMIT = 256 * 1024;

type Reply = { status: number; headers: Record<string, string>; body: string };

/** One request written byte for byte on its own socket; resolves with the parsed answer. */
function raw(port: number, head: string, body: string | Buffer = "", opts: { timeout_ms?: number } = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no answer in ${opts.timeout_ms ?? 10_000} ms to ${head.split("\r\n")[0]}`));
    }, opts.timeout_ms ?? 10_000);
    sock.on("data", (d) => {
      chunks.push(d);
      const text = Buffer.concat(chunks).toString("latin1");
      const end = text.indexOf("\r\n\r\n");
      if (end < 0) return;
      const length = /\r\ncontent-length: (\d+)/i.exec(text.slice(0, end))?.[1];
      if (length !== undefined && text.length - end - 4 >= Number(length)) sock.end();
    });
    sock.on("error", () => undefined);
    sock.on("close", () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString("utf8");
      const end = text.indexOf("\r\n\r\n");
      const lines = text.slice(0, end).split("\r\n");
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(":");
        headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ status: Number(lines[0]?.split(" ")[1] ?? 0), headers, body: end < 0 ? "" : text.slice(end + 4) });
    });
    sock.write(head);
    if (body.length) sock.write(body);
  });
}

function post(port: number, path: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<Reply> {
  const h = { Host: `127.0.0.1:${port}`, "Content-Type": "application/json", "Content-Length": String(Buffer.byteLength(body)), Connection: "close", ...headers };
  const head = `POST ${path} HTTP/1.1\r\n${Object.entries(h).map(([k, v]) => `${k}: ${v}`).join("\r\n")}\r\n\r\n`;
  return raw(port, head, body);
}

function get(port: number, path: string, headers: Record<string, string> = {}, method = "GET"): Promise<Reply> {
  const h = { Host: `127.0.0.1:${port}`, Connection: "close", ...headers };
  return raw(port, `${method} ${path} HTTP/1.1\r\n${Object.entries(h).map(([k, v]) => `${k}: ${v}`).join("\r\n")}\r\n\r\n`);
}

/** The route's error shape, and a 4xx. */
function expectError(r: Reply, status: number | number[], dialect: "openai" | "anthropic", what: string): Record<string, any> {
  const want = Array.isArray(status) ? status : [status];
  expect(r.status, `${what}: status (${r.body.slice(0, 200)})`).to.be.oneOf(want);
  const body = JSON.parse(r.body);
  if (dialect === "anthropic") {
    expect(body.type, `${what}: Anthropic shape`).to.equal("error");
    expect(body.error.type, what).to.be.a("string");
    expect(body.error.message, what).to.be.a("string").and.not.equal("");
  } else {
    expect(body.error.type, `${what}: OpenAI shape`).to.be.a("string");
    expect(body.error.message, what).to.be.a("string").and.not.equal("");
  }
  return body;
}

const chat = (extra: Record<string, unknown> = {}) => JSON.stringify({ messages: [{ role: "user", content: "Hi" }], max_tokens: 1, ...extra });
const message = (extra: Record<string, unknown> = {}) => JSON.stringify({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "Hi" }], ...extra });

describe("probes: bad input never hurts anyone else", function () {
  this.timeout(60_000);
  let server: LiveServer;
  let port: number;
  let pid: number | undefined;
  let restarts: number;
  // Health is polled all along; its slowest answer and any non-ok status are checked at the end.
  let watching = true;
  let slowest_health_ms = 0;
  const health_status = new Set<string>();
  let watcher: Promise<void>;

  before(async () => {
    server = await startLiveServer({ ctx: 1024, slots: 2, app: { body_limit_bytes: BODY_LIMIT, allowed_hosts: ["llm.example.com"] } });
    port = server.port;
    const h = await (await fetch(server.url + "/v1/health")).json();
    pid = h.worker_pid;
    restarts = h.worker_restarts;
    expect(pid).to.be.a("number");
    watcher = (async () => {
      while (watching) {
        const t0 = performance.now();
        const r = await fetch(server.url + "/v1/health");
        health_status.add(`${r.status} ${(await r.json()).status}`);
        slowest_health_ms = Math.max(slowest_health_ms, performance.now() - t0);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
  });

  after(async () => {
    watching = false;
    await watcher;
    await server?.close();
  });

  it("unknown query parameters are ignored like unknown body fields", async () => {
    expect((await get(port, "/v1/health?a=1&cache=bust")).status).to.equal(200);
    expect((await get(port, "/v1/models?x")).status).to.equal(200);
    expect((await post(port, "/v1/chat/completions?api-version=2024-10-21", chat())).status).to.equal(200);
    expect((await post(port, "/v1/messages?beta=true&x=1", message())).status).to.equal(200);
    expect((await post(port, "/v1/messages/count_tokens?beta=true&x=1", message())).status).to.equal(200);
  });

  it("bad percent-encoding is 404, not 500", async () => {
    expectError(await get(port, "/v1/models/%ff"), 404, "openai", "/v1/models/%ff");
    expectError(await get(port, "/v1/models/%E0%A4%A"), 404, "openai", "/v1/models/%E0%A4%A");
    expectError(await get(port, "/v1/%zz"), 404, "openai", "/v1/%zz");
  });

  it("a body over the limit is 413 in the route's shape, refused by Content-Length before it is sent", async () => {
    // Headers only: the answer must come without the server waiting for 100 MB.
    const head = (path: string) =>
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${100 * 1024 * 1024}\r\nConnection: close\r\n\r\n`;
    expectError(await raw(port, head("/v1/chat/completions"), "", { timeout_ms: 3000 }), 413, "openai", "declared 100 MB");
    const anthropic = expectError(await raw(port, head("/v1/messages"), "", { timeout_ms: 3000 }), 413, "anthropic", "declared 100 MB");
    expect(anthropic.error.type).to.equal("request_too_large");
    // Chunked, no length: cut off when the count passes the limit.
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const chunked = `POST /v1/messages/count_tokens HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`;
    const body = Buffer.concat(Array.from({ length: 6 }, () => Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from("\r\n")])));
    expectError(await raw(port, chunked, body), 413, "anthropic", "chunked over the limit");
  });

  it("a prompt over the context is refused with 400 at once, even while every slot is busy", async () => {
    const busy = [0, 1].map(() => fetch(server.url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "Once", max_tokens: 400 }) }));
    await Promise.all(busy);
    const long = "lorem ipsum ".repeat(3000);
    const r = expectError(await post(port, "/v1/chat/completions", chat({ messages: [{ role: "user", content: long }] })), 400, "openai", "over the context");
    expect(r.error.code).to.equal("context_length_exceeded");
    expectError(await post(port, "/v1/messages", message({ messages: [{ role: "user", content: long }] })), 400, "anthropic", "over the context");
    for (const b of await Promise.all(busy)) await b.text();
  });

  it("malformed JSON in many forms is 400 in the route's shape", async () => {
    const bodies = ["", "{", '{"messages":', "x", "{} x", "{'a': 1}", '{"a": NaN}', '{"a": 1,}', "\ufeff{}", "[]", "null", "42", '"text"', "[".repeat(50_000), '{"a":'.repeat(20_000)];
    const bad = Buffer.from([0x7b, 0x22, 0x6d, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]); // {"m\xff\xfe":1}
    for (const path of ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"]) {
      const dialect = path.startsWith("/v1/messages") ? "anthropic" : "openai";
      for (const b of [...bodies, bad]) expectError(await post(port, path, b), 400, dialect, `${path} ${JSON.stringify(b.toString().slice(0, 20))}`);
    }
  });

  it("a body of many small wrong items is one 400, not an error per item", async () => {
    // 127k invalid entries: validating with every error collected used to overflow the stack (500)
    // and, at the 8 MiB default, take gigabytes; the first error is all a 400 needs.
    const many = '{"messages":[' + "1,".repeat(127_000) + "1]}";
    expect(many.length).to.be.lessThan(BODY_LIMIT);
    const r = expectError(await post(port, "/v1/chat/completions", many), 400, "openai", "127k wrong items");
    expect(r.error.message).to.include("messages[0]");
    expectError(await post(port, "/v1/messages", '{"model":"m","max_tokens":1,"messages":[' + "{},".repeat(80_000) + "{}]}"), 400, "anthropic", "80k empty turns");
  });

  it("wrong types are 400 naming the field", async () => {
    const chatCases: Array<[string, Record<string, unknown>]> = [
      ["messages", { messages: "hi" }],
      ["messages", { messages: [1] }],
      ["messages", { messages: [{ role: "wizard", content: "x" }] }],
      ["max_tokens", { max_tokens: "5" }],
      ["max_tokens", { max_tokens: -1 }],
      ["temperature", { temperature: "hot" }],
      ["temperature", { temperature: 99 }],
      ["stream", { stream: "yes" }],
      ["tools", { tools: {} }],
      ["n", { n: 2 }],
      ["stop", { stop: 5 }],
      ["seed", { seed: 1.5 }],
      ["top_p", { top_p: 0 }],
    ];
    for (const [field, extra] of chatCases) {
      const r = expectError(await post(port, "/v1/chat/completions", chat(extra)), 400, "openai", `chat ${JSON.stringify(extra)}`);
      expect(`${r.error.param} ${r.error.message}`, JSON.stringify(extra)).to.include(field);
    }
    const messageCases: Array<[string, Record<string, unknown>]> = [
      ["max_tokens", { max_tokens: "x" }],
      ["messages", { messages: [] }],
      ["system", { system: 5 }],
      ["thinking", { thinking: { type: "bogus" } }],
      ["tool_choice", { tool_choice: { type: "tool", name: "nope" } }],
    ];
    for (const [field, extra] of messageCases) {
      const r = expectError(await post(port, "/v1/messages", message(extra)), 400, "anthropic", `messages ${JSON.stringify(extra)}`);
      expect(r.error.message, JSON.stringify(extra)).to.include(field);
    }
  });

  it("header abuse: content types, Host, Origin, oversized and conflicting headers", async () => {
    expectError(await post(port, "/v1/chat/completions", chat(), { "Content-Type": "text/plain" }), 415, "openai", "text/plain");
    expectError(await post(port, "/v1/messages", message(), { "Content-Type": "application/x-www-form-urlencoded" }), 415, "anthropic", "form");
    expect((await post(port, "/v1/chat/completions", chat(), { "Content-Type": "application/json; charset=utf-8" })).status).to.equal(200);
    // Two Host headers, the good one first: refused (a proxy may have read the other).
    const twoHosts = `GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nHost: evil.example\r\nConnection: close\r\n\r\n`;
    expectError(await raw(port, twoHosts), 400, "openai", "two Host headers");
    expectError(await get(port, "/v1/health", { Host: "evil.example" }), 403, "openai", "foreign Host");
    // --allowed-host: the name a proxy or DNS gives the server, on any port; checks stay on.
    expect((await get(port, "/v1/health", { Host: "llm.example.com" })).status).to.equal(200);
    expect((await get(port, "/v1/models", { Host: "LLM.example.com:443", Origin: "https://llm.example.com" })).status).to.equal(200);
    expectError(await get(port, "/v1/models", { Host: "llm.example.com", Origin: "https://evil.example" }), 403, "openai", "allowed Host, foreign Origin");
    expectError(await get(port, "/v1/health", { Host: "llm.example.com.evil.example" }), 403, "openai", "allowed name as a prefix");
    expectError(await raw(port, "GET /v1/models HTTP/1.0\r\n\r\n"), 403, "openai", "no Host");
    expectError(await post(port, "/v1/messages", message(), { Origin: "http://evil.example" }), 403, "anthropic", "foreign Origin");
    expectError(await get(port, "/v1/models", { Origin: "null" }), 403, "openai", "Origin null");
    // Node's own limits answer before the app: never a 500.
    expect((await get(port, "/v1/health", { "X-Big": "a".repeat(20_000) })).status).to.equal(431);
    const smuggle = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n`;
    expect((await raw(port, smuggle)).status).to.equal(400);
    // A body shorter than its Content-Length, then the client leaves: nothing breaks.
    const sock = connect(port, "127.0.0.1");
    sock.on("error", () => undefined);
    sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"messages"`);
    await new Promise((r) => setTimeout(r, 100));
    sock.destroy();
  });

  it("method abuse: 405 with Allow on known paths, 404 elsewhere, 405 for a method HTTP does not know", async () => {
    for (const m of ["PUT", "DELETE", "PATCH", "GET"]) {
      const r = expectError(await get(port, "/v1/chat/completions", {}, m), 405, "openai", `${m} /v1/chat/completions`);
      expect(r).to.be.an("object");
    }
    const r = await get(port, "/v1/messages", {}, "DELETE");
    expectError(r, 405, "anthropic", "DELETE /v1/messages");
    expect(r.headers.allow).to.include("POST");
    expectError(await get(port, "/v1/health", {}, "POST"), [405, 415], "openai", "POST /v1/health");
    expectError(await get(port, "/v1/nothing"), 404, "openai", "unknown path");
    expect((await raw(port, `FOO / HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)).status).to.equal(405);
  });

  it("aborted requests (mid-body, right after the headers, mid-stream) free every slot", async () => {
    for (let i = 0; i < 5; i++) {
      const sock = connect(port, "127.0.0.1");
      sock.on("error", () => undefined);
      sock.write(`POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":`);
      sock.destroy();
    }
    const streams = Array.from({ length: 8 }, async (_, i) => {
      const ac = new AbortController();
      const res = await fetch(server.url + (i % 2 ? "/v1/messages" : "/v1/chat/completions"), {
        method: "POST",
        signal: ac.signal,
        headers: { "content-type": "application/json" },
        body: i % 2 ? message({ stream: true, max_tokens: 300 }) : chat({ stream: true, max_tokens: 300 }),
      });
      if (i % 4 < 2) await res.body!.getReader().read(); // some after their first bytes
      ac.abort();
    });
    await Promise.allSettled(streams);
    let free = false;
    for (let t = 0; t < 100 && !free; t++) {
      free = (await (await fetch(server.url + "/v1/health")).json()).live_rows === 0;
      if (!free) await new Promise((r) => setTimeout(r, 50));
    }
    expect(free, "Health shows every slot free").to.equal(true);
  });

  it("floods: concurrent bad requests, health checks and generations; a concurrent request is still answered", async () => {
    const t0 = performance.now();
    const sentinel = post(port, "/v1/chat/completions", chat()).then((r) => ({ r, ms: performance.now() - t0 }));
    const flood = [
      ...Array.from({ length: 40 }, () => post(port, "/v1/chat/completions", "{")),
      ...Array.from({ length: 40 }, () => get(port, "/v1/health")),
      ...Array.from({ length: 20 }, () => post(port, "/v1/messages", message({ max_tokens: "x" }))),
      ...Array.from({ length: 24 }, () => post(port, "/v1/completions", JSON.stringify({ prompt: "a", max_tokens: 2 }))),
    ];
    const replies = await Promise.all(flood);
    for (const r of replies) expect(r.status, r.body.slice(0, 120)).to.be.oneOf([200, 400, 429]);
    const { r, ms } = await sentinel;
    expect(r.status).to.equal(200);
    expect(ms, "ms for a 1-token chat sent with the flood").to.be.lessThan(15_000);
  });

  it("count_tokens of a huge single word does not hold up other requests", async () => {
    const word = "a".repeat(BODY_LIMIT - 200);
    const counting = post(port, "/v1/messages/count_tokens", message({ messages: [{ role: "user", content: word }] }));
    const t0 = performance.now();
    const r = await post(port, "/v1/chat/completions", chat());
    const ms = performance.now() - t0;
    expect(r.status).to.equal(200);
    const count = await counting;
    expect(count.status, count.body.slice(0, 200)).to.equal(200);
    expect(JSON.parse(count.body).input_tokens).to.be.greaterThan(1000);
    expect(ms, "ms for a 1-token chat sent alongside").to.be.lessThan(5_000);
  });

  it("through all of it: Health stayed ok and quick, the worker kept its pid", async () => {
    const h = await (await fetch(server.url + "/v1/health")).json();
    expect(h.status).to.equal("ok");
    expect(h.worker_pid, "worker_pid").to.equal(pid);
    expect(h.worker_restarts).to.equal(restarts);
    expect([...health_status]).to.deep.equal(["200 ok"]);
    expect(slowest_health_ms, "slowest Health answer (ms)").to.be.lessThan(2_000);
    expect(server.logs.filter((l) => / 500 /.test(l) || l.startsWith("internal error")), "no 500s").to.deep.equal([]);
  });
});
