// Internal to native/model: the part every supported architecture shares — token embedding,
// pre-norm attention with GQA/RoPE (optional QKV biases, optional per-head Q/K RMSNorm), the
// f16 KV cache, final norm and output head. Each architecture file supplies the FFN.
//
// Dimension legend (see model.h): T tokens in this step (<= Tm, the max batch given at load),
// D n_embd, H heads, Hk KV heads, G = H / Hk query heads per KV head, Dh head dim,
// F n_ff, V n_vocab, S slots, C context per slot, L layers, P = threads in the pool,
// Bq query positions per attention work item.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "util/threadpool.h"

namespace mb {
namespace model_detail {

// IEEE binary16 conversion for the KV cache, round to nearest even like ggml's GGML_FP32_TO_FP16.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds past 65504
  if (a < 0x38800000u) {
    // below 2^-14: adding 0.5 leaves round(a / 2^-24) in the low mantissa bits
    float af;
    std::memcpy(&af, &a, 4);
    af += 0.5f;
    uint32_t r;
    std::memcpy(&r, &af, 4);
    return (uint16_t)(sign | (r - 0x3f000000u));
  }
  a += 0xc8000fffu + ((a >> 13) & 1u);  // rebias exponent by -112 and round half to even
  return (uint16_t)(sign | (a >> 13));
}

// Loader helpers: every failure names the tensor and what was expected.
QMatrix weight_2d(const GgufFile& f, const std::string& name, int64_t K, int64_t N);
const GgufTensor* require(const GgufFile& f, const std::string& name);
// Small vectors (norm weights, biases) converted to f32 and owned by the model.
std::vector<float> vector_f32(const GgufFile& f, const std::string& name, int64_t n, bool optional = false);
void check_matmul_type(GgmlType t, const std::string& name);
ModelConfig read_config(const GgufFile& f);

class DecoderBase : public Model {
 public:
  DecoderBase(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, int n_slots, int n_ctx, int max_batch,
              ThreadPool* pool);
  const ModelConfig& config() const override { return cfg_; }
  void forward(const Batch& batch, float* out) override;
  void kv_truncate(int slot, int pos) override;
  void kv_copy(int src, int dst, int n) override;
  size_t kv_bytes() const override;

 protected:
  // out[T, D] = FFN of layer il applied to xn[T, D] (already ffn-normed).
  virtual void ffn(int il, const float* xn, float* out, int T) = 0;
  // Runs fn(i) for i in [0, n) over the pool, strided so neighbouring items land on different threads.
  template <class Fn>
  void par_for(int n, const Fn& fn);
  // y[T, N] = x[T, K] · W^T through the model's own matmul scratch (no allocation per call).
  void mm(const QMatrix& W, const float* x, float* y, int T) { matmul(W, x, y, T, pool_, &mm_scratch_); }

  struct Layer {
    std::vector<float> attn_norm;           // [D]
    QMatrix wq, wk, wv;                     // [D -> H*Dh], [D -> Hk*Dh], [D -> Hk*Dh]
    QMatrix wo;                             // [H*Dh -> D]
    std::vector<float> bq, bk, bv;          // [H*Dh], [Hk*Dh], [Hk*Dh]; empty unless qwen2
    std::vector<float> q_norm, k_norm;      // [Dh]; empty unless qwen3 / qwen3moe
    std::vector<float> ffn_norm;            // [D]
  };

  std::shared_ptr<GgufFile> file_;
  ModelConfig cfg_;
  ThreadPool* pool_;
  int S_, C_, Tm_;
  int D_, H_, Hk_, G_, Dh_, V_;
  QMatrix tok_embd_;                        // [D -> V] rows are embeddings
  QMatrix output_;                          // [D -> V]; tok_embd_ when output.weight is absent
  std::vector<float> output_norm_;          // [D]
  std::vector<Layer> layers_;               // [L]

  // KV cache in f16, llama.cpp's default cache type: the attention kernel reads both as f16 and
  // rounds q to f16 for the scores as ggml does. One (layer, slot, head) is C positions in a row,
  // which is what the kernel walks.
  std::vector<uint16_t> k_cache_;           // [L][S][Hk][C][Dh]
  std::vector<uint16_t> v_cache_;           // [L][S][Hk][C][Dh]
  std::vector<int> slot_len_;               // [S] positions [0, len) hold valid KV
  std::vector<int> len_scratch_;            // [S] slot_len_ while a batch is being validated

  // Scratch, sized for Tm tokens at load so a step allocates nothing here.
  std::vector<float> x_;                    // [Tm, D] residual stream
  std::vector<float> xn_;                   // [Tm, D] normed input of a sublayer
  std::vector<float> q_;                    // [Tm, H*Dh]
  std::vector<float> k_;                    // [Tm, Hk*Dh]
  std::vector<float> v_;                    // [Tm, Hk*Dh]
  std::vector<float> att_;                  // [Tm, H*Dh] attention output before wo
  std::vector<float> tmp_;                  // [Tm, D] sublayer output before the residual add
  std::vector<int> rows_;                   // [Tm] batch rows whose logits are wanted
  MatmulScratch mm_scratch_;                // quantized activations of the current matmul

  // Attention work: one item per (run of <= Bq consecutive positions of one slot, KV head).
  struct AttnItem {
    int t0, n, g;   // batch rows [t0, t0 + n), KV head g
    double cost;    // ~ query rows x keys, for largest-first scheduling
  };
  int Bq_;                                  // positions per item: ~96 query rows (Bq * G)
  std::vector<AttnItem> attn_items_;        // [<= Tm * Hk] this step's items, reserved at load
  size_t attn_scratch_n_;                   // floats of attention scratch per thread (~Bq*G*(C + 16*Dh))
  std::vector<float> attn_scratch_;         // [P][attn_scratch_n_]

  size_t kv_index(int il, int slot, int g, int pos) const {
    return ((((size_t)il * S_ + slot) * Hk_ + g) * C_ + pos) * Dh_;
  }
  void forward_chunk(const int32_t* token, const int32_t* pos, const int32_t* slot, const uint8_t* want, int T,
                     float* out);
  void attention(int il, const int32_t* pos, const int32_t* slot, int T);
};

template <class Fn>
void DecoderBase::par_for(int n, const Fn& fn) {
  const int nth = pool_ ? pool_->size() : 1;
  if (nth <= 1 || n <= 1) {
    for (int i = 0; i < n; i++) fn(i);
    return;
  }
  pool_->run([&](int ith, int nt) {
    for (int i = ith; i < n; i += nt) fn(i);
  });
}

}  // namespace model_detail

std::unique_ptr<Model> load_llama_family(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, int n_slots,
                                         int n_ctx, int max_batch, ThreadPool* pool);
std::unique_ptr<Model> load_qwen3moe(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, int n_slots, int n_ctx,
                                     int max_batch, ThreadPool* pool);
}  // namespace mb
