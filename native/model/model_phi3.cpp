// phi3 (Phi-3, Phi-3.5, Phi-4-mini): the llama block with its projections fused and RoPE scaled
// for long contexts.
//   - Q, K and V come from one matrix (attn_qkv, rows Q | K | V), gate and up from another
//     (ffn_up, rows gate | up), so each is one matmul per chunk.
//   - RoPE on rotated halves (LLAMA_ROPE_TYPE_NEOX) over the first rope.dimension_count dims of
//     each head only (Phi-4-mini rotates 96 of 128).
//   - LongRoPE: when the file has rope_factors_short / rope_factors_long ([rope_dim/2], one pair
//     for every layer), each pair's angle is divided by its factor. llama.cpp picks long when the
//     context per sequence exceeds rope.scaling.original_context_length, short otherwise, for the
//     whole run; here the context per slot (C) decides the same way, once at load. The cos and
//     sin are multiplied by rope.scaling.attn_factor (1 when absent), as ggml_rope_ext does.
//   - q is scaled by 1/sqrt(Dh) before attention (llama.cpp's graph does it there, before the
//     f16 rounding of q in the scores), and the scores are not scaled again.
//   - phi3.attention.sliding_window is read by nobody: llama.cpp turns Phi-3's sliding window
//     off (its loader drops it; the converter writes 0 for Phi-4), and llama.cpp is what this
//     must match.
//
// Dimension legend: T tokens in the chunk (<= Tm), D n_embd, H heads, Hk KV heads, Dh head dim
// (= D / H), R rope dims (<= Dh), F n_ff, V n_vocab, L layers, Q = H*Dh + 2*Hk*Dh.
//
//   x = token_embd[token]                                              x [T, D]
//   each layer:
//     xn = rmsnorm(x) * attn_norm
//     q | k | v = xn·Wqkv (+ bqkv)                                       qkv [T, Q]
//     q, k = rope(q, factors), rope(k, factors) on dims [0, R) of each head
//     q = q / sqrt(Dh);  k, v -> KV cache
//     x += attention(q, K, V)·Wo
//     gate | up = (rmsnorm(x) * ffn_norm)·Wup                            gu [T, 2F]
//     x += (silu(gate) * up)·Wdown
//   logits = (rmsnorm(x) * output_norm)·Wout                          [wanted rows, V]
#include <cmath>
#include <cstring>

#include "model/transformer.h"

namespace mb {
namespace {
using namespace model_detail;

class Phi3 final : public Transformer {
 public:
  Phi3(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, ThreadPool* pool)
      : Transformer(std::move(file), cfg, cap, pool) {
    const WeightLoader w(*file_, cfg_);
    R_ = cfg_.rope_dim;
    QKV_ = HD_ + 2 * KD_;
    const int n_ctx_orig = (int)file_->get_int("phi3.rope.scaling.original_context_length", cfg_.n_ctx_train);
    attn_factor_ = (float)file_->get_float("phi3.rope.scaling.attn_factor", 1.0);
    const std::vector<float> long_f = w.optional_vector("rope_factors_long.weight", R_ / 2);
    const std::vector<float> short_f = w.optional_vector("rope_factors_short.weight", R_ / 2);
    rope_factors_ = C_ > n_ctx_orig ? long_f : short_f;
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      layers_.push_back({w.vector(p + "attn_norm.weight", D_), w.matrix(p + "attn_qkv.weight", D_, QKV_),
                         w.optional_vector(p + "attn_qkv.bias", QKV_), w.matrix(p + "attn_output.weight", HD_, D_),
                         w.vector(p + "ffn_norm.weight", D_), w.matrix(p + "ffn_up.weight", D_, 2 * F_),
                         w.matrix(p + "ffn_down.weight", F_, D_)});
    }
    qkv_.assign((size_t)Tm_ * QKV_, 0.f);
    gu_.assign((size_t)Tm_ * 2 * F_, 0.f);
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    const float* factors = rope_factors_.empty() ? nullptr : rope_factors_.data();
    const float q_scale = 1.0f / std::sqrt((float)Dh_);
    embed(c, x_);                                           // x [T, D]
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      rmsnorm_rows(xn_, x_, l.attn_norm, T);                // xn [T, D]
      mm(l.wqkv, xn_, qkv_, T);                             // qkv [T, Q]
      par_for(T, [&](int t) {
        float* row = &qkv_[(size_t)t * QKV_];
        if (!l.bqkv.empty()) add(row, l.bqkv.data(), QKV_);
        float* q = q_row(t);                                // [H*Dh]
        float* k = k_row(t);                                // [Hk*Dh]
        std::memcpy(q, row, (size_t)HD_ * 4);
        std::memcpy(k, row + HD_, (size_t)KD_ * 4);
        std::memcpy(v_row(t), row + HD_ + KD_, (size_t)KD_ * 4);
        rope(q, H_, Dh_, R_, c.pos[t], cfg_.rope_freq_base, /*neox=*/true, factors, attn_factor_);
        rope(k, Hk_, Dh_, R_, c.pos[t], cfg_.rope_freq_base, /*neox=*/true, factors, attn_factor_);
        for (int i = 0; i < HD_; i++) q[i] *= q_scale;
        store_kv(il, c, t);
      });
      attention(il, c, q_, att_, /*kq_scale=*/1.0f);        // att [T, H*Dh]
      mm(l.wo, att_, y_, T);                                // y [T, D]
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.ffn_norm, T);                 // xn [T, D]
      mm(l.wgate_up, xn_, gu_, T);                          // gu [T, 2F]
      par_for(T, [&](int t) {
        float* g = &gate_[(size_t)t * F_];                  // [F]
        const float* gu = &gu_[(size_t)t * 2 * F_];
        std::memcpy(g, gu, (size_t)F_ * 4);
        silu_mul(g, gu + F_, F_);
      });
      mm(l.wdown, gate_, y_, T);                            // y [T, D]
      add_rows(x_, y_, T);
    }
    logits_of_wanted(c, x_, logits);                        // [wanted rows, V]
  }

  struct Layer {
    std::vector<float> attn_norm;  // [D] blk.N.attn_norm
    QMatrix wqkv;                  // [D -> Q] blk.N.attn_qkv, rows Q | K | V
    std::vector<float> bqkv;       // [Q] blk.N.attn_qkv.bias; empty when absent
    QMatrix wo;                    // [H*Dh -> D] blk.N.attn_output
    std::vector<float> ffn_norm;   // [D] blk.N.ffn_norm
    QMatrix wgate_up;              // [D -> 2F] blk.N.ffn_up, rows gate | up
    QMatrix wdown;                 // [F -> D] blk.N.ffn_down
  };
  std::vector<Layer> layers_;        // [L]
  int R_ = 0;                        // rope dims
  int QKV_ = 0;                      // Q = H*Dh + 2*Hk*Dh
  std::vector<float> rope_factors_;  // [R/2] the LongRoPE factors for C; empty = none
  float attn_factor_ = 1.f;          // rope.scaling.attn_factor
  std::vector<float> qkv_;           // [Tm, Q]
  std::vector<float> gu_;            // [Tm, 2F]
};

}  // namespace

std::unique_ptr<Model> load_phi3(std::shared_ptr<GgufFile> file, ModelConfig cfg, const model_detail::Capacity& cap,
                                 ThreadPool* pool) {
  cfg.rope_neox = true;
  if (cfg.n_ff <= 0) throw std::runtime_error("model: phi3.feed_forward_length must be positive");
  return std::make_unique<Phi3>(std::move(file), cfg, cap, pool);
}

}  // namespace mb
