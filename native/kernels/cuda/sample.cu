// Token selection on device, one block per row of logits, so a step returns ids instead of V
// floats per row. Top-k is k rounds of a block-wide argmax, each taking the best candidate that
// comes strictly after the previous pick in (logit desc, index asc) order, which needs no
// per-candidate bookkeeping; the k survivors then go through temperature softmax, the top-p cut
// and the draw on one thread (k <= kMaxTopK is small).
#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

constexpr int kThreads = 1024;

// Block argmax over logits after (last_v, last_i) in the order; ties to the lower index.
__device__ void block_best_after(const float* l, int V, float last_v, int last_i, float* best_v, int* best_i,
                                 float* red_v, int* red_i) {
  float bv = -INFINITY;
  int bi = -1;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float v = l[i];
    const bool after = v < last_v || (v == last_v && i > last_i);
    if (after && (bi < 0 || v > bv)) {  // i grows, so an equal v keeps the lower index
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
      bv = ov;
      bi = oi;
    }
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    red_v[warp] = bv;
    red_i[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; w++) {
      if (red_i[w] >= 0 && (bi < 0 || red_v[w] > bv || (red_v[w] == bv && red_i[w] < bi))) {
        bv = red_v[w];
        bi = red_i[w];
      }
    }
    *best_v = bv;
    *best_i = bi;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int V, int top_k,
                                                          float top_p, float temperature, const float* __restrict__ u,
                                                          int32_t* token) {
  __shared__ float red_v[kThreads / 32];
  __shared__ int red_i[kThreads / 32];
  __shared__ float cand_v[kMaxTopK];
  __shared__ int cand_i[kMaxTopK];
  const int t = blockIdx.x;
  const float* l = logits + (int64_t)t * V;
  const int k = temperature <= 0.f ? 1 : min(top_k, V);
  float last_v = INFINITY;
  int last_i = -1;
  for (int r = 0; r < k; r++) {
    block_best_after(l, V, last_v, last_i, &cand_v[r], &cand_i[r], red_v, red_i);
    last_v = cand_v[r];
    last_i = cand_i[r];
  }
  if (threadIdx.x != 0) return;
  if (k == 1) {
    token[t] = cand_i[0];
    return;
  }
  // softmax at temperature over the survivors (cand_v[0] is their max)
  float p[kMaxTopK];
  float sum = 0.f;
  for (int r = 0; r < k; r++) {
    p[r] = expf((cand_v[r] - cand_v[0]) / temperature);
    sum += p[r];
  }
  // top-p: the shortest prefix whose mass reaches top_p (at least one)
  int keep = k;
  float mass = 0.f;
  for (int r = 0; r < k; r++) {
    mass += p[r] / sum;
    if (mass >= top_p) {
      keep = r + 1;
      break;
    }
  }
  float kept = 0.f;
  for (int r = 0; r < keep; r++) kept += p[r];
  const float target = u[t] * kept;
  float c = 0.f;
  int pick = keep - 1;
  for (int r = 0; r < keep; r++) {
    c += p[r];
    if (target < c) {
      pick = r;
      break;
    }
  }
  token[t] = cand_i[pick];
}

}  // namespace

void sample(const float* logits, int T, int V, int top_k, float top_p, float temperature, const float* u,
            int32_t* token, cudaStream_t s) {
  if (T <= 0) return;
  if (top_k <= 0 || top_k > kMaxTopK) top_k = kMaxTopK;
  sample_kernel<<<(unsigned)T, kThreads, 0, s>>>(logits, V, top_k, top_p, temperature, u, token);
  MB_CUDA_LAUNCHED("sample");
}

}  // namespace cuda
}  // namespace mb
