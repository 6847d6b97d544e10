// `mashbox conformance BASE_URL`: a live server on a fixture model passes every check it is put
// to; a deliberately broken mock is caught, one line per broken (operation, check); a stream cut
// short fails the stream check. The report's last line is always "N passed, N failed".
import { expect } from "chai";
import { spawn, type ChildProcess } from "node:child_process";
import { createServer, type Server } from "node:http";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { checkStream, parseJunit } from "../../src/conformance/conformance.js";
import { cmdConformance } from "../../src/conformance/command.js";
import { defaultModelPath } from "../helpers/server.js";

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

async function conformance(args: string[]): Promise<Run> {
  let stdout = "";
  let stderr = "";
  const code = await cmdConformance(args, (s) => (stdout += s), (s) => (stderr += s));
  return { code, stdout, stderr };
}

function lines(out: string): { fails: string[]; count: { passed: number; failed: number } } {
  const all = out.trimEnd().split("\n");
  const m = /^(\d+) passed, (\d+) failed$/.exec(all[all.length - 1]);
  expect(m, `last line: ${all[all.length - 1]}`).to.not.equal(null);
  return { fails: all.filter((l) => l.startsWith("FAIL ")), count: { passed: Number(m![1]), failed: Number(m![2]) } };
}

/** `mashbox run` on a fixture model as its own process (the command checks servers it did not start). */
async function startCliServer(extra: string[] = [], env: Record<string, string> = {}): Promise<{ url: string; child: ChildProcess; stop(): Promise<void> }> {
  const child = spawn(process.execPath, ["bin/mashbox.js", "run", defaultModelPath(), "--port", "0", "--threads", "1", "--slots", "2", "--ctx", "256", ...extra], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, ...env },
  });
  let log = "";
  child.stderr!.setEncoding("utf8").on("data", (d: string) => (log += d));
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const stop = async () => {
    child.kill("SIGTERM");
    await exited;
  };
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`server not ready: ${log}`)), 45000);
      const poll = setInterval(() => {
        const m = /listening on (http:\/\/\S+)/.exec(log);
        if (/ready —/.test(log) && m) {
          clearTimeout(t);
          clearInterval(poll);
          resolve(m[1].replace("0.0.0.0", "127.0.0.1"));
        }
        if (child.exitCode !== null) {
          clearTimeout(t);
          clearInterval(poll);
          reject(new Error(`server exited: ${log}`));
        }
      }, 100);
    });
    return { url, child, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("mashbox conformance", function () {
  this.timeout(120000);

  it("passes a live mashbox on a fixture model, with a key, every operation", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mashbox-conf-"));
    const keyFile = join(dir, "keys");
    writeFileSync(keyFile, "sk-conformance-test team\n");
    const server = await startCliServer(["--api-key-file", keyFile]);
    try {
      // The fixture's model id is its file name, not the placeholder the contract's examples carry.
      const r = await conformance([server.url, "--api-key", "sk-conformance-test", "--examples", "1", "--phases", "examples,fuzzing", "--report-dir", join(dir, "report"), "--timeout", "100"]);
      const { fails, count } = lines(r.stdout);
      expect(fails, r.stderr).to.deep.equal([]);
      expect(r.code).to.equal(0);
      // Every operation × 4 schemathesis checks + one ending per streamed operation + the key refusal.
      const doc = JSON.parse(readFileSync("openapi.json", "utf8")) as { paths: Record<string, Record<string, { responses?: Record<string, { content?: object }> }>> };
      const methods = ["get", "head", "post", "put", "patch", "delete", "options"];
      const ops = Object.values(doc.paths).flatMap((item) => Object.entries(item).filter(([m]) => methods.includes(m)).map(([, op]) => op));
      const streamed = ops.filter((op) => op.responses?.["200"]?.content && "text/event-stream" in op.responses["200"].content!);
      expect(streamed.length).to.be.at.least(4);
      expect(count).to.deep.equal({ passed: ops.length * 4 + streamed.length + 1, failed: 0 });
      const models = (await (await fetch(`${server.url}/v1/models`, { headers: { authorization: "Bearer sk-conformance-test" } })).json()) as { data: { id: string }[] };
      const filled = readFileSync(join(dir, "report", "openapi.filled.json"), "utf8");
      expect(filled).to.include(`"model": ${JSON.stringify(models.data[0].id)}`);
    } finally {
      await server.stop();
    }
  });

  it("names each broken answer of a mock, one line per failed check, and counts the rest", async () => {
    const asked: string[] = [];
    const mock = createServer((req, res) => {
      const json = (status: number, body: unknown) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(body));
      };
      if (req.headers.authorization !== "Bearer sk-mock") return json(401, { error: { message: "no key", type: "invalid_request_error", param: null, code: "invalid_api_key" } });
      const path = new URL(req.url ?? "/", "http://mock").pathname;
      if (path === "/v1/models") return json(200, { object: "list", data: [{ id: "mock-model", object: "model", owned_by: "mashbox-labs", created: 0, max_model_len: 256 }] });
      if (path.startsWith("/v1/models/")) {
        asked.push(decodeURIComponent(path.slice("/v1/models/".length)));
        return json(200, { id: 5 }); // the deliberate defect: not a Model
      }
      json(404, { error: { message: "not here", type: "invalid_request_error", param: null, code: "not_found" } });
    });
    const url = await listen(mock);
    try {
      const r = await conformance([url, "--api-key", "sk-mock", "--examples", "2", "--operation", "listModels", "--operation", "getModel", "--timeout", "100"]);
      const { fails, count } = lines(r.stdout);
      expect(r.code).to.equal(1);
      expect(fails.some((l) => /^FAIL GET \/v1\/models\/\{model\} response_schema_conformance: ST108 /.test(l)), r.stdout).to.equal(true);
      expect(fails.filter((l) => l.startsWith("FAIL GET /v1/models ")), "listModels answers correctly").to.deep.equal([]);
      expect(count.failed).to.equal(fails.length);
      expect(count.passed).to.be.at.least(4 + 1); // listModels' four checks and the key refusal
      // The example's placeholder was replaced by the id the mock reports.
      expect(asked).to.include("mock-model");
    } finally {
      mock.close();
    }
  });

  it("fails a stream that stops before its closing event, and passes a whole one", async () => {
    const mock = createServer((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write('data: {"n":1}\n\n');
      res.end(req.url === "/whole" ? "data: [DONE]\n\n" : "");
    });
    const url = await listen(mock);
    try {
      const end = { done_data: "[DONE]" };
      const validate = (payload: unknown) => (payload === "[DONE]" || (payload as { n?: number }).n === 1 ? [] : ["bad payload"]);
      expect(await checkStream(`${url}/whole`, {}, {}, 10, validate, end)).to.deep.equal([]);
      expect(await checkStream(`${url}/cut`, {}, {}, 10, validate, end)).to.deep.equal(["the stream does not end with data: [DONE]"]);
    } finally {
      mock.close();
    }
  });

  it("reads schemathesis's junit report: a check fails once per operation, errors are grouped, skipped operations do not count", () => {
    const refused = "Network Error\n\nConnection failed\n\n    Failed to establish a new connection: [Errno 111] Connection refused\n";
    const xml = `<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="schemathesis">
  <testcase name="GET /health" time="0.1"/>
  <testcase name="GET /v1/models" time="0.2"><failure type="failure" message="ST101, ST108">1. Test Case ID: abc123

- ST101 Server error

- ST108 Response violates schema

    &quot;object&quot; is a required property

    Validated against the response schema for status code 200.

2. Test Case ID: def456

- ST108 Response violates schema

    &quot;data&quot; is a required property
</failure></testcase>
  <testcase name="POST /v1/completions" time="0.3">${[1, 2, 3].map(() => `<error type="error">${refused}</error>`).join("")}</testcase>
  <testcase name="GET /metrics" time="0"><skipped message="No examples in schema"/></testcase>
</testsuite></testsuites>`;
    const r = parseJunit(xml);
    expect(r.failures).to.deep.equal([
      "FAIL GET /v1/models not_a_server_error: ST101 Server error (case abc123)",
      'FAIL GET /v1/models response_schema_conformance: ST108 Response violates schema: "object" is a required property (case abc123)',
      "FAIL POST /v1/completions request_error: Network Error: Failed to establish a new connection: [Errno 111] Connection refused (3 cases)",
    ]);
    // GET /health: 4; GET /v1/models: the two checks that did not fail; nothing for the errored or skipped ones.
    expect(r.passed).to.equal(4 + 2);
  });

  it("refuses bad arguments with exit 2, and an unreachable server with one failure", async () => {
    expect((await conformance([])).code).to.equal(2);
    expect((await conformance(["http://127.0.0.1:1", "--phases", "stateful"])).code).to.equal(2);
    expect((await conformance(["http://127.0.0.1:1", "--operation", "noSuchOperation"])).code).to.equal(2);
    const r = await conformance(["http://127.0.0.1:1"]);
    expect(r.code).to.equal(1);
    expect(r.stdout).to.match(/^FAIL GET \/v1\/models request_error: .*does not answer.*\n0 passed, 1 failed\n$/);
  });
});
