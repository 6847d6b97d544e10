#!/usr/bin/env node
// `npm run build:peer`: builds llama.cpp's own llama-bench, llama-server and llama-tokenize from the
// llama.cpp source that node-llama-cpp ships (llama/gitRelease.bundle, a git bundle: the same
// commit as the correctness oracle), so the benchmark compares against llama.cpp itself rather
// than a JS loop around it. Nothing is downloaded. The build is cached under
// ~/.cache/mashbox/llama-peer/<key> (MB_PEER_CACHE overrides the folder), keyed by the bundle's
// commit and the cmake flags, so it is rebuilt only when either changes. Prints the folder that
// holds the binaries on stdout. About 15 minutes on 2 cores; MB_JOBS sets the parallelism.
//
// ISA flags are explicit, from /proc/cpuinfo, with GGML_NATIVE=OFF and AMX off: some VMs report
// AMX but trap its instructions (tileloadd raises SIGILL), and -march=native would turn it on.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir, cpus } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const TARGETS = ["llama-bench", "llama-server", "llama-tokenize"];

export function peerBundle() {
  const require = createRequire(import.meta.url);
  // The package's exports hide package.json: walk up from its entry point instead.
  let pkg = dirname(require.resolve("node-llama-cpp"));
  while (!existsSync(join(pkg, "llama", "gitRelease.bundle")) && dirname(pkg) !== pkg) pkg = dirname(pkg);
  const bundle = join(pkg, "llama", "gitRelease.bundle");
  if (!existsSync(bundle)) throw new Error(`no llama.cpp source bundle at ${bundle}`);
  return bundle;
}

function bundleCommit(bundle) {
  const r = spawnSync("git", ["bundle", "list-heads", bundle], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`git bundle list-heads ${bundle}: ${r.stderr}`);
  const head = r.stdout.split("\n").find((l) => / HEAD$/.test(l)) ?? r.stdout.split("\n")[0];
  const commit = head.split(" ")[0];
  if (!/^[0-9a-f]{40}$/.test(commit)) throw new Error(`no commit in ${bundle}`);
  return commit;
}

export function isaFlags(cpuinfo = readFileSync("/proc/cpuinfo", "utf8")) {
  const firstFlags = cpuinfo.split("\n").find((l) => /^flags\s*:/.test(l)) ?? "";
  const has = new Set(firstFlags.replace(/^flags\s*:/, "").trim().split(/\s+/));
  const flags = ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"];
  const map = [
    ["avx", "GGML_AVX"], ["avx2", "GGML_AVX2"], ["fma", "GGML_FMA"], ["f16c", "GGML_F16C"],
    ["bmi2", "GGML_BMI2"], ["avx_vnni", "GGML_AVX_VNNI"], ["avx512f", "GGML_AVX512"],
    ["avx512_vnni", "GGML_AVX512_VNNI"], ["avx512_bf16", "GGML_AVX512_BF16"], ["avx512vbmi", "GGML_AVX512_VBMI"],
  ];
  for (const [cpu, opt] of map) if (has.has(cpu)) flags.push(`-D${opt}=ON`);
  return flags;
}

export function peerPlan() {
  const bundle = peerBundle();
  const commit = bundleCommit(bundle);
  const flags = [
    "-DCMAKE_BUILD_TYPE=Release", ...isaFlags(), "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DBUILD_SHARED_LIBS=OFF",
  ];
  const key = createHash("sha256").update(JSON.stringify({ commit, flags, TARGETS })).digest("hex").slice(0, 12);
  const root = process.env.MB_PEER_CACHE ?? join(homedir(), ".cache", "mashbox", "llama-peer");
  const dir = join(root, key);
  return { bundle, commit, flags, key, dir, src: join(dir, "src"), build: join(dir, "build"), bin: join(dir, "build", "bin") };
}

/** The built binaries' folder, or null when this commit + flags have not been built. */
export function peerBin() {
  const plan = peerPlan();
  const ok = existsSync(join(plan.dir, "done")) && TARGETS.every((t) => existsSync(join(plan.bin, t)));
  return ok ? plan.bin : null;
}

function run(cmd, argv, opts = {}) {
  process.stderr.write(`$ ${cmd} ${argv.join(" ")}\n`);
  const r = spawnSync(cmd, argv, { stdio: ["ignore", 2, 2], ...opts });
  if (r.status !== 0) throw new Error(`${cmd} exited ${r.status ?? r.signal}`);
}

export function buildPeer() {
  const plan = peerPlan();
  if (peerBin()) return plan.bin;
  mkdirSync(plan.dir, { recursive: true });
  if (!existsSync(join(plan.src, ".git"))) {
    rmSync(plan.src, { recursive: true, force: true });
    run("git", ["clone", "-q", "--no-checkout", plan.bundle, plan.src]);
    run("git", ["-C", plan.src, "checkout", "-q", plan.commit]);
  }
  const jobs = process.env.MB_JOBS ?? String(Math.min(2, cpus().length));
  run("cmake", ["-S", plan.src, "-B", plan.build, ...plan.flags]);
  run("cmake", ["--build", plan.build, "-j", jobs, "--target", ...TARGETS]);
  writeFileSync(join(plan.dir, "done"), JSON.stringify({ commit: plan.commit, flags: plan.flags }, null, 1) + "\n");
  return plan.bin;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    if (process.argv.includes("--check")) {
      const bin = peerBin();
      if (!bin) { process.stderr.write("llama.cpp peer not built: npm run build:peer\n"); process.exit(1); }
      process.stdout.write(bin + "\n");
    } else {
      process.stdout.write(buildPeer() + "\n");
    }
  } catch (e) {
    process.stderr.write(`build-llama-peer: ${e.message}\n`);
    process.exit(1);
  }
}
