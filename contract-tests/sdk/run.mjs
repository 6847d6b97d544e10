#!/usr/bin/env node
// The SDK matrix (`npm test` stage "sdk"; alone: node contract-tests/sdk/run.mjs): clients made
// from openapi.json by the mainstream generators must generate, compile, and talk to a live server
// on a fixture model. docs/CONTRACT.md says why the contract has the shape it has.
//
//   openapi-python-client          generate; import; call the six operations below
//   openapi-generator -g python    generate; import; call them
//   openapi-generator -g go        generate; go build with a small program; run it (calls them)
//   openapi-generator -g typescript-fetch   generate; tsc --strict with a small program; run it
//   openapi-fetch                  typed by src/generated/types.ts; tsc --strict; run it
//   openapi-generator -g java (native, okhttp-gson)  generate; mvn compile with a program; run it
//   openapi-generator -g kotlin    generate (with kotlin/fix_template.py's template); mvn compile
//                                  (contract-tests/sdk/kotlin/pom.xml); run it
//   openapi-generator -g rust      generate; cargo build with a program; run it
//
// Every program also streams chat completions, messages and responses, decoding each event's data
// into the generated event types (openapi-fetch: typing it as them).
//
// Operations called: listModels, createChatCompletion, createCompletion, createMessage,
// countMessageTokens, createResponse (not streamed), plus a refused logprobs (400 naming it).
//
// Generators are the pinned versions of requirements-ci.txt (PyPI; openapi-generator-cli ships
// its jar, run on the machine's Java) and package.json (openapi-fetch). Generated code is cached
// in $MASHBOX_HOME/sdk (default ~/.cache/mashbox/sdk, beside the model cache, so a fresh clone on
// the same machine reuses it), one folder per hash of openapi.json, the generator configs, this
// file and the versions: a run whose contract did not change skips generation. Go modules come
// through the Go module proxy (GOFLAGS=-mod=mod), Maven artifacts from Maven Central (~/.m2), crates
// from crates.io (~/.cargo). The Maven and cargo builds are cached in the same folder, each with a
// marker keyed by the hash of its program: a warm run only runs the built programs.
//
// Output: one "ok ..." / "FAIL ...: why" line per check, the time of each phase, and a closing
// "N passed, N failed" line. Exit 1 when any check failed.
//
// Environment:
//   MASHBOX_SDK_MODEL   fixture GGUF (default test/fixtures/llama-q8_0.gguf; made by npm run fixtures)
//   MASHBOX_SDK_PORT    port of the server it starts (default 18941)
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const HERE = join(ROOT, "contract-tests", "sdk");
const PORT = Number(process.env.MASHBOX_SDK_PORT ?? 18941);
const MODEL = process.env.MASHBOX_SDK_MODEL ?? "test/fixtures/llama-q8_0.gguf";
const BASE = `http://127.0.0.1:${PORT}`;
const GENERATORS = ["python", "go", "typescript-fetch", "java-native", "java-okhttp-gson", "kotlin", "rust"]; // openapi-generator, one batch run
const TSC = join(ROOT, "node_modules", ".bin", "tsc");
const CACHE = process.env.MASHBOX_HOME ? join(process.env.MASHBOX_HOME, "sdk") : join(homedir(), ".cache", "mashbox", "sdk");

let passed = 0;
let failed = 0;
const timings = [];

function ok(name) {
  passed++;
  console.log(`ok ${name}`);
}
function fail(name, why) {
  failed++;
  console.log(`FAIL ${name}: ${String(why).trim().split("\n").slice(-12).join("\n    ")}`);
}

/** Runs a command; returns { status, out } with stdout and stderr together. */
function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: ROOT, encoding: "utf8", maxBuffer: 64 << 20, ...opts, env: { ...process.env, ...opts.env } });
  return { status: r.error ? -1 : r.status, out: `${r.stdout ?? ""}${r.stderr ?? ""}${r.error ? String(r.error) : ""}` };
}

