// SwiGLU's elementwise part, gate = silu(gate) * up, and the residual add out += a.
#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

__global__ void silu_mul_kernel(float* gate, const float* __restrict__ up, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  gate[i] = (g / (1.0f + expf(-g))) * up[i];
}

__global__ void add_kernel(float* out, const float* __restrict__ a, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += a[i];
}

}  // namespace

void silu_mul(float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  silu_mul_kernel<<<blocks_for(n, 256), 256, 0, s>>>(gate, up, n);
  MB_CUDA_LAUNCHED("silu_mul");
}

void add(float* out, const float* a, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(out, a, n);
  MB_CUDA_LAUNCHED("add");
}

}  // namespace cuda
}  // namespace mb
