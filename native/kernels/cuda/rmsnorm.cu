// RMSNorm of R rows of n floats with a shared weight: out = (x * 1/sqrt(mean(x^2) + eps)) * w,
// the two multiplies kept separate as ggml rounds them. One warp per row (rows are short: D or Dh).
#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

__global__ void rmsnorm_kernel(float* out, const float* x, const float* __restrict__ w, int R, int n, float eps) {
  const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= R) return;
  const int lane = threadIdx.x & 31;
  const float* xr = x + (int64_t)r * n;
  float sum = 0.f;
  for (int i = lane; i < n; i += 32) sum += xr[i] * xr[i];
  sum = warp_sum(sum);
  const float scale = rsqrtf(sum / (float)n + eps);
  float* o = out + (int64_t)r * n;
  for (int i = lane; i < n; i += 32) o[i] = (xr[i] * scale) * w[i];
}

}  // namespace

void rmsnorm_rows(float* out, const float* x, const float* w, int R, int n, float eps, cudaStream_t s) {
  if (R <= 0) return;
  rmsnorm_kernel<<<blocks_for(R, 4), 128, 0, s>>>(out, x, w, R, n, eps);
  MB_CUDA_LAUNCHED("rmsnorm_rows");
}

}  // namespace cuda
}  // namespace mb
