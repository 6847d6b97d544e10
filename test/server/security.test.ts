// Who may talk to the server: key file parsing, constant-time key matching, tenants, the Host
// (DNS rebinding) and Origin guards, 401/200 with keys, refusal to start open to the network.
import { expect } from "chai";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { ApiKeys, allowedHosts, loadApiKeys, parseKeyFile } from "../../src/security.js";
import { createApp } from "../../src/server.js";
import { rawRequest, startTestServer, type TestServer } from "../helpers/server.js";

const dir = mkdtempSync(join(tmpdir(), "mashbox-sec-"));
const KEY_FILE = join(dir, "keys.txt");
writeFileSync(
  KEY_FILE,
  [
    "# team keys",
    "sk-alice-1   team-a",
    "sk-alice-2\tteam-a   # same tenant as alice-1",
    "sk-bob       team-b",
    "sk-lonely",
    "sk-with#hash",
    "",
  ].join("\n"),
);

describe("security: key file", () => {
  it("parses keys, tenants and comments", () => {
    const entries = parseKeyFile(
      "# comment\nk1 team one\n  k2   team one  \nk3\nk4 # trailing comment\nk5#notacomment other\n\n",
    );
    expect(entries.map((e) => e.key)).to.deep.equal(["k1", "k2", "k3", "k4", "k5#notacomment"]);
    expect(entries[0].tenant).to.equal(entries[1].tenant); // shared name "team one"
    expect(entries[2].tenant).to.not.equal(entries[3].tenant); // unnamed keys are separate tenants
    expect(entries[2].tenant).to.not.include("k3"); // the key never becomes the tenant label
    expect(entries[4].tenant).to.not.equal(entries[0].tenant);
  });

  it("rejects one key listed under two tenants", () => {
    expect(() => parseKeyFile("k1 a\nk1 b\n")).to.throw(/repeats a key/);
  });

  it("matches keys to tenants, and nothing else", () => {
    const keys = new ApiKeys(parseKeyFile("sk-a ta\nsk-b ta\nsk-c\n"));
    expect(keys.match("sk-a")).to.equal(keys.match("sk-b")).and.to.be.a("string");
    expect(keys.match("sk-c")).to.be.a("string").and.not.equal(keys.match("sk-a"));
    expect(keys.match("sk-")).to.equal(null);
    expect(keys.match("sk-a ")).to.equal(null);
    expect(keys.match("")).to.equal(null);
  });

  it("adds MASHBOX_API_KEY and refuses an empty key file", () => {
    const keys = loadApiKeys({ file: KEY_FILE, env_key: "sk-env" })!;
    expect(keys.size).to.equal(6);
    expect(keys.match("sk-env")).to.be.a("string");
    const empty = join(dir, "empty.txt");
    writeFileSync(empty, "# nothing\n");
    expect(() => loadApiKeys({ file: empty })).to.throw(/holds no key/);
    expect(loadApiKeys({})).to.equal(null);
  });

  it("answers to loopback names with the port, and to the --host value", () => {
    const hosts = allowedHosts("127.0.0.1", 8123);
    for (const h of ["localhost:8123", "127.0.0.1:8123", "[::1]:8123"]) expect(hosts.has(h), h).to.equal(true);
    expect(hosts.has("localhost:8124")).to.equal(false);
    expect(hosts.has("evil.example:8123")).to.equal(false);
    expect(allowedHosts("box.lan", 80).has("box.lan")).to.equal(true);
  });
});

describe("security: refusing to start open to the network", () => {
  const engine = { state: "loading", model: {}, stats: () => ({}) } as never;
  it("createApp throws on a non-loopback host without keys, naming the fix", () => {
    expect(() => createApp({ engine, model_id: "m", host: "0.0.0.0" })).to.throw(/API key is required.*--api-key-file.*MASHBOX_API_KEY/);
  });
  it("mashbox run --host 0.0.0.0 exits 2 with the message", () => {
    const env = { ...process.env };
    delete env.MASHBOX_API_KEY;
    const r = spawnSync(process.execPath, ["bin/mashbox.js", "run", "--host", "0.0.0.0"], { encoding: "utf8", env, timeout: 30000 });
    expect(r.status).to.equal(2);
    expect(r.stderr).to.match(/not a loopback address, so an API key is required/);
  });
});

