// Writes each row's K and V into its slot's cache at its position, rounded to f16 (the cache
// type the CPU uses too). One thread per value.
#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

__global__ void store_kv_kernel(uint16_t* kc, uint16_t* vc, int Hk, int C, int Dh, const float* __restrict__ k,
                                const float* __restrict__ v, const int32_t* __restrict__ slot,
                                const int32_t* __restrict__ pos, int T) {
  const int64_t KD = (int64_t)Hk * Dh;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)T * KD) return;
  const int t = (int)(i / KD);
  const int g = (int)((i % KD) / Dh), d = (int)(i % Dh);
  const int64_t dst = (((int64_t)slot[t] * Hk + g) * C + pos[t]) * Dh + d;
  kc[dst] = __half_as_ushort(__float2half(k[i]));
  vc[dst] = __half_as_ushort(__float2half(v[i]));
}

}  // namespace

void store_kv(const KvLayer& kv, const float* k, const float* v, const int32_t* slot, const int32_t* pos, int T,
              cudaStream_t s) {
  const int64_t n = (int64_t)T * kv.Hk * kv.Dh;
  if (n <= 0) return;
  store_kv_kernel<<<blocks_for(n, 256), 256, 0, s>>>(kv.k, kv.v, kv.Hk, kv.C, kv.Dh, k, v, slot, pos, T);
  MB_CUDA_LAUNCHED("store_kv");
}

}  // namespace cuda
}  // namespace mb
