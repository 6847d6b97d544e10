// Attention for prefill (and any batch where each row reads all of its keys in one block): one
// block per (query row, KV head), key tiles in shared memory, online softmax (attention.cuh).
#include "attention.cuh"

namespace mb {
namespace cuda {
namespace {

template <int DH>
void launch(const KvLayer& kv, const float* q, float* out, const int32_t* slot, const int32_t* pos, int T, int H,
            float scale, cudaStream_t s) {
  const int G = H / kv.Hk;
  const size_t smem = attn_smem_bytes<DH>(G);
  const dim3 grid((unsigned)T, (unsigned)kv.Hk, 1);
  attn_kernel<DH, false><<<grid, 32 * G, smem, s>>>(kv.k, kv.v, kv.Hk, kv.C, q, out, slot, pos, H, G, scale, 0,
                                                    nullptr);
  MB_CUDA_LAUNCHED("attention_prefill");
}

}  // namespace

void attention_prefill(const KvLayer& kv, const float* q, float* out, const int32_t* slot, const int32_t* pos, int T,
                       int H, float scale, cudaStream_t s) {
  check_attention_shape(kv, H);
  if (T <= 0) return;
  MB_DISPATCH_HEAD_DIM(kv.Dh, launch, kv, q, out, slot, pos, T, H, scale, s)
}

}  // namespace cuda
}  // namespace mb
