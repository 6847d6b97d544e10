#!/usr/bin/env node
// `npm run build:native`: configure + build native/ into native/build (at most 2 jobs: the dev
// box is shared). `--test` also runs ctest. `--debug` builds with symbols and no optimisation.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const build = join(here, "build");
const args = process.argv.slice(2);
const type = args.includes("--debug") ? "Debug" : "Release";
const jobs = process.env.MB_JOBS ?? "2";

function run(cmd, argv) {
  process.stdout.write(`$ ${cmd} ${argv.join(" ")}\n`);
  const r = spawnSync(cmd, argv, { stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

run("cmake", ["-S", here, "-B", build, `-DCMAKE_BUILD_TYPE=${type}`, `-DMB_NODE_EXEC=${process.execPath}`]);
run("cmake", ["--build", build, "-j", jobs]);
if (args.includes("--test")) run("ctest", ["--test-dir", build, "--output-on-failure", "-j", jobs]);
