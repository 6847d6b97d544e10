// Dequantizing matvec for decode: y[T, N] = x[T, K] · W^T with T <= kMatvecMaxT. Decode is
// bandwidth-bound, so each weight byte is read once per call for all T rows: a warp per output
// row (or a few rows, see rows_per_warp), each lane dequantizing whole 32-value sub-blocks
// (strided by 32 across the row) into registers and applying them to every activation row.
//
// Dimension legend: T activation rows, K reduction dim, N output rows, P expert pairs.
#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

template <QType Q, int NT>
__device__ __forceinline__ void row_dot(const uint8_t* wrow, const float* x, int64_t ldx, int64_t K, float* acc) {
  const int lane = threadIdx.x & 31;
  const int64_t n_sub = K / 32;
  for (int64_t s = lane; s < n_sub; s += 32) {
    float w[32];
    dequant_sub32<Q>(wrow, s, w);
#pragma unroll
    for (int t = 0; t < NT; t++) {
      const float4* xv = (const float4*)(x + t * ldx + s * 32);
      float a = 0.f;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const float4 v = __ldg(xv + i);
        a += w[4 * i] * v.x + w[4 * i + 1] * v.y + w[4 * i + 2] * v.z + w[4 * i + 3] * v.w;
      }
      acc[t] += a;
    }
  }
}

// R rows per warp (R > 1 only for NT <= 2): each lane loads its 32 activations once per
// sub-block and applies them to R weight rows, so the activations' L1 traffic, which for one
// token is ~7x the Q4_K weight bytes, falls by R.
template <int NT>
__host__ __device__ constexpr int rows_per_warp() { return NT == 1 ? 4 : NT == 2 ? 2 : 1; }

template <QType Q, int NT>
__global__ void matvec_kernel(const uint8_t* __restrict__ W, int64_t row_bytes, int64_t K, int64_t N,
                              const float* __restrict__ x, float* __restrict__ y) {
  constexpr int R = rows_per_warp<NT>();
  const int64_t n0 = ((int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5)) * R;
  if (n0 >= N) return;
  const int lane = threadIdx.x & 31;
  float acc[R][NT];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int t = 0; t < NT; t++) acc[r][t] = 0.f;
  if constexpr (R == 1) {
    row_dot<Q, NT>(W + n0 * row_bytes, x, K, K, acc[0]);
  } else {
    const int64_t n_sub = K / 32;
    for (int64_t s = lane; s < n_sub; s += 32) {
      float xs[NT][32];
#pragma unroll
      for (int t = 0; t < NT; t++) {
        const float4* xv = (const float4*)(x + t * K + s * 32);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          const float4 v = __ldg(xv + i);
          xs[t][4 * i] = v.x;
          xs[t][4 * i + 1] = v.y;
          xs[t][4 * i + 2] = v.z;
          xs[t][4 * i + 3] = v.w;
        }
      }
#pragma unroll
      for (int r = 0; r < R; r++) {
        if (n0 + r >= N) break;  // same for the whole warp
        float w[32];
        dequant_sub32<Q>(W + (n0 + r) * row_bytes, s, w);
#pragma unroll
        for (int t = 0; t < NT; t++) {
          float a = 0.f;
#pragma unroll
          for (int i = 0; i < 32; i++) a += w[i] * xs[t][i];
          acc[r][t] += a;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int t = 0; t < NT; t++) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && n0 + r < N) y[t * N + n0 + r] = v;
    }
}

// blockIdx.y = pair p: expert sel[p], activation row p / Ek.
template <QType Q>
__global__ void matvec_experts_kernel(const uint8_t* __restrict__ W, size_t expert_bytes, int64_t row_bytes, int64_t K,
                                      int64_t N, const float* __restrict__ x, const int32_t* __restrict__ sel, int Ek,
                                      float* __restrict__ y) {
  const int64_t n = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const int p = blockIdx.y;
  const uint8_t* wrow = W + (size_t)sel[p] * expert_bytes + n * row_bytes;
  float acc[1] = {0.f};
  row_dot<Q, 1>(wrow, x + (int64_t)(p / Ek) * K, K, K, acc);
  const float v = warp_sum(acc[0]);
  if ((threadIdx.x & 31) == 0) y[(int64_t)p * N + n] = v;
}

template <QType Q>
void launch_matvec(const QMatrix& W, const float* x, float* y, int T, cudaStream_t s) {
  const int64_t rb = qtype_row_bytes(Q, W.K);
  const dim3 block(32 * kWarpsPerBlock);
  switch (T) {
#define MB_CASE(nt)                                                                                   \
  case nt:                                                                                            \
    matvec_kernel<Q, nt><<<blocks_for(W.N, kWarpsPerBlock * rows_per_warp<nt>()), block, 0, s>>>(W.data, rb, W.K, \
                                                                                               W.N, x, y); \
    break;
    MB_CASE(1) MB_CASE(2) MB_CASE(3) MB_CASE(4) MB_CASE(5) MB_CASE(6) MB_CASE(7) MB_CASE(8)
#undef MB_CASE
    default: throw std::invalid_argument("cuda matvec: T must be 1..8");
  }
  MB_CUDA_LAUNCHED("matvec");
}

template <QType Q>
void launch_experts(const QMatrix& W, size_t expert_bytes, const float* x, const int32_t* sel, int P, int Ek, float* y,
                    cudaStream_t s) {
  const int64_t rb = qtype_row_bytes(Q, W.K);
  const dim3 grid(blocks_for(W.N, kWarpsPerBlock), (unsigned)P), block(32 * kWarpsPerBlock);
  matvec_experts_kernel<Q><<<grid, block, 0, s>>>(W.data, expert_bytes, rb, W.K, W.N, x, sel, Ek, y);
  MB_CUDA_LAUNCHED("matvec_experts");
}

void check_shape(const QMatrix& W) {
  if (!supported(W.type)) throw std::invalid_argument(std::string("cuda matmul: unsupported type ") +
                                                      ggml_type_name(W.type));
  if (W.K % 32 != 0 || W.K % qtype_block_values(qtype_of(W.type)) != 0)
    throw std::invalid_argument("cuda matmul: K is not a multiple of the block size");
}

}  // namespace

void matvec(const QMatrix& W, const float* x, float* y, int T, cudaStream_t s) {
  check_shape(W);
  MB_DISPATCH_QTYPE(W.type, launch_matvec, W, x, y, T, s)
}

void matvec_experts(const QMatrix& W, size_t expert_bytes, const float* x, const int32_t* sel, int P, int Ek, float* y,
                    cudaStream_t s) {
  check_shape(W);
  if (P <= 0) return;
  MB_DISPATCH_QTYPE(W.type, launch_experts, W, expert_bytes, x, sel, P, Ek, y, s)
}

void matmul(const QMatrix& W, const float* x, float* y, int T, cudaStream_t s) {
  if (T <= 0) return;
  if (T <= kMatvecMaxT) matvec(W, x, y, T, s);
  else gemm_f16(W, x, y, T, s);
}

}  // namespace cuda
}  // namespace mb