async function timed(phase, fn) {
  const t0 = performance.now();
  try {
    return await fn();
  } finally {
    timings.push(`${phase} ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
}

/** The lines a check program prints: "ok ..." and "FAIL ..." count; anything else is context. */
function countChecks(label, r) {
  let seen = 0;
  for (const line of r.out.split("\n")) {
    if (line.startsWith("ok ")) {
      seen++;
      ok(line.slice(3));
    } else if (line.startsWith("FAIL ")) {
      seen++;
      failed++;
      console.log(line);
    }
  }
  if (r.status !== 0 && seen === 0) fail(label, r.out || `exit ${r.status}`);
  else if (r.status !== 0 && !/^FAIL /m.test(r.out)) fail(label, `exit ${r.status}\n${r.out}`);
}

function toolVersion(cmd, args) {
  const r = sh(cmd, args);
  return r.status === 0 ? r.out.trim().split("\n").pop() : null;
}

// ------------------------------------------------------------ tools

/** Version of an installed Python distribution, null when it is not installed. */
function pipVersion(name) {
  const r = sh("python3", ["-c", "import importlib.metadata, sys; print(importlib.metadata.version(sys.argv[1]))", name]);
  return r.status === 0 ? r.out.trim() : null;
}

function ensureTools() {
  const missing = () => ["openapi-generator-cli", "openapi-python-client"].filter((t) => pipVersion(t) === null || sh("which", [t]).status !== 0);
  if (missing().length) {
    // The project's own setup installs them (.ci/run); a checkout that skipped it gets them here.
    sh("python3", ["-m", "pip", "install", "-q", "-r", "requirements-ci.txt"], { stdio: "inherit" });
  }
  const still = missing();
  if (still.length) throw new Error(`not installed: ${still.join(", ")} (pip install -r requirements-ci.txt)`);
  for (const [tool, args] of [["java", ["-version"]], ["go", ["version"]], ["mvn", ["-v"]], ["cargo", ["--version"]]]) {
    if (sh(tool, args).status !== 0) throw new Error(`${tool} is not on PATH`);
  }
  return {
    "openapi-generator-cli": pipVersion("openapi-generator-cli"),
    "openapi-python-client": pipVersion("openapi-python-client"),
    "openapi-fetch": JSON.parse(readFileSync(join(ROOT, "node_modules", "openapi-fetch", "package.json"), "utf8")).version,
    go: toolVersion("go", ["version"]),
    java: sh("java", ["-version"]).out.split("\n")[0],
    mvn: sh("mvn", ["-v"]).out.split("\n")[0],
    cargo: toolVersion("cargo", ["--version"]),
  };
}

// ------------------------------------------------------------ generation (cached)

function cacheKey(versions) {
  const h = createHash("sha256");
  h.update(readFileSync(join(ROOT, "openapi.json")));
  for (const g of GENERATORS) h.update(readFileSync(join(HERE, "generators", `${g}.yaml`)));
  h.update(readFileSync(join(HERE, "kotlin", "fix_template.py")));
  h.update(readFileSync(fileURLToPath(import.meta.url))); // how this file lays the clients out
  h.update(JSON.stringify([versions["openapi-generator-cli"], versions["openapi-python-client"], versions.java, versions.cargo]));
  return h.digest("hex").slice(0, 16);
}

/** Generates every client into dir (a fresh folder renamed into place, so a cut run leaves no half cache). */
function generate(dir) {
  if (existsSync(join(dir, "complete"))) {
    // Same openapi.json, generator configs and versions as when the cache was written.
    for (const name of ["openapi-python-client", ...GENERATORS.map((g) => `openapi-generator ${g}`)]) ok(`${name} generate (cached)`);
    return true;
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const spec = join(ROOT, "openapi.json");
  let good = true;

  const opc = sh("openapi-python-client", ["generate", "--path", spec, "--output-path", join(tmp, "openapi-python-client", "mashbox_client"), "--meta", "none"]);
  // It writes the client even when it had to leave parts out; those warnings are failures here.
  if (opc.status !== 0 || /Warning|Unable to|will not be generated|Failure to process/i.test(opc.out)) {
    fail("openapi-python-client generate", opc.out);
    good = false;
  } else ok("openapi-python-client generate");

  // kotlin: the stock data_class template with its null check fixed (kotlin/fix_template.py says why).
  const kotlinTemplates = join(tmp, "kotlin-templates");
  const fix = sh("python3", [join(HERE, "kotlin", "fix_template.py"), kotlinTemplates]);
  if (fix.status !== 0) {
    fail("openapi-generator kotlin template", fix.out);
    return false;
  }
  const configs = GENERATORS.map((g) => {
    const file = join(tmp, `${g}.yaml`);
    const body = readFileSync(join(HERE, "generators", `${g}.yaml`), "utf8");
    const templates = g === "kotlin" ? `templateDir: ${kotlinTemplates}\n` : "";
    writeFileSync(file, `inputSpec: ${spec}\noutputDir: ${join(tmp, g)}\n${templates}${body}`);
    return file;
  });
  const og = sh("openapi-generator-cli", ["batch", "--fail-fast", ...configs]);
  for (const g of GENERATORS) {
    const generated = og.status === 0 && existsSync(join(tmp, g));
    if (generated) ok(`openapi-generator ${g} generate`);
    else fail(`openapi-generator ${g} generate`, og.out);
    good &&= generated;
  }
  if (!good) return false;
  writeFileSync(join(tmp, "complete"), "");
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  // Only the current contract's clients are worth keeping.
  for (const old of readdirSync(CACHE)) if (join(CACHE, old) !== dir && !old.includes(".tmp-")) rmSync(join(CACHE, old), { recursive: true, force: true });
  return true;
}

// ------------------------------------------------------------ compile

function buildGo(dir) {
  const work = join(dir, "go-check");
  mkdirSync(work, { recursive: true });
  copyFileSync(join(HERE, "go", "main.go"), join(work, "main.go"));
  writeFileSync(
    join(work, "go.mod"),
    "module mashbox.local/sdkcheck\n\ngo 1.23\n\nrequire github.com/mashbox/sdk-go/mashbox v0.0.0\n\nreplace github.com/mashbox/sdk-go/mashbox => ../go\n",
  );
  const r = sh("go", ["build", "-o", "sdkcheck", "."], { cwd: work, env: { GOFLAGS: "-mod=mod" } });
  if (r.status === 0) ok("openapi-generator go: go build");
  else fail("openapi-generator go: go build", r.out);
  return r.status === 0 ? join(work, "sdkcheck") : null;
}

/** tsc --strict over a program and what it imports. */
function tscStrict(label, files, extra = []) {
  const r = sh(TSC, ["--strict", "--noEmit", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", "--lib", "es2022,dom", "--types", "node", "--skipLibCheck", ...extra, ...files]);
  if (r.status === 0) ok(`${label}: tsc --strict`);
  else fail(`${label}: tsc --strict`, r.out);
  return r.status === 0;
}

function prepareTypescriptFetch(dir) {
  // The generated client imports without extensions (bundler style): the program sits next to it
  // with a package.json that makes it ESM for tsx, and is checked with bundler resolution.
  const work = join(dir, "ts-check");
  mkdirSync(work, { recursive: true });
  rmSync(join(work, "client"), { recursive: true, force: true });
  spawnSync("cp", ["-r", join(dir, "typescript-fetch", "src"), join(work, "client")]);
  for (const f of ["typescript-fetch.ts", "checks.ts"]) copyFileSync(join(HERE, "typescript", f), join(work, f));
  writeFileSync(join(work, "package.json"), '{ "type": "module" }\n');
  const r = sh(TSC, ["--strict", "--noEmit", "--target", "es2022", "--module", "esnext", "--moduleResolution", "bundler", "--lib", "es2022,dom", "--types", "node", "--typeRoots", join(ROOT, "node_modules", "@types"), join(work, "typescript-fetch.ts")]);
  if (r.status === 0) ok("openapi-generator typescript-fetch: tsc --strict");
  else fail("openapi-generator typescript-fetch: tsc --strict", r.out);
  return r.status === 0 ? join(work, "typescript-fetch.ts") : null;
}

/** Runs build() once per program hash: the marker in dir says it was built from these sources. */
function cachedBuild(dir, label, sources, build) {
  const h = createHash("sha256");
  for (const f of sources) h.update(readFileSync(f));
  const marker = join(dir, `built-${label}-${h.digest("hex").slice(0, 12)}`);
  if (existsSync(marker)) {
    ok(`${label}: build (cached)`);
    return true;
  }
  const t0 = performance.now();
  const r = build();
  if (r.status === 0) {
    writeFileSync(marker, "");
    ok(`${label}: build (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  } else fail(`${label}: build`, r.out);
  return r.status === 0;
}

const MVN = ["-B", "-q", "-DskipTests", "-Dmaven.javadoc.skip=true"];

/** mvn compile, then the runtime classpath into cp.txt; returns the java command line of the program. */
function mavenBuild(dir, label, project, sources, mainClass) {
  const built = cachedBuild(dir, label, sources, () => {
    const c = sh("mvn", [...MVN, "compile"], { cwd: project });
    if (c.status !== 0) return c;
    return sh("mvn", [...MVN, "dependency:build-classpath", "-Dmdep.outputFile=cp.txt"], { cwd: project });
  });
  if (!built) return null;
  return ["java", ["-cp", `${join(project, "target", "classes")}:${readFileSync(join(project, "cp.txt"), "utf8").trim()}`, mainClass]];
}

// The two Java libraries share one program; these fill in what differs.
const JAVA = {
  "java-native": {
    pkg: "dev.mashbox.nativeclient",
    decode: "client.getObjectMapper().readValue(json, type)",
    encode: "client.getObjectMapper().writeValueAsString(value)",
    base: "client.updateBaseUri(base)",
  },
  "java-okhttp-gson": { pkg: "dev.mashbox.okhttp", decode: "JSON.getGson().fromJson(json, type)", encode: "JSON.serialize(value)", base: "client.setBasePath(base)" },
};

function buildJava(dir, g) {
  const { pkg, decode, encode, base } = JAVA[g];
  const project = join(dir, g);
  const template = join(HERE, "java", "Check.java");
  const checkDir = join(project, "src", "main", "java", ...pkg.split("."), "check");
  mkdirSync(checkDir, { recursive: true });
  const program = readFileSync(template, "utf8")
    .replaceAll("__PKG__", pkg)
    .replaceAll("__LABEL__", `openapi-generator-${g}`)
    .replaceAll("__DECODE__", decode)
    .replaceAll("__ENCODE__", encode)
    .replaceAll("__BASE__", base);
  writeFileSync(join(checkDir, "Check.java"), program);
  return mavenBuild(dir, `openapi-generator ${g}`, project, [template, fileURLToPath(import.meta.url)], `${pkg}.check.Check`);
}

function buildKotlin(dir) {
  const project = join(dir, "kotlin");
  const sources = [join(HERE, "kotlin", "pom.xml"), join(HERE, "kotlin", "Check.kt")];
  copyFileSync(sources[0], join(project, "pom.xml"));
  // The generated tests need a Gradle-only test runner; the program below is the check.
  rmSync(join(project, "src", "test"), { recursive: true, force: true });
  const checkDir = join(project, "src", "main", "kotlin", "dev", "mashbox", "kotlin", "check");
  mkdirSync(checkDir, { recursive: true });
  copyFileSync(sources[1], join(checkDir, "Check.kt"));
  return mavenBuild(dir, "openapi-generator kotlin", project, sources, "dev.mashbox.kotlin.check.CheckKt");
}

function buildRust(dir) {
  const work = join(dir, "rust-check");
  mkdirSync(join(work, "src"), { recursive: true });
  const source = join(HERE, "rust", "main.rs");
  copyFileSync(source, join(work, "src", "main.rs"));
  writeFileSync(
    join(work, "Cargo.toml"),
    '[package]\nname = "sdkcheck"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\nmashbox = { path = "../rust", default-features = false }\nserde = "1"\nserde_json = "1"\n',
  );
  const target = join(dir, "rust-target");
  const built = cachedBuild(dir, "openapi-generator rust", [source], () => sh("cargo", ["build", "--quiet"], { cwd: work, env: { CARGO_TARGET_DIR: target } }));
  return built ? [join(target, "debug", "sdkcheck"), []] : null;
}

// ------------------------------------------------------------ server

async function startServer() {
  if (!existsSync(join(ROOT, MODEL))) sh("npm", ["run", "-s", "fixtures"], { stdio: "inherit" });
  const log = [];
  const child = spawn(process.execPath, ["bin/mashbox.js", "run", MODEL, "--port", String(PORT), "--slots", "2", "--ctx", "512"], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.on("data", (d) => log.push(String(d)));
  child.stderr.on("data", (d) => log.push(String(d)));
  const stop = async () => {
    if (child.exitCode !== null) return;
    child.kill("SIGTERM");
    for (let i = 0; i < 50 && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    if (child.exitCode === null) child.kill("SIGKILL");
  };
  const ready = (async () => {
    for (let i = 0; i < 240; i++) {
      if (child.exitCode !== null) throw new Error(`the server exited:\n${log.join("").slice(-2000)}`);
      const status = await fetch(`${BASE}/v1/health`).then((r) => r.status, () => 0);
      if (status === 200) {
        const models = await (await fetch(`${BASE}/v1/models`)).json();
        return models.data[0].id;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    throw new Error(`/v1/health was not 200 within 120 s:\n${log.join("").slice(-2000)}`);
  })();
  ready.catch(() => {}); // awaited below; not an unhandled rejection while compiling
  return { ready, stop, log };
}

// ------------------------------------------------------------ main

const t0 = performance.now();
let server = null;
try {
  const versions = await timed("tools", () => ensureTools());
  console.log(`sdk: ${Object.entries(versions).map(([k, v]) => `${k} ${v}`).join("; ")}`);
  // The server loads its model while the clients are generated and compiled.
  server = await startServer();
  const dir = join(CACHE, cacheKey(versions));
  const cached = existsSync(join(dir, "complete"));
  const generated = await timed(cached ? "generate (cached)" : "generate", () => generate(dir));
  if (cached) console.log(`sdk: generated clients from the cache ${dir}`);

  let goBinary = null;
  const jvmAndRust = {};
  let tsFetch = null;
  let openapiFetchOk = false;
  await timed("compile", () => {
    if (generated) {
      goBinary = buildGo(dir);
      tsFetch = prepareTypescriptFetch(dir);
      for (const g of Object.keys(JAVA)) jvmAndRust[g] = buildJava(dir, g);
      jvmAndRust.kotlin = buildKotlin(dir);
      jvmAndRust.rust = buildRust(dir);
    }
    openapiFetchOk = tscStrict("openapi-fetch", [join(HERE, "typescript", "openapi-fetch.ts")]);
  });

  const modelId = await timed("server ready", () => server.ready);
  await timed("calls", () => {
    const py = (script, gen) => sh("python3", [join(HERE, "python", script), join(dir, gen), BASE, modelId], { env: { PYTHONPATH: join(HERE, "python"), PYTHONDONTWRITEBYTECODE: "1" } });
    const tsx = (file) => sh(process.execPath, ["--import", "tsx", file, BASE, modelId]);
    if (generated) {
      countChecks("openapi-python-client calls", py("check_openapi_python_client.py", "openapi-python-client"));
      countChecks("openapi-generator python calls", py("check_openapi_generator_python.py", "python"));
      if (goBinary) countChecks("openapi-generator go calls", sh(goBinary, [BASE, modelId]));
      if (tsFetch) countChecks("openapi-generator typescript-fetch calls", tsx(tsFetch));
      for (const [g, cmd] of Object.entries(jvmAndRust)) if (cmd) countChecks(`openapi-generator ${g} calls`, sh(cmd[0], [...cmd[1], BASE, modelId]));
    }
    if (openapiFetchOk) countChecks("openapi-fetch calls", tsx(join(HERE, "typescript", "openapi-fetch.ts")));
  });
} catch (e) {
  fail("sdk matrix", e?.stack ?? e);
} finally {
  await server?.stop();
}

timings.push(`total ${((performance.now() - t0) / 1000).toFixed(1)} s`);
console.log(`sdk timings: ${timings.join(", ")}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
