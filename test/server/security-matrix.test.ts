// Authorization is decided from the operation the router matched, never from how the path was
// spelt: every operation × path spellings × keys presented × bind host, and the same spellings
// through the Host and Origin guards and --metrics-without-key. A spelling the router takes for
// an operation must get exactly that operation's answer (with a key) or 401 (without); one it
// does not take is unmatched, which with keys configured is 401 without a key and 404 with one.
import { expect } from "chai";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { operations, operationIds, type OperationId } from "../../src/generated/operations.js";
import { canonicalPath } from "../../src/http/route.js";
import { rawRequest, startTestServer, type TestServer } from "../helpers/server.js";

const dir = mkdtempSync(join(tmpdir(), "mashbox-secmatrix-"));
const KEY_FILE = join(dir, "keys.txt");
const KEY = "sk-matrix-right";
writeFileSync(KEY_FILE, `${KEY} team\n`);
const MODEL = "test-model";

const BODIES: Partial<Record<OperationId, unknown>> = {
  createChatCompletion: { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 1 },
  createCompletion: { model: MODEL, prompt: "hi", max_tokens: 1 },
  createMessage: { model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "hi" }] },
  countMessageTokens: { model: MODEL, messages: [{ role: "user", content: "hi" }] },
  createResponse: { model: MODEL, input: "hi", max_output_tokens: 1 },
};

/** The operation's path with its parameters filled in. */
function pathOf(id: OperationId): string {
  return operations[id].path.replace("{model}", MODEL);
}

/**
 * Spellings of `p`: those that normalise to it (RFC 3986 §6.2.2: doubled and trailing slashes,
 * dot segments, percent-encoded unreserved characters) and those that must not (case, an encoded
 * slash). Each says which it is, checked against canonicalPath itself.
 */
function spellings(p: string): { path: string; same: boolean }[] {
  const segs = p.split("/").slice(1);
  const out: { path: string; same: boolean }[] = [
    { path: p, same: true },
    { path: "/" + p, same: true },
    { path: p === "/" ? "//" : p + "/", same: true },
    { path: p === "/" ? "/./" : p.replace(/^\/([^/]+)/, "/./$1"), same: true },
    { path: p === "/" ? "/x/.." : `/${segs[0]}/zz/..${p.slice(segs[0].length + 1)}`, same: true },
    { path: p + "?q=1", same: true },
  ];
  const letter = p.search(/[a-z]/);
  if (letter >= 0) {
    const hex = "%" + p.charCodeAt(letter).toString(16).toUpperCase();
    out.push({ path: p.slice(0, letter) + hex + p.slice(letter + 1), same: true });
    out.push({ path: p.slice(0, letter) + hex.toLowerCase() + p.slice(letter + 1), same: true });
    out.push({ path: p.slice(0, letter) + p[letter].toUpperCase() + p.slice(letter + 1), same: false });
  }
  if (segs.length > 1) {
    out.push({ path: p.replace(/\/([^/]+)$/, "//$1"), same: true });
    out.push({ path: p.replace(/\/([^/]+)$/, "%2F$1"), same: false });
  }
  return out;
}

type KeyState = "none" | "wrong" | "bearer" | "x-api-key" | "both";
const KEY_STATES: KeyState[] = ["none", "wrong", "bearer", "x-api-key", "both"];
function keyHeaders(k: KeyState): Record<string, string> {
  switch (k) {
    case "none":
      return {};
    case "wrong":
      return { authorization: "Bearer sk-matrix-wrong", "x-api-key": "sk-matrix-wrong" };
    case "bearer":
      return { authorization: `Bearer ${KEY}` };
    case "x-api-key":
      return { "x-api-key": KEY };
    case "both":
      return { authorization: "Bearer sk-matrix-wrong", "x-api-key": KEY };
  }
}
const hasKey = (k: KeyState) => k === "bearer" || k === "x-api-key" || k === "both";

async function send(s: TestServer, id: OperationId, path: string, headers: Record<string, string>) {
  const method = operations[id].method;
  const body = BODIES[id];
  return rawRequest(s.port, {
    method,
    path,
    headers: { host: `127.0.0.1:${s.port}`, ...(body ? { "content-type": "application/json" } : {}), ...headers },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
}

/** Runs `jobs` a few at a time (the engine has two slots; more only queue). */
async function inBatches<T>(jobs: (() => Promise<T>)[], width = 6): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < jobs.length; i += width) out.push(...(await Promise.all(jobs.slice(i, i + width).map((j) => j()))));
  return out;
}

