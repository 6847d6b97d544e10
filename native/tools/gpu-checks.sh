#!/usr/bin/env bash
# The parity harnesses on a GPU machine, in one call (no Node, no network; nvcc, CMake and ninja
# from its image): builds exactly test_cuda_ops (kernels/cuda/tests: every CUDA kernel against its
# scalar reference), test_backend_ops (model/tests: every Backend op on the CPU and CUDA backends
# against the scalar reference) and test_cuda_model (model/tests: the CUDA model's logits against
# the CPU backend, the engine on it) for sm_90, runs each in parity mode, then in --perf mode.
# Writes to $OUT: env.txt, build.log, parity.log (every check line), perf.log (every timing
# line), model.json (test_cuda_model's JSON lines, parity then perf). About 6-8 min.
# With the (git-ignored, 30 MB) llama fixture carried along, test_cuda_model also runs it through
# the engine's scheduler on the CPU backend and on the CUDA model (engine_* keys):
#   run(command="bash native/tools/gpu-checks.sh", timeout_s=540, carry=["test/fixtures/llama-q8_0.gguf"])
# Without nvcc (or with --cpu) it builds the CPU side alone and runs test_backend_ops on the CPU
# backend's kernel sets and test_cuda_model --selftest: runnable on any machine.
# MB_BUILD_DIR picks the build folder (default /tmp/mb-build-gpu-checks).
# Exit status: 0 every parity check passed, 1 one failed, 3 no CUDA device, 10 the build failed,
# 11 no nvcc was found (and the CPU side ran; its own failures give 1); with --cpu, 0 or 1.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/mb-gpu-checks-out}
mkdir -p "$OUT"
B=${MB_BUILD_DIR:-/tmp/mb-build-gpu-checks}
JOBS=$(nproc 2>/dev/null || echo 8)

find_nvcc() {
  for c in "${CUDACXX:-}" "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc \
           "$PWD/.cache/cuda-toolkit/nvidia/cu13/bin/nvcc"; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  # a pip-installed toolkit (nvidia-cuda-nvcc wheels) under the image's python
  python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for c in glob.glob(os.path.join(d, "nvidia", "cu*", "bin", "nvcc")) + glob.glob(os.path.join(d, "nvidia", "cuda_nvcc", "bin", "nvcc")):
        print(c); sys.exit(0)
sys.exit(1)
PY
}

NVCC=""
[ "${1:-}" = "--cpu" ] || NVCC=$(find_nvcc) || NVCC=""
{
  echo "nvcc: ${NVCC:-none (CPU side only)}"; [ -n "$NVCC" ] && "$NVCC" --version | tail -2
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  echo "cmake: $(cmake --version | head -1)  ninja: $(ninja --version 2>/dev/null || echo none)  cores: $JOBS"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

GEN=()
command -v ninja >/dev/null && [ ! -f "$B/Makefile" ] && GEN=(-G Ninja)
CUDA_ARGS=(-DMB_CUDA=OFF)
TARGETS=(test_backend_ops test_cuda_model)
if [ -n "$NVCC" ]; then
  CUDA_ARGS=(-DMB_CUDA=ON -DMB_CUDA_ARCHS=90 -DMB_CUDA_WERROR=OFF -DCMAKE_CUDA_COMPILER="$NVCC"
             -DCUDAToolkit_ROOT="$(dirname "$(dirname "$NVCC")")")
  TARGETS=(test_cuda_ops "${TARGETS[@]}")
fi
t0=$(date +%s)
{
  cmake -S native -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${CUDA_ARGS[@]}" &&
  cmake --build "$B" -j "$JOBS" --target "${TARGETS[@]}"
} > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "build failed"; exit 10; }
echo "build: $(( $(date +%s) - t0 )) s (${TARGETS[*]})"
OPS="$B/kernels/cuda/test_cuda_ops" BOPS="$B/model/test_backend_ops" MODEL="$B/model/test_cuda_model"

# Runs a harness, its lines into log, and prints its summary; returns its exit status.
step() {
  local log=$1 secs=$2; shift 2
  echo "\$ $*" >> "$log"
  timeout "$secs" "$@" >> "$log" 2>&1
  local rc=$?
  echo "$(basename "$1"): exit $rc"
  return $rc
}

rc=0
: > "$OUT/parity.log"; : > "$OUT/perf.log"; : > "$OUT/model.json"
if [ -z "$NVCC" ]; then
  for set in ref avx2 ""; do MB_KERNELS=$set step "$OUT/parity.log" 120 "$BOPS" --backend cpu || rc=1; done
  step "$OUT/parity.log" 120 "$MODEL" --selftest || rc=1
  step "$OUT/perf.log" 300 "$BOPS" --backend cpu --perf
  grep -E "^FAIL" "$OUT/parity.log" | head -20
  [ "${1:-}" = "--cpu" ] && exit $rc
  exit $(( rc ? 1 : 11 ))
fi

# ---- parity ----
step "$OUT/parity.log" 120 "$OPS"; r=$?; [ $r -eq 3 ] && { grep -m1 "no CUDA device" "$OUT/parity.log"; exit 3; }; [ $r -ne 0 ] && rc=1
step "$OUT/parity.log" 120 "$BOPS" || rc=1
step "$OUT/parity.log" 60 "$MODEL" --selftest || rc=1
ENGINE=()
[ -f test/fixtures/llama-q8_0.gguf ] && ENGINE=(--engine-gguf test/fixtures/llama-q8_0.gguf)
timeout 150 "$MODEL" --parity --shape qwen3-8b --wtype q4_k --parity-layers 2 --steps 64 "${ENGINE[@]}" \
  >> "$OUT/model.json" 2>> "$OUT/parity.log" || rc=1
echo "test_cuda_model --parity q4_k: $(tail -c 300 "$OUT/model.json" | grep -o '"status":"[a-z_]*"')"
timeout 120 "$MODEL" --parity --shape qwen3-8b --wtype bf16 --parity-layers 2 --steps 64 \
  >> "$OUT/model.json" 2>> "$OUT/parity.log" || rc=1
echo "test_cuda_model --parity bf16: $(tail -c 300 "$OUT/model.json" | grep -o '"status":"[a-z_]*"')"
grep -E "^FAIL" "$OUT/parity.log" | head -30
grep -E "^test_(cuda_ops|backend_ops): " "$OUT/parity.log"

# ---- perf ----
step "$OUT/perf.log" 120 "$OPS" --perf
step "$OUT/perf.log" 120 "$BOPS" --perf
timeout 150 "$MODEL" --perf --shape qwen3-8b --wtype q4_k --batches 1,8,32,64 --prefill 512 >> "$OUT/model.json" 2>> "$OUT/perf.log"
echo "test_cuda_model --perf qwen3-8b q4_k: exit $?"
timeout 50 "$MODEL" --perf --shape smollm2-135m --wtype q4_1 --batches 1,8,32,64 --prefill 512 >> "$OUT/model.json" 2>> "$OUT/perf.log"
echo "test_cuda_model --perf smollm2-135m q4_1: exit $?"
grep -E "^perf" "$OUT/perf.log" | head -60
cat "$OUT/model.json"
exit $rc
