// Embedding lookup: out[i, K] = dequantized row rows[i] of W, one thread per 32-value sub-block.
#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

template <QType Q>
__global__ void get_rows_kernel(const uint8_t* __restrict__ W, int64_t row_bytes, int64_t K,
                                const int32_t* __restrict__ rows, float* __restrict__ out) {
  const int i = blockIdx.y;
  const int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= K / 32) return;
  float v[32];
  dequant_sub32<Q>(W + (int64_t)rows[i] * row_bytes, s, v);
  float4* o = (float4*)(out + (int64_t)i * K + s * 32);
#pragma unroll
  for (int j = 0; j < 8; j++) o[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
}

template <QType Q>
void launch(const QMatrix& W, const int32_t* rows, int n, float* out, cudaStream_t s) {
  const dim3 grid(blocks_for(W.K / 32, 128), (unsigned)n);
  get_rows_kernel<Q><<<grid, 128, 0, s>>>(W.data, qtype_row_bytes(Q, W.K), W.K, rows, out);
  MB_CUDA_LAUNCHED("get_rows");
}

}  // namespace

void get_rows(const QMatrix& W, const int32_t* rows, int n, float* out, cudaStream_t s) {
  if (!supported(W.type) || W.K % 32 != 0) throw std::invalid_argument("cuda get_rows: unsupported matrix");
  if (n <= 0) return;
  MB_DISPATCH_QTYPE(W.type, launch, W, rows, n, out, s)
}

}  // namespace cuda
}  // namespace mb
