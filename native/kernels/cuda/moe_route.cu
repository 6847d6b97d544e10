// MoE routing, one thread per token (E is small): softmax over the router logits, the Ek
// likeliest experts best first (ties to the lower index, as the CPU's strict '>' scan picks),
// their probabilities renormalized to sum 1. The grouped expert matmuls are matvec_experts
// (matvec.cu).
#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

__global__ void moe_route_kernel(const float* __restrict__ logits, int T, int E, int Ek, int32_t* sel, float* weight) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float* l = logits + (int64_t)t * E;
  float mx = -INFINITY;
  for (int e = 0; e < E; e++) mx = fmaxf(mx, l[e]);
  float sum = 0.f;
  for (int e = 0; e < E; e++) sum += expf(l[e] - mx);
  // Selection in (prob desc, index asc) order: each pick is the best strictly after the last one.
  float last_v = INFINITY;
  int last_i = -1;
  float wsum = 0.f;
  for (int k = 0; k < Ek; k++) {
    int best = -1;
    float bv = -INFINITY;
    for (int e = 0; e < E; e++) {
      const float v = l[e];
      const bool after = v < last_v || (v == last_v && e > last_i);
      if (after && (best < 0 || v > bv)) {
        best = e;
        bv = v;
      }
    }
    last_v = bv;
    last_i = best;
    const float p = expf(bv - mx) / sum;
    sel[(int64_t)t * Ek + k] = best;
    weight[(int64_t)t * Ek + k] = p;
    wsum += p;
  }
  for (int k = 0; k < Ek; k++) weight[(int64_t)t * Ek + k] /= wsum;
}

}  // namespace

void moe_route(const float* logits, int T, int E, int Ek, int32_t* sel, float* weight, cudaStream_t s) {
  if (T <= 0) return;
  moe_route_kernel<<<blocks_for(T, 64), 64, 0, s>>>(logits, T, E, Ek, sel, weight);
  MB_CUDA_LAUNCHED("moe_route");
}

}  // namespace cuda
}  // namespace mb