describe("security: HTTP", function () {
  this.timeout(120000);
  let open: TestServer;
  let keyed: TestServer;
  before(async () => {
    open = await startTestServer();
    keyed = await startTestServer({ api_keys_file: KEY_FILE, host: "0.0.0.0" });
  });
  after(async () => {
    await open?.close();
    await keyed?.close();
  });

  it("403 for a Host the server does not answer to (DNS rebinding)", async () => {
    const r = await rawRequest(open.port, { path: "/v1/models", headers: { host: `evil.example:${open.port}` } });
    expect(r.status).to.equal(403);
    expect(JSON.parse(r.body).error.code).to.equal("forbidden_host");
    const ok = await rawRequest(open.port, { path: "/v1/models", headers: { host: `localhost:${open.port}` } });
    expect(ok.status).to.equal(200);
  });

  it("403 for a browser request from another origin, not for its own", async () => {
    const r = await rawRequest(open.port, { path: "/v1/models", headers: { origin: "http://evil.example" } });
    expect(r.status).to.equal(403);
    expect(JSON.parse(r.body).error.code).to.equal("forbidden_origin");
    const nul = await rawRequest(open.port, { path: "/v1/models", headers: { origin: "null" } });
    expect(nul.status).to.equal(403);
    const own = await rawRequest(open.port, { path: "/v1/models", headers: { origin: `http://localhost:${open.port}` } });
    expect(own.status).to.equal(200);
  });

  it("403 on the Anthropic route comes in the Anthropic shape", async () => {
    const r = await rawRequest(open.port, {
      method: "POST",
      path: "/v1/messages",
      headers: { origin: "https://evil.example", "content-type": "application/json" },
      body: "{}",
    });
    expect(r.status).to.equal(403);
    expect(JSON.parse(r.body)).to.deep.include({ type: "error" });
    expect(JSON.parse(r.body).error.type).to.equal("permission_error");
  });

  it("on loopback without keys, any key a client sends is ignored", async () => {
    const r = await fetch(`${open.url}/v1/models`, { headers: { authorization: "Bearer whatever" } });
    expect(r.status).to.equal(200);
  });

  it("with keys: 401 without or with a wrong key, on /v1/*, /metrics and /openapi.json", async () => {
    for (const path of ["/v1/models", "/metrics", "/openapi.json", "/v1/health"]) {
      const r = await fetch(keyed.url + path);
      expect(r.status, path).to.equal(401);
    }
    const wrong = await fetch(`${keyed.url}/v1/models`, { headers: { authorization: "Bearer sk-alice-3" } });
    expect(wrong.status).to.equal(401);
    expect((await wrong.json()).error.code).to.equal("unauthorized");
    const anth = await fetch(`${keyed.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(anth.status).to.equal(401);
    expect((await anth.json()).error.type).to.equal("authentication_error");
  });

  it("with keys: 200 with Authorization: Bearer or x-api-key; /health stays open", async () => {
    const bearer = await fetch(`${keyed.url}/v1/models`, { headers: { authorization: "Bearer sk-alice-2" } });
    expect(bearer.status).to.equal(200);
    const xkey = await fetch(`${keyed.url}/metrics`, { headers: { "x-api-key": "sk-with#hash" } });
    expect(xkey.status).to.equal(200);
    const health = await fetch(`${keyed.url}/health`);
    expect(health.status).to.equal(200);
  });

  it("never logs a key", async () => {
    await fetch(`${keyed.url}/v1/models`, { headers: { authorization: "Bearer sk-bob" } });
    expect(keyed.logs.join("\n")).to.not.include("sk-bob");
    expect(keyed.logs.some((l) => l.startsWith("GET /v1/models 200"))).to.equal(true);
  });
});

describe("security: tenants reach requestTenant", () => {
  it("keys sharing a name share a tenant; an unnamed key is its own", async () => {
    const Koa = (await import("koa")).default;
    const { securityMiddleware } = await import("../../src/security.js");
    const { requestTenant } = await import("../../src/app/context.js");
    const keys = loadApiKeys({ file: KEY_FILE })!;
    const app = new Koa();
    let port = 0;
    app.use(async (ctx, next) => {
      try {
        await next();
      } catch (e) {
        ctx.status = (e as { status: (d: string) => number }).status("openai");
      }
    });
    app.use(securityMiddleware({ host: "127.0.0.1", port: () => port, keys, operation: () => undefined }));
    app.use((ctx) => {
      ctx.body = { tenant: requestTenant(ctx).tenant ?? null };
    });
    const server = app.listen(0, "127.0.0.1");
    await new Promise((r) => server.once("listening", r));
    port = (server.address() as { port: number }).port;
    const tenantOf = async (key: string) => {
      const r = await fetch(`http://127.0.0.1:${port}/v1/x`, { headers: { "x-api-key": key } });
      return r.status === 200 ? (await r.json()).tenant : r.status;
    };
    try {
      const a1 = await tenantOf("sk-alice-1");
      const a2 = await tenantOf("sk-alice-2");
      const b = await tenantOf("sk-bob");
      const lonely = await tenantOf("sk-lonely");
      expect(a1).to.be.a("string").and.equal(a2);
      expect(b).to.be.a("string").and.not.equal(a1);
      expect(lonely).to.be.a("string").and.not.equal(a1).and.not.equal(b);
      expect(await tenantOf("sk-nobody")).to.equal(401);
    } finally {
      server.close();
    }
  });
});
