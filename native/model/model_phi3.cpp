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
using namespace model_detail;
namespace {

class Phi3 final : public Transformer {
 public:
  Phi3(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, std::unique_ptr<Backend> be)
      : Transformer(std::move(file), cfg, cap, std::move(be)) {
    const WeightLoader w(*file_, cfg_, be_.get());
    R_ = cfg_.rope_dim;
    QKV_ = HD_ + 2 * KD_;
    const int n_ctx_orig = (int)file_->get_int("phi3.rope.scaling.original_context_length", cfg_.n_ctx_train);
    attn_factor_ = (float)file_->get_float("phi3.rope.scaling.attn_factor", 1.0);
    const std::vector<float> long_f = w.optional_vector("rope_factors_long.weight", R_ / 2);
    const std::vector<float> short_f = w.optional_vector("rope_factors_short.weight", R_ / 2);
    rope_factors_ = be_->vector(C_ > n_ctx_orig ? long_f : short_f);
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      layers_.push_back({w.vec(p + "attn_norm.weight", D_), w.matrix(p + "attn_qkv.weight", D_, QKV_),
                         w.optional_vec(p + "attn_qkv.bias", QKV_), w.matrix(p + "attn_output.weight", HD_, D_),
                         w.vec(p + "ffn_norm.weight", D_), w.matrix(p + "ffn_up.weight", D_, 2 * F_),
                         w.matrix(p + "ffn_down.weight", F_, D_)});
    }
    qkv_ = be_->alloc((size_t)Tm_ * QKV_);
    gu_ = be_->alloc((size_t)Tm_ * 2 * F_);
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    const RopeArgs rope{R_, cfg_.rope_freq_base, /*neox=*/true, rope_factors_, attn_factor_};
    const float q_scale = 1.0f / std::sqrt((float)Dh_);
    embed(x_);                                              // x [T, D]
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      rmsnorm_rows(xn_, x_, l.attn_norm, T);                // xn [T, D]
      mm(l.wqkv, xn_, qkv_, T);                             // qkv [T, Q]
      if (l.bqkv) be_->add_bias(qkv_, QKV_, l.bqkv, T, QKV_);
      be_->copy_cols(q_, HD_, qkv_, QKV_, T, HD_);           // q [T, H*Dh]
      be_->copy_cols(k_, KD_, qkv_ + HD_, QKV_, T, KD_);     // k [T, Hk*Dh]
      be_->copy_cols(v_, KD_, qkv_ + HD_ + KD_, QKV_, T, KD_);  // v [T, Hk*Dh]
      be_->rope(q_, H_, Dh_, rope, T);
      be_->rope(k_, Hk_, Dh_, rope, T);
      be_->scale(q_, T, HD_, q_scale);
      store_kv(il, T);
      attention(il, q_, att_, T, /*kq_scale=*/1.0f);        // att [T, H*Dh]
      mm(l.wo, att_, y_, T);                                // y [T, D]
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.ffn_norm, T);                 // xn [T, D]
      mm(l.wgate_up, xn_, gu_, T);                          // gu [T, 2F]
      be_->copy_cols(gate_, F_, gu_, 2 * F_, T, F_);        // gate [T, F]
      be_->copy_cols(up_, F_, gu_ + F_, 2 * F_, T, F_);     // up [T, F]
      be_->glu(Glu::silu, gate_, up_, T, F_);
      mm(l.wdown, gate_, y_, T);                            // y [T, D]
      add_rows(x_, y_, T);
    }
    logits_of_wanted(c, x_, logits);                        // [wanted rows, V]
  }

  struct Layer {
    const float* attn_norm;        // [D] blk.N.attn_norm
    QMatrix wqkv;                  // [D -> Q] blk.N.attn_qkv, rows Q | K | V
    const float* bqkv;             // [Q] blk.N.attn_qkv.bias; nullptr when absent
    QMatrix wo;                    // [H*Dh -> D] blk.N.attn_output
    const float* ffn_norm;         // [D] blk.N.ffn_norm
    QMatrix wgate_up;              // [D -> 2F] blk.N.ffn_up, rows gate | up
    QMatrix wdown;                 // [F -> D] blk.N.ffn_down
  };
  std::vector<Layer> layers_;        // [L]
  int R_ = 0;                        // rope dims
  int QKV_ = 0;                      // Q = H*Dh + 2*Hk*Dh
  const float* rope_factors_;        // [R/2] the LongRoPE factors for C; nullptr = none
  float attn_factor_ = 1.f;          // rope.scaling.attn_factor
  float* qkv_;                       // [Tm, Q]
  float* gu_;                        // [Tm, 2F]
};

}  // namespace

std::unique_ptr<Transformer> load_phi3(std::shared_ptr<GgufFile> file, ModelConfig cfg, const Capacity& cap,
                                       std::unique_ptr<Backend> be) {
  cfg.rope_neox = true;
  if (cfg.n_ff <= 0) throw std::runtime_error("model: phi3.feed_forward_length must be positive");
  be->require(cfg.arch, {Op::embed, Op::matmul, Op::rmsnorm, Op::add, Op::copy_cols, Op::rope, Op::scale,
                         Op::store_kv, Op::attention, Op::glu_silu, Op::move_rows});
  if (file->tensor("blk.0.attn_qkv.bias")) be->require(cfg.arch, {Op::add_bias});
  if (file->tensor("rope_factors_long.weight") || file->tensor("rope_factors_short.weight") ||
      file->get_float("phi3.rope.scaling.attn_factor", 1.0) != 1.0)
    be->require(cfg.arch, {Op::rope_factors});
  return std::make_unique<Phi3>(std::move(file), cfg, cap, std::move(be));
}

}  // namespace mb