describe("security: the key decision follows the matched operation, whatever the path's spelling", function () {
  this.timeout(300000);
  const servers: Record<string, TestServer> = {};
  before(async () => {
    // Loopback with a key file, and every interface (keys mandatory there); both listen on
    // 127.0.0.1 in the test, the bind host is what the security layer is configured with.
    servers.loopback = await startTestServer({ api_keys_file: KEY_FILE });
    servers.any = await startTestServer({ api_keys_file: KEY_FILE, host: "0.0.0.0" });
    servers.metrics_open = await startTestServer({ api_keys_file: KEY_FILE, app: { metrics_without_key: true } });
  });
  after(async () => {
    for (const s of Object.values(servers)) await s.close();
  });

  it("the spellings used here normalise as they claim", () => {
    for (const id of operationIds) {
      for (const sp of spellings(pathOf(id))) {
        const canon = canonicalPath(sp.path.split("?")[0]);
        expect(canon === pathOf(id), `${sp.path} -> ${canon}`).to.equal(sp.same);
      }
    }
  });

  for (const host of ["loopback", "any"] as const) {
    it(`${host}: every operation × spelling × key: 401 without a right key, the operation's own answer with one`, async () => {
      const s = servers[host];
      const failures: string[] = [];
      for (const id of operationIds) {
        const canon = await send(s, id, pathOf(id), keyHeaders("bearer"));
        expect(canon.status, `${id} canonical with key: ${canon.body.slice(0, 200)}`).to.be.oneOf([200]);
        const jobs = spellings(pathOf(id)).flatMap((sp) =>
          KEY_STATES.map((k) => async () => {
            const r = await send(s, id, sp.path, keyHeaders(k));
            const needsKey = sp.same ? operations[id].key : true;
            let want: number;
            if (needsKey && !hasKey(k)) want = 401;
            else if (sp.same) want = canon.status;
            else want = operations[id].method === "HEAD" ? canon.status : 404; // HEAD on any path is the ready check
            if (r.status !== want) failures.push(`${operations[id].method} ${sp.path} key=${k}: ${r.status}, want ${want} ${r.body.slice(0, 120)}`);
            if (want === 401 && operations[id].method !== "HEAD") {
              const err = JSON.parse(r.body);
              if (err.error?.type !== "authentication_error") failures.push(`${sp.path} key=${k}: 401 body ${r.body.slice(0, 120)}`);
            }
            if (sp.same && r.status === 200 && canon.headers["content-type"] !== r.headers["content-type"])
              failures.push(`${sp.path} key=${k}: content-type ${r.headers["content-type"]} vs ${canon.headers["content-type"]}`);
          }),
        );
        await inBatches(jobs);
      }
      expect(failures, failures.join("\n")).to.deep.equal([]);
    });
  }

  it("a 401 on an Anthropic route is in the Anthropic shape, whatever the spelling", async () => {
    const s = servers.loopback;
    for (const sp of spellings("/v1/messages").filter((x) => x.same)) {
      const r = await send(s, "createMessage", sp.path, {});
      expect(r.status, sp.path).to.equal(401);
      expect(JSON.parse(r.body), sp.path).to.deep.include({ type: "error" });
    }
  });

  it("the Host and Origin guards hold for every operation and spelling, before the key", async () => {
    const s = servers.any;
    const failures: string[] = [];
    const jobs = operationIds.flatMap((id) =>
      spellings(pathOf(id)).flatMap((sp) => [
        async () => {
          const r = await send(s, id, sp.path, { ...keyHeaders("bearer"), host: `evil.example:${s.port}` });
          if (r.status !== 403) failures.push(`Host evil ${sp.path}: ${r.status}`);
        },
        async () => {
          const r = await send(s, id, sp.path, { ...keyHeaders("bearer"), origin: "http://evil.example" });
          if (r.status !== 403) failures.push(`Origin evil ${sp.path}: ${r.status}`);
        },
      ]),
    );
    await inBatches(jobs);
    expect(failures, failures.join("\n")).to.deep.equal([]);
  });

  it("an absolute-form target must name this server too", async () => {
    const s = servers.loopback;
    const evil = await rawRequest(s.port, { path: "http://evil.example/v1/models", headers: { host: `127.0.0.1:${s.port}`, ...keyHeaders("bearer") } });
    expect(evil.status).to.equal(403);
    expect(JSON.parse(evil.body).error.code).to.equal("forbidden_host");
    const own = await rawRequest(s.port, { path: `http://127.0.0.1:${s.port}//v1/models/`, headers: { host: `127.0.0.1:${s.port}`, ...keyHeaders("bearer") } });
    expect(own.status).to.equal(200);
    const ownNoKey = await rawRequest(s.port, { path: `http://127.0.0.1:${s.port}//v1/models/`, headers: { host: `127.0.0.1:${s.port}` } });
    expect(ownNoKey.status).to.equal(401);
  });

  it("--metrics-without-key opens only the metrics operation, in every spelling", async () => {
    const s = servers.metrics_open;
    const failures: string[] = [];
    for (const id of operationIds) {
      for (const sp of spellings(pathOf(id))) {
        const r = await send(s, id, sp.path, {});
        const open = sp.same && (id === "getMetrics" || !operations[id].key);
        if (open ? r.status === 401 : r.status !== 401) failures.push(`${operations[id].method} ${sp.path}: ${r.status}`);
      }
    }
    expect(failures, failures.join("\n")).to.deep.equal([]);
  });
});
