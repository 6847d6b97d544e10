// qwen3moe: qwen3's attention (per-head Q/K RMSNorm, RoPE on rotated halves) with a routed
// mixture of SwiGLU experts in place of the dense feed-forward. Routing as llama.cpp's qwen3moe
// graph: p = softmax(xn·Wrouter) over all E experts, keep the Ek likeliest, renormalize their
// weights to sum 1, and add w_k * expert_k(xn) in rank order.
//
// Dimension legend: T tokens in the chunk (<= Tm), D n_embd, H heads, Hk KV heads, Dh head dim,
// F n_ff of one expert, E experts, Ek experts per token, V n_vocab, L layers.
//
//   x = token_embd[token]                                              x [T, D]
//   each layer:
//     xn = rmsnorm(x) * attn_norm
//     q, k, v = xn·Wq (+bq), xn·Wk (+bk), xn·Wv (+bv)                   q [T, H*Dh]  k, v [T, Hk*Dh]
//     q, k = rmsnorm(each head) * q_norm, k_norm                        q_norm, k_norm [Dh]
//     q, k = rope(q), rope(k);  k, v -> KV cache
//     x += attention(q, K, V)·Wo
//     xn = rmsnorm(x) * ffn_norm
//     sel, w = top Ek of softmax(xn·Wrouter), renormalized             [T, Ek]
//     x += sum_k w_k * swiglu_{sel_k}(xn)
//   logits = (rmsnorm(x) * output_norm)·Wout                          [wanted rows, V]
#include "model/transformer.h"

namespace mb {
using namespace model_detail;
namespace {

class Qwen3Moe final : public Transformer {
 public:
  Qwen3Moe(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, std::unique_ptr<Backend> be)
      : Transformer(std::move(file), cfg, cap, std::move(be)), E_(cfg.n_expert), Ek_(cfg.n_expert_used) {
    const WeightLoader w(*file_, cfg_, be_.get());
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      const MoeWeights m = w.moe(il);
      layers_.push_back({w.attention(il, Biases::optional), w.vec(p + "attn_q_norm.weight", Dh_),
                         w.vec(p + "attn_k_norm.weight", Dh_), m.norm, m.router,
                         ExpertFfn{m.gate, m.up, m.down, E_, ExpertAct::swiglu}});
    }
    probs_ = be_->alloc((size_t)Tm_ * E_);
    sel_ = be_->alloc_i32((size_t)Tm_ * Ek_);
    selw_ = be_->alloc((size_t)Tm_ * Ek_);
    res_ = be_->alloc((size_t)Tm_ * Ek_ * D_);
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    embed(x_);                                              // x [T, D]
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      rmsnorm_rows(xn_, x_, l.attn.norm, T);                // xn [T, D]
      project_qkv(l.attn, xn_, T);                          // q [T, H*Dh], k, v [T, Hk*Dh]
      rmsnorm_heads(q_, H_, l.q_norm, T);
      rmsnorm_heads(k_, Hk_, l.k_norm, T);
      rope_heads(q_, H_, T);
      rope_heads(k_, Hk_, T);
      store_kv(il, T);
      attention(il, q_, att_, T);                           // att [T, H*Dh]
      mm(l.attn.wo, att_, y_, T);                           // y [T, D]
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.ffn_norm, T);                 // xn [T, D]
      mm(l.router, xn_, probs_, T);                         // probs [T, E]: router logits, softmaxed next
      be_->route(Routing::softmax_top_k, probs_, E_, Ek_, sel_, selw_, T);  // sel, selw [T, Ek]
      run_experts(l.experts, xn_, Ek_, sel_, res_, T);      // res [T, Ek, D]
      be_->weighted_sum(y_, res_, selw_, Ek_, D_, T);       // y [T, D] = sum_k res[t, k] * selw[t, k]
      add_rows(x_, y_, T);
    }
    logits_of_wanted(c, x_, logits);                        // [wanted rows, V]
  }

  struct Layer {
    AttentionWeights attn;     // blk.N.attn_norm, attn_{q,k,v,output}; attn_{q,k,v}.bias if present
    const float* q_norm;       // [Dh] blk.N.attn_q_norm
    const float* k_norm;       // [Dh] blk.N.attn_k_norm
    const float* ffn_norm;     // [D] blk.N.ffn_norm
    QMatrix router;            // [D -> E] blk.N.ffn_gate_inp
    ExpertFfn experts;         // blk.N.ffn_{gate,up,down}_exps, SwiGLU
  };
  const int E_, Ek_;
  std::vector<Layer> layers_;         // [L]
  float* probs_;                      // [Tm, E] router probabilities
  int32_t* sel_;                      // [Tm, Ek] chosen experts, best first
  float* selw_;                       // [Tm, Ek] their renormalized weights
  float* res_;                        // [Tm, Ek, D] expert outputs per (token, rank)
};

}  // namespace

std::unique_ptr<Transformer> load_qwen3moe(std::shared_ptr<GgufFile> file, ModelConfig cfg, const Capacity& cap,
                                           std::unique_ptr<Backend> be) {
  cfg.rope_neox = true;
  if (cfg.n_expert <= 0 || cfg.n_expert_used <= 0 || cfg.n_expert_used > cfg.n_expert || cfg.n_ff <= 0)
    throw std::runtime_error(
        "model: qwen3moe needs expert_count >= expert_used_count > 0 and expert_feed_forward_length");
  be->require(cfg.arch, {Op::embed, Op::matmul, Op::rmsnorm, Op::add, Op::rope, Op::store_kv, Op::attention,
                         Op::moe_route, Op::moe_experts, Op::weighted_sum, Op::move_rows});
  if (file->tensor("blk.0.attn_q.bias") || file->tensor("blk.0.attn_k.bias") || file->tensor("blk.0.attn_v.bias"))
    be->require(cfg.arch, {Op::add_bias});
  return std::make_unique<Qwen3Moe>(std::move(file), cfg, cap, std::move(be));
}

}  // namespace mb
