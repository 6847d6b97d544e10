#!/usr/bin/env node
// `npm run build:cuda`: build the CUDA kernel set and its Node-free parity harnesses (test_cuda_ops,
// test_backend_ops, test_cuda_model) into native/build-cuda,
// every CUDA source for sm_80 and sm_90 with warnings as errors. Needs no GPU. The CPU build
// (`npm run build`) never depends on this.
//
// nvcc: $CUDACXX, else `nvcc` on PATH, else /usr/local/cuda, else the pinned PyPI wheels below,
// installed once into .cache/cuda-toolkit (pip --target; nothing system-wide). The CUDA 12 wheels
// (nvidia-cuda-nvcc-cu12 up to 12.9.86) ship ptxas alone, not the nvcc driver, cicc or the crt
// headers; the CUDA 13.0 wheels ship the whole compiler and unpack into one toolkit-shaped
// folder, nvidia/cu13/{bin,include,lib,nvvm}. 13.0 is also what the H200 machines here carry.
// `--test` runs the harnesses' ctest entries afterwards (without a device: their CPU side). The
// Node addon is built against the CUDA set too (native/build-cuda/binding/mashbox_native.node, for MASHBOX_NATIVE_ADDON): with it `mashbox
// run --device cuda` runs the CUDA model. `--addon` (once needed for that) is still accepted.
// MB_CUDA_BUILD_DIR picks another build folder.
import { spawnSync } from "node:child_process";
import { existsSync, symlinkSync, lstatSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..");
const build = process.env.MB_CUDA_BUILD_DIR ?? join(here, "build-cuda");
const jobs = process.env.MB_JOBS ?? "2";
const archs = process.env.MB_CUDA_ARCHS ?? "80;90";
const args = process.argv.slice(2);

const WHEELS = [
  "nvidia-cuda-nvcc==13.0.88",
  "nvidia-nvvm==13.0.88",
  "nvidia-cuda-crt==13.0.88",
  "nvidia-cuda-runtime==13.0.96",
  "nvidia-cuda-cccl==13.0.85",
  "nvidia-cublas==13.0.2.14",
];
const toolkitDir = join(root, ".cache", "cuda-toolkit");
const wheelToolkit = join(toolkitDir, "nvidia", "cu13");

function run(cmd, argv, opts = {}) {
  process.stdout.write(`$ ${cmd} ${argv.join(" ")}\n`);
  const r = spawnSync(cmd, argv, { stdio: "inherit", ...opts });
  if (r.status !== 0) {
    process.stderr.write(`build:cuda: ${cmd} failed (exit ${r.status ?? r.signal})\n`);
    process.exit(r.status ?? 1);
  }
}
function which(cmd) {
  const r = spawnSync("sh", ["-c", `command -v ${cmd}`], { encoding: "utf8" });
  return r.status === 0 ? r.stdout.trim() : null;
}
function link(target, path) {
  try {
    lstatSync(path);
  } catch {
    symlinkSync(target, path);
  }
}

function findNvcc() {
  if (process.env.CUDACXX && existsSync(process.env.CUDACXX)) return process.env.CUDACXX;
  const onPath = which("nvcc");
  if (onPath) return onPath;
  if (existsSync("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  const fromWheels = join(wheelToolkit, "bin", "nvcc");
  if (!existsSync(fromWheels)) {
    const py = which("python3") ?? "python";
    run(py, ["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--target", toolkitDir, ...WHEELS]);
  }
  // nvcc.profile links from lib64/; CMake and the linker want unversioned .so names. The wheels
  // have neither, so add them inside our own folder.
  link("lib", join(wheelToolkit, "lib64"));
  for (const lib of ["cudart", "cublas", "cublasLt"]) link(`lib${lib}.so.13`, join(wheelToolkit, "lib", `lib${lib}.so`));
  return fromWheels;
}

const t0 = Date.now();
const nvcc = findNvcc();
const toolkitRoot = resolve(dirname(nvcc), "..");
run("cmake", [
  "-S", here, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DMB_CUDA=ON",
  `-DCMAKE_CUDA_COMPILER=${nvcc}`, `-DMB_NODE_EXEC=${process.execPath}`, `-DCUDAToolkit_ROOT=${toolkitRoot}`, `-DMB_CUDA_ARCHS=${archs}`,
]);
const targets = ["mb_cuda", "test_cuda_ops", "test_backend_ops", "test_cuda_model", "mashbox_native"];
run("cmake", ["--build", build, "-j", jobs, "--target", ...targets]);
if (args.includes("--test")) run("ctest", ["--test-dir", build, "--output-on-failure", "-R", "^(cuda_|backend_ops)"]);
process.stdout.write(`build:cuda: done in ${((Date.now() - t0) / 1000).toFixed(0)} s (nvcc ${nvcc})\n`);
