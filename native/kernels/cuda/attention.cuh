// The attention tile loop shared by the prefill and decode kernels (private to kernels/cuda/).
//
// Dimension legend: T query rows, H heads, Hk KV heads, G = H / Hk, DH head dim, C context per
// slot, KT = 32 keys per tile (one per lane when scoring), Z key chunks (split-K, decode only).
//
// Block (t, g, z) = one query row t, one KV head g, key chunk z; its G warps are the G query heads
// that share g, so each K/V tile is loaded once into shared memory for all of them. Online
// softmax in f32: running max m, running sum l, acc[DH] rescaled when m grows.
#pragma once
#include "common.cuh"

namespace mb {
namespace cuda {

constexpr int kAttnKeyTile = 32;

template <int DH>
inline size_t attn_smem_bytes(int G) {
  return (size_t)G * DH * sizeof(float) + (size_t)kAttnKeyTile * (DH + 2) * 2 + (size_t)kAttnKeyTile * DH * 2;
}

// SPLIT: write (m, l, acc[DH]) per (t, h, z) to partial for attn_combine; else out = acc / l.
template <int DH, bool SPLIT>
__global__ void attn_kernel(const uint16_t* __restrict__ kc, const uint16_t* __restrict__ vc, int Hk, int C,
                            const float* __restrict__ q, float* __restrict__ out, const int32_t* __restrict__ slot,
                            const int32_t* __restrict__ pos, int H, int G, float scale, int kv_chunk,
                            float* __restrict__ partial) {
  constexpr int KT = kAttnKeyTile, NI = DH / 32, LDK = DH + 2;
  extern __shared__ __align__(16) unsigned char smem[];
  float* qs = (float*)smem;                                      // [G][DH]
  half* ks = (half*)(smem + (size_t)G * DH * sizeof(float));     // [KT][LDK] (padded: lanes read different rows)
  half* vs = ks + KT * LDK;                                      // [KT][DH]

  const int t = blockIdx.x, g = blockIdx.y, z = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = g * G + warp;
  const int n_keys = pos[t] + 1;
  const int j_begin = SPLIT ? z * kv_chunk : 0;
  const int j_end = SPLIT ? min(j_begin + kv_chunk, n_keys) : n_keys;
  const int64_t kv_base = ((int64_t)slot[t] * Hk + g) * C * DH;

  for (int d = lane; d < DH; d += 32) qs[warp * DH + d] = q[((int64_t)t * H + h) * DH + d];

  float m = -INFINITY, l = 0.f, acc[NI];
#pragma unroll
  for (int i = 0; i < NI; i++) acc[i] = 0.f;

  for (int j0 = j_begin; j0 < j_end; j0 += KT) {
    __syncthreads();  // the previous tile is consumed (and q is staged, first time round)
    for (int idx = threadIdx.x; idx < KT * DH / 2; idx += blockDim.x) {
      const int r = idx / (DH / 2), c = 2 * (idx % (DH / 2));
      half2 kk = __float2half2_rn(0.f), vv = kk;
      if (j0 + r < j_end) {
        const int64_t src = kv_base + (int64_t)(j0 + r) * DH + c;
        kk = *(const half2*)(kc + src);
        vv = *(const half2*)(vc + src);
      }
      *(half2*)(ks + r * LDK + c) = kk;
      *(half2*)(vs + r * DH + c) = vv;
    }
    __syncthreads();
    const int j = j0 + lane;
    float sc = -INFINITY;
    if (j < j_end) {
      const float* qw = qs + warp * DH;
      const half2* kr = (const half2*)(ks + lane * LDK);
      float dot = 0.f;
#pragma unroll 8
      for (int d2 = 0; d2 < DH / 2; d2++) {
        const float2 kf = __half22float2(kr[d2]);
        dot += qw[2 * d2] * kf.x + qw[2 * d2 + 1] * kf.y;
      }
      sc = dot * scale;
    }
    const float m_new = fmaxf(m, warp_max(sc));
    const float alpha = m == -INFINITY ? 0.f : __expf(m - m_new);
    const float p = j < j_end ? __expf(sc - m_new) : 0.f;
    l = l * alpha + warp_sum(p);
#pragma unroll
    for (int i = 0; i < NI; i++) acc[i] *= alpha;
    const int n_here = min(KT, j_end - j0);
    for (int jj = 0; jj < n_here; jj++) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
      for (int i = 0; i < NI; i++) acc[i] += pj * __half2float(vs[jj * DH + lane + 32 * i]);
    }
    m = m_new;
  }
  if (SPLIT) {
    const int Z = gridDim.z;
    float* part = partial + (((int64_t)t * H + h) * Z + z) * (DH + 2);
    if (lane == 0) {
      part[0] = m;
      part[1] = l;
    }
#pragma unroll
    for (int i = 0; i < NI; i++) part[2 + lane + 32 * i] = acc[i];
  } else {
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int i = 0; i < NI; i++) out[((int64_t)t * H + h) * DH + lane + 32 * i] = acc[i] * inv;
  }
}

// Calls FN<DH>(args...) for the head dims the kernels are instantiated for.
#define MB_DISPATCH_HEAD_DIM(dh, FN, ...)                                              \
  switch (dh) {                                                                        \
    case 64: FN<64>(__VA_ARGS__); break;                                               \
    case 128: FN<128>(__VA_ARGS__); break;                                             \
    case 256: FN<256>(__VA_ARGS__); break;                                             \
    default: throw std::invalid_argument("cuda attention: head dim must be 64, 128 or 256"); \
  }

inline void check_attention_shape(const KvLayer& kv, int H) {
  if (kv.Hk <= 0 || H % kv.Hk != 0) throw std::invalid_argument("cuda attention: H must be a multiple of Hk");
  if (H / kv.Hk > 32) throw std::invalid_argument("cuda attention: more than 32 query heads per KV head");
}

}  // namespace cuda
}  // namespace mb
