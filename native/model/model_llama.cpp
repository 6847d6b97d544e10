// llama, qwen2 and qwen3: one graph, differing only in flags the shared loader reads from the
// tensors present (qwen2: QKV biases; qwen3: per-head Q/K RMSNorm) and the rope type (llama:
// adjacent pairs; qwen: NEOX halves). This file adds the dense SwiGLU FFN.
//
// Dimension legend: T tokens in the step (<= Tm max batch), D n_embd, F n_ff, L layers.
#include "model/decoder.h"

namespace mb {
namespace {

class LlamaModel final : public model_detail::DecoderBase {
 public:
  LlamaModel(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, int S, int C, int Tm, ThreadPool* pool)
      : DecoderBase(std::move(file), cfg, S, C, Tm, pool) {
    const int F = cfg_.n_ff;
    if (F <= 0) throw std::runtime_error("model: " + cfg_.arch + ".feed_forward_length must be positive");
    ffn_.resize(cfg_.n_layer);
    for (int il = 0; il < cfg_.n_layer; il++) {
      const std::string p = "blk." + std::to_string(il) + ".";
      ffn_[il].gate = model_detail::weight_2d(*file_, p + "ffn_gate.weight", D_, F);
      ffn_[il].up = model_detail::weight_2d(*file_, p + "ffn_up.weight", D_, F);
      ffn_[il].down = model_detail::weight_2d(*file_, p + "ffn_down.weight", F, D_);
    }
    gate_.assign((size_t)Tm_ * F, 0.f);
    up_.assign((size_t)Tm_ * F, 0.f);
  }

 protected:
  // out = (silu(xn·Wgate) * (xn·Wup)) · Wdown
  void ffn(int il, const float* xn, float* out, int T) override {
    const FfnWeights& w = ffn_[il];
    const int F = cfg_.n_ff;
    mm(w.gate, xn, gate_.data(), T);
    mm(w.up, xn, up_.data(), T);
    par_for(T, [&](int t) { silu_mul(&gate_[(size_t)t * F], &up_[(size_t)t * F], F); });
    mm(w.down, gate_.data(), out, T);
  }

 private:
  struct FfnWeights {
    QMatrix gate, up;  // [D -> F]
    QMatrix down;      // [F -> D]
  };
  std::vector<FfnWeights> ffn_;  // [L]
  std::vector<float> gate_;      // [Tm, F]
  std::vector<float> up_;        // [Tm, F]
};

}  // namespace

std::unique_ptr<Model> load_llama_family(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, int n_slots,
                                         int n_ctx, int max_batch, ThreadPool* pool) {
  return std::make_unique<LlamaModel>(std::move(file), cfg, n_slots, n_ctx, max_batch, pool);
}

}  // namespace mb
