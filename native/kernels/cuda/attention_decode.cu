// Attention for decode over long contexts, split-K: a row's keys are cut into chunks of
// kv_chunk, each run by its own block (attention.cuh with SPLIT), so a handful of rows still fill
// the GPU; attn_combine then merges the chunks' (max, sum, acc) exactly as the online softmax
// would have.
#include "attention.cuh"

namespace mb {
namespace cuda {
namespace {

template <int DH>
__global__ void attn_combine(const float* __restrict__ partial, const int32_t* __restrict__ pos, int H, int Z,
                             int kv_chunk, float* __restrict__ out) {
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int used = min(Z, (pos[t] + kv_chunk) / kv_chunk);  // chunks that held keys of this row
  const float* part = partial + ((int64_t)t * H + h) * Z * (DH + 2);
  float M = -INFINITY;
  for (int z = 0; z < used; z++) M = fmaxf(M, part[z * (DH + 2)]);
  float sum = 0.f, acc = 0.f;
  for (int z = 0; z < used; z++) {
    const float* pz = part + z * (DH + 2);
    const float w = pz[0] == -INFINITY ? 0.f : __expf(pz[0] - M);
    sum += pz[1] * w;
    acc += pz[2 + d] * w;
  }
  out[((int64_t)t * H + h) * DH + d] = sum > 0.f ? acc / sum : 0.f;
}

template <int DH>
void launch(const KvLayer& kv, const float* q, float* out, const int32_t* slot, const int32_t* pos, int T, int H,
            float scale, int max_keys, int kv_chunk, float* partial, cudaStream_t s) {
  const int G = H / kv.Hk;
  const int Z = (max_keys + kv_chunk - 1) / kv_chunk;
  const size_t smem = attn_smem_bytes<DH>(G);
  attn_kernel<DH, true><<<dim3((unsigned)T, (unsigned)kv.Hk, (unsigned)Z), 32 * G, smem, s>>>(
      kv.k, kv.v, kv.Hk, kv.C, q, out, slot, pos, H, G, scale, kv_chunk, partial);
  MB_CUDA_LAUNCHED("attention_decode");
  attn_combine<DH><<<dim3((unsigned)T, (unsigned)H), DH, 0, s>>>(partial, pos, H, Z, kv_chunk, out);
  MB_CUDA_LAUNCHED("attention_decode combine");
}

}  // namespace

size_t attention_decode_scratch_floats(int T, int H, int Dh, int max_keys, int kv_chunk) {
  const int Z = (max_keys + kv_chunk - 1) / kv_chunk;
  return (size_t)T * H * Z * (Dh + 2);
}

void attention_decode(const KvLayer& kv, const float* q, float* out, const int32_t* slot, const int32_t* pos, int T,
                      int H, float scale, int max_keys, int kv_chunk, float* partial, cudaStream_t s) {
  check_attention_shape(kv, H);
  if (T <= 0) return;
  if (kv_chunk <= 0 || max_keys <= 0) throw std::invalid_argument("cuda attention_decode: bad key chunking");
  MB_DISPATCH_HEAD_DIM(kv.Dh, launch, kv, q, out, slot, pos, T, H, scale, max_keys, kv_chunk, partial, s)
}

}  // namespace cuda
}  // namespace mb
