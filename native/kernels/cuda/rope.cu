// RoPE in place over x[T][n_heads][head_dim], row t at position pos[t]: pair i of the first
// rope_dim dims turns by pos * base^(-2i / rope_dim). neox pairs (i, i + rope_dim/2) (qwen2/3),
// otherwise adjacent (2i, 2i + 1) (llama). One thread per (row, head, pair).
#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

__global__ void rope_kernel(float* x, const int32_t* __restrict__ pos, int T, int n_heads, int head_dim, int rope_dim,
                            float log2_base, bool neox) {
  const int half = rope_dim / 2;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (int64_t)T * n_heads * half) return;
  const int i = (int)(idx % half);
  const int64_t th = idx / half;  // t * n_heads + h
  const int t = (int)(th / n_heads);
  // theta_i = pos * base^(-2i/rope_dim); the CPU builds it by repeated multiplication, so the
  // two agree to float rounding, not bit for bit.
  const float theta = (float)pos[t] * exp2f(-2.0f * (float)i / (float)rope_dim * log2_base);
  float sn, cs;
  sincosf(theta, &sn, &cs);
  float* v = x + th * head_dim;
  const int a = neox ? i : 2 * i;
  const int b = neox ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  v[a] = x0 * cs - x1 * sn;
  v[b] = x0 * sn + x1 * cs;
}

}  // namespace

void rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int rope_dim, float freq_base, bool neox,
          cudaStream_t s) {
  const int64_t n = (int64_t)T * n_heads * (rope_dim / 2);
  if (n <= 0) return;
  rope_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x, pos, T, n_heads, head_dim, rope_dim, log2f(freq_base), neox);
  MB_CUDA_LAUNCHED("rope");
}

}  // namespace cuda
}  // namespace mb
