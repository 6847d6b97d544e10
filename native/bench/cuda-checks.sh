#!/usr/bin/env bash
# One call on a CUDA machine (no Node, no network; nvcc, CMake and ninja from its image):
# build the CUDA harness for sm_90 and run it on Qwen3-8B-shaped random models in Q4_K and BF16,
# then a SmolLM2-135M-shaped (llama, tied head) Q4_1 benchmark. The harness drives the product's
# CUDA model (Model::load with Device::cuda): each checks phase compares its logits with the CPU
# backend on a qwen3 and a llama shape (qwen3_* and llama_* keys) and checks its decode-step graph
# capture. Writes to $OUT: env.txt, build.log, selftest.log, q4_k.json / q4_k.log, bf16.json /
# bf16.log, smollm2.json / smollm2.log. About 6-8 min.
# With the (git-ignored, 30 MB) llama fixture carried along, the Q4_K run's checks also run it
# through the engine's scheduler on the CPU backend and on the CUDA model (engine_* keys):
#   run(command="bash native/bench/cuda-checks.sh", timeout_s=540, carry=["test/fixtures/llama-q8_0.gguf"])
# Exit status: the Q4_K run's (0 all checks passed, 1 a check failed, 3 no CUDA device), or 10 when
# the build failed, 11 when no nvcc was found.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/mb-cuda-out}
mkdir -p "$OUT"
B=/tmp/mb-build-cuda
JOBS=$(nproc 2>/dev/null || echo 8)

find_nvcc() {
  for c in "${CUDACXX:-}" "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
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

NVCC=$(find_nvcc) || { echo "no nvcc found" | tee "$OUT/env.txt"; exit 11; }
{
  echo "nvcc: $NVCC"; "$NVCC" --version | tail -2
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  echo "cmake: $(cmake --version | head -1)  ninja: $(ninja --version 2>/dev/null || echo none)  cores: $JOBS"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$(date +%s)
{
  cmake -S native -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DMB_CUDA=ON -DMB_CUDA_ARCHS=90 -DMB_CUDA_WERROR=OFF \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$NVCC")")" &&
  cmake --build "$B" -j "$JOBS" --target cuda_harness
} > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "build failed"; exit 10; }
echo "build: $(( $(date +%s) - t0 )) s"
H="$B/bench/cuda_harness"
"$H" --selftest > "$OUT/selftest.log" 2>&1; echo "selftest: exit $? ($(tail -1 "$OUT/selftest.log"))"

ENGINE=()
[ -f test/fixtures/llama-q8_0.gguf ] && ENGINE=(--engine-gguf test/fixtures/llama-q8_0.gguf)
timeout 200 "$H" --shape qwen3-8b --wtype q4_k --parity-layers 2 --steps 64 --batches 1,8,32,64 --prefill 512 "${ENGINE[@]}" \
  > "$OUT/q4_k.json" 2> "$OUT/q4_k.log"
rc=$?
echo "q4_k: exit $rc"; grep -E "^FAIL" "$OUT/q4_k.log" | head -20; cat "$OUT/q4_k.json"
timeout 150 "$H" --shape qwen3-8b --wtype bf16 --parity-layers 2 --steps 64 --batches 1,8,32,64 --prefill 512 \
  > "$OUT/bf16.json" 2> "$OUT/bf16.log"
echo "bf16: exit $?"; grep -E "^FAIL" "$OUT/bf16.log" | head -20; cat "$OUT/bf16.json"
timeout 50 "$H" --shape smollm2-135m --wtype q4_1 --only bench --batches 1,8,32,64 --prefill 512 \
  > "$OUT/smollm2.json" 2> "$OUT/smollm2.log"
echo "smollm2: exit $?"; cat "$OUT/smollm2.json"
exit $rc
