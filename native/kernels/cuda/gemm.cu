// Tensor-core GEMM for prefill and many-slot decode: y[T, N] = x[T, K] · W^T. Each block stages a
// 64 x 64 tile of activations (rounded to f16) and a 64 x 64 tile of weights (dequantized to f16,
// one 32-value sub-block per thread) in shared memory, and four warps multiply them with WMMA
// 16x16x16 fragments summing in f32. When the output tiles alone would leave most of the GPU idle
// (few rows N, few tokens T: decode batches on the K/V projections), K is split across blocks
// that add their parts into y (zeroed first); the float adds then land in any order, so such
// results can differ in the last bits from run to run.
//
// Dimension legend: T activation rows, K reduction dim, N weight rows; BT x BN output tile,
// BK values of K per stage, Z parts of K.
#include <mma.h>

#include <algorithm>

#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

constexpr int BT = 64, BN = 64, BK = 64;
constexpr int LDH = BK + 8;   // halves per staged row (keeps fragment rows 32-byte aligned, spreads banks)
constexpr int LDC = BN + 4;   // floats per output-staging row

template <QType Q, bool SPLIT>
__global__ void __launch_bounds__(128) gemm_kernel(const uint8_t* __restrict__ W, int64_t row_bytes, int64_t K,
                                                   int64_t N, const float* __restrict__ x, float* __restrict__ y,
                                                   int T, int64_t k_per_part) {
  using namespace nvcuda;
  __shared__ __align__(32) half xs[BT][LDH];   // [tokens][k]
  __shared__ __align__(32) half ws[BN][LDH];   // [weight rows][k]
  __shared__ __align__(32) float cs[BT][LDC];  // [tokens][weight rows]
  const int tid = threadIdx.x, warp = tid >> 5;
  const int t0 = blockIdx.y * BT;
  const int64_t n0 = (int64_t)blockIdx.x * BN;
  const int64_t k_begin = SPLIT ? blockIdx.z * k_per_part : 0;
  const int64_t k_end = SPLIT ? min(K, k_begin + k_per_part) : K;
  const int wt = (warp >> 1) * 32, wn = (warp & 1) * 32;  // this warp's 32 x 32 corner

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.f);

  for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
    // activations: 64 x 64 floats, 32 per thread
    for (int i = tid; i < BT * BK; i += 128) {
      const int r = i / BK, c = i % BK;
      const int t = t0 + r;
      xs[r][c] = __float2half(t < T && k0 + c < k_end ? x[(int64_t)t * K + k0 + c] : 0.f);
    }
    // weights: 64 rows x 2 sub-blocks, one sub-block per thread
    {
      const int r = tid >> 1, sub = tid & 1;
      const int64_t n = n0 + r;
      const int64_t kk = k0 + 32 * sub;
      float w[32];
      if (n < N && kk < k_end) dequant_sub32<Q>(W + n * row_bytes, kk / 32, w);
      else
#pragma unroll
        for (int i = 0; i < 32; i++) w[i] = 0.f;
#pragma unroll
      for (int i = 0; i < 32; i++) ws[r][32 * sub + i] = __float2half(w[i]);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; i++) wmma::load_matrix_sync(a[i], &xs[wt + 16 * i][kk], LDH);
#pragma unroll
      for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &ws[wn + 16 * j][kk], LDH);
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 2; j++)
      wmma::store_matrix_sync(&cs[wt + 16 * i][wn + 16 * j], acc[i][j], LDC, wmma::mem_row_major);
  __syncthreads();
  for (int i = tid; i < BT * BN; i += 128) {
    const int r = i / BN, c = i % BN;
    const int t = t0 + r;
    const int64_t n = n0 + c;
    if (t < T && n < N) {
      if (SPLIT) atomicAdd(&y[(int64_t)t * N + n], cs[r][c]);
      else y[(int64_t)t * N + n] = cs[r][c];
    }
  }
}

int sm_count() {
  int dev = 0, n = 0;
  check((int)cudaGetDevice(&dev), "cudaGetDevice");
  check((int)cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  return n;
}

template <QType Q>
void launch_gemm(const QMatrix& W, const float* x, float* y, int T, cudaStream_t s) {
  const unsigned gn = blocks_for(W.N, BN), gt = blocks_for(T, BT);
  const int64_t rb = qtype_row_bytes(Q, W.K);
  // Parts of K so the grid covers the GPU about twice; each part a whole number of BK stages
  // (a multiple of every block size) and at least 4 of them.
  const int64_t tiles = (int64_t)gn * gt, want = 2 * (int64_t)sm_count();
  int64_t Z = tiles >= want ? 1 : std::min<int64_t>((want + tiles - 1) / tiles, W.K / (4 * BK));
  if (Z <= 1) {
    gemm_kernel<Q, false><<<dim3(gn, gt), 128, 0, s>>>(W.data, rb, W.K, W.N, x, y, T, W.K);
  } else {
    const int64_t stages = (W.K + BK - 1) / BK;
    const int64_t k_per_part = (stages + Z - 1) / Z * BK;
    Z = (W.K + k_per_part - 1) / k_per_part;
    check((int)cudaMemsetAsync(y, 0, (size_t)T * W.N * sizeof(float), s), "gemm_f16 zeroing");
    gemm_kernel<Q, true><<<dim3(gn, gt, (unsigned)Z), 128, 0, s>>>(W.data, rb, W.K, W.N, x, y, T, k_per_part);
  }
  MB_CUDA_LAUNCHED("gemm_f16");
}

}  // namespace

void gemm_f16(const QMatrix& W, const float* x, float* y, int T, cudaStream_t s) {
  if (!supported(W.type)) throw std::invalid_argument("cuda gemm: unsupported type");
  if (W.K % 32 != 0 || W.K % qtype_block_values(qtype_of(W.type)) != 0)
    throw std::invalid_argument("cuda gemm: K is not a multiple of the block size");
  if (T <= 0) return;
  MB_DISPATCH_QTYPE(W.type, launch_gemm, W, x, y, T, s)
}

}  // namespace cuda
}  // namespace mb
