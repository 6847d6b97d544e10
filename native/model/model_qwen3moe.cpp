// qwen3moe: the qwen3 attention (per-head Q/K RMSNorm, NEOX rope) with a routed-expert FFN.
// Routing as llama.cpp's qwen3moe graph: p = softmax(xn·Wrouter) over all E experts, keep the
// top Ek by p, renormalize the kept weights to sum 1, and add w_k * expert_k(xn) in rank order.
// Tokens are grouped per expert so each expert's weights are read once per step for all of them.
//
// Dimension legend: T tokens in the step (<= Tm max batch), D n_embd, F expert n_ff,
// E experts, Ek experts used per token, L layers.
#include <algorithm>
#include <numeric>

#include "model/decoder.h"

namespace mb {
namespace {

class Qwen3MoeModel final : public model_detail::DecoderBase {
 public:
  Qwen3MoeModel(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, int S, int C, int Tm, ThreadPool* pool)
      : DecoderBase(std::move(file), cfg, S, C, Tm, pool) {
    E_ = cfg_.n_expert;
    Ek_ = cfg_.n_expert_used;
    F_ = cfg_.n_ff;
    if (E_ <= 0 || Ek_ <= 0 || Ek_ > E_ || F_ <= 0)
      throw std::runtime_error("model: qwen3moe needs expert_count >= expert_used_count > 0 and expert_feed_forward_length");
    layers_moe_.resize(cfg_.n_layer);
    for (int il = 0; il < cfg_.n_layer; il++) {
      const std::string p = "blk." + std::to_string(il) + ".";
      MoeLayer& m = layers_moe_[il];
      m.router = model_detail::weight_2d(*file_, p + "ffn_gate_inp.weight", D_, E_);
      m.gate = experts(p + "ffn_gate_exps.weight", D_, F_);
      m.up = experts(p + "ffn_up_exps.weight", D_, F_);
      m.down = experts(p + "ffn_down_exps.weight", F_, D_);
    }
    route_.assign((size_t)Tm_ * E_, 0.f);
    sel_.assign((size_t)Tm_ * Ek_, 0);
    selw_.assign((size_t)Tm_ * Ek_, 0.f);
    members_.assign(Tm_, 0);
    xe_.assign((size_t)Tm_ * D_, 0.f);
    ge_.assign((size_t)Tm_ * F_, 0.f);
    ue_.assign((size_t)Tm_ * F_, 0.f);
    ye_.assign((size_t)Tm_ * D_, 0.f);
    res_.assign((size_t)Tm_ * Ek_ * D_, 0.f);
  }

 protected:
  void ffn(int il, const float* xn, float* out, int T) override {
    const MoeLayer& m = layers_moe_[il];
    mm(m.router, xn, route_.data(), T);
    par_for(T, [&](int t) {
      float* p = &route_[(size_t)t * E_];
      softmax(p, E_);
      int* s = &sel_[(size_t)t * Ek_];
      float* w = &selw_[(size_t)t * Ek_];
      // top-Ek by probability, highest first (partial selection, E is small)
      for (int k = 0; k < Ek_; k++) {
        int best = -1;
        for (int e = 0; e < E_; e++) {
          bool taken = false;
          for (int j = 0; j < k; j++) taken |= s[j] == e;
          if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        s[k] = best;
        w[k] = p[best];
      }
      float sum = 0.f;
      for (int k = 0; k < Ek_; k++) sum += w[k];
      for (int k = 0; k < Ek_; k++) w[k] /= sum;
    });
    for (int e = 0; e < E_; e++) {
      // rows routed to e: members_[i] = t * Ek + k
      int n = 0;
      for (int i = 0; i < T * Ek_; i++)
        if (sel_[i] == e) members_[n++] = i;
      if (n == 0) continue;
      for (int i = 0; i < n; i++)
        std::memcpy(&xe_[(size_t)i * D_], xn + (size_t)(members_[i] / Ek_) * D_, (size_t)D_ * 4);
      mm(slice(m.gate, e), xe_.data(), ge_.data(), n);
      mm(slice(m.up, e), xe_.data(), ue_.data(), n);
      par_for(n, [&](int i) { silu_mul(&ge_[(size_t)i * F_], &ue_[(size_t)i * F_], F_); });
      mm(slice(m.down, e), ge_.data(), ye_.data(), n);
      for (int i = 0; i < n; i++)
        std::memcpy(&res_[(size_t)members_[i] * D_], &ye_[(size_t)i * D_], (size_t)D_ * 4);
    }
    // sum in rank order, each expert output scaled first, as ggml's mul + add chain does
    par_for(T, [&](int t) {
      float* o = out + (size_t)t * D_;
      for (int k = 0; k < Ek_; k++) {
        const float w = selw_[(size_t)t * Ek_ + k];
        const float* r = &res_[((size_t)t * Ek_ + k) * D_];
        if (k == 0)
          for (int d = 0; d < D_; d++) o[d] = r[d] * w;
        else
          for (int d = 0; d < D_; d++) o[d] += r[d] * w;
      }
    });
  }

 private:
  struct Experts {
    GgmlType type;
    int64_t K, N;           // one expert is [K -> N]
    const uint8_t* data;    // E experts back to back
    size_t expert_bytes;
  };
  struct MoeLayer {
    QMatrix router;         // [D -> E]
    Experts gate, up;       // E x [D -> F]
    Experts down;           // E x [F -> D]
  };
  Experts experts(const std::string& name, int64_t K, int64_t N) {
    const GgufTensor* t = model_detail::require(*file_, name);
    if (t->ne.size() != 3 || t->ne[0] != K || t->ne[1] != N || t->ne[2] != E_)
      throw std::runtime_error("model: tensor '" + name + "' is not [" + std::to_string(K) + ", " + std::to_string(N) +
                               ", " + std::to_string(E_) + "]");
    model_detail::check_matmul_type(t->type, name);
    return Experts{t->type, K, N, t->data, ggml_row_bytes(t->type, K) * (size_t)N};
  }
  static QMatrix slice(const Experts& x, int e) { return QMatrix{x.type, x.K, x.N, x.data + (size_t)e * x.expert_bytes}; }

  int E_ = 0, Ek_ = 0, F_ = 0;
  std::vector<MoeLayer> layers_moe_;  // [L]
  std::vector<float> route_;          // [Tm, E] router probabilities
  std::vector<int> sel_;              // [Tm, Ek] chosen experts, best first
  std::vector<float> selw_;           // [Tm, Ek] their renormalized weights
  std::vector<int> members_;          // [Tm] (t * Ek + k) routed to the current expert
  std::vector<float> xe_;             // [Tm, D] gathered inputs of one expert
  std::vector<float> ge_, ue_;        // [Tm, F]
  std::vector<float> ye_;             // [Tm, D] one expert's outputs
  std::vector<float> res_;            // [Tm, Ek, D] expert outputs per (token, rank)
};

}  // namespace

std::unique_ptr<Model> load_qwen3moe(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, int n_slots, int n_ctx,
                                     int max_batch, ThreadPool* pool) {
  return std::make_unique<Qwen3MoeModel>(std::move(file), cfg, n_slots, n_ctx, max_batch, pool);
}

}  // namespace mb
