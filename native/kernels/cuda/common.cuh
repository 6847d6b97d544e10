// Device-side helpers shared by the CUDA kernels (private to kernels/cuda/).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda_ops.h"
#include "quants.cuh"

namespace mb {
namespace cuda {

// Launch-site check: a failed launch (bad configuration) throws at once; errors inside a kernel
// surface at the step's next synchronisation.
#define MB_CUDA_LAUNCHED(what) ::mb::cuda::check((int)cudaGetLastError(), what)

inline QType qtype_of(GgmlType t) { return (QType)(uint32_t)t; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Calls FN<QType>(args...) for the runtime type t (every type supported() accepts).
#define MB_DISPATCH_QTYPE(t, FN, ...)                          \
  switch (qtype_of(t)) {                                       \
    case QType::F32: FN<QType::F32>(__VA_ARGS__); break;       \
    case QType::F16: FN<QType::F16>(__VA_ARGS__); break;       \
    case QType::BF16: FN<QType::BF16>(__VA_ARGS__); break;     \
    case QType::Q4_0: FN<QType::Q4_0>(__VA_ARGS__); break;     \
    case QType::Q4_1: FN<QType::Q4_1>(__VA_ARGS__); break;     \
    case QType::Q5_0: FN<QType::Q5_0>(__VA_ARGS__); break;     \
    case QType::Q5_1: FN<QType::Q5_1>(__VA_ARGS__); break;     \
    case QType::Q8_0: FN<QType::Q8_0>(__VA_ARGS__); break;     \
    case QType::Q4_K: FN<QType::Q4_K>(__VA_ARGS__); break;     \
    case QType::Q5_K: FN<QType::Q5_K>(__VA_ARGS__); break;     \
    case QType::Q6_K: FN<QType::Q6_K>(__VA_ARGS__); break;     \
  }

inline unsigned blocks_for(int64_t n, int per_block) { return (unsigned)((n + per_block - 1) / per_block); }

}  // namespace cuda
}  // namespace mb
