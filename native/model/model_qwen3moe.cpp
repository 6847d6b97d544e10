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
namespace {
using namespace model_detail;

class Qwen3Moe final : public Transformer {
 public:
  Qwen3Moe(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, ThreadPool* pool)
      : Transformer(std::move(file), cfg, cap, pool), E_(cfg.n_expert), Ek_(cfg.n_expert_used) {
    const WeightLoader w(*file_, cfg_);
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      layers_.push_back({w.attention(il, Biases::optional), w.vector(p + "attn_q_norm.weight", Dh_),
                         w.vector(p + "attn_k_norm.weight", Dh_), w.moe(il)});
    }
    probs_.assign((size_t)Tm_ * E_, 0.f);
    sel_.assign((size_t)Tm_ * Ek_, 0);
    selw_.assign((size_t)Tm_ * Ek_, 0.f);
    res_.assign((size_t)Tm_ * Ek_ * D_, 0.f);
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    embed(c, x_);                                           // x [T, D]
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      rmsnorm_rows(xn_, x_, l.attn.norm, T);                // xn [T, D]
      project_qkv(l.attn, xn_, T);                          // q [T, H*Dh], k, v [T, Hk*Dh]
      par_for(T, [&](int t) {
        rmsnorm_heads(q_row(t), H_, l.q_norm);
        rmsnorm_heads(k_row(t), Hk_, l.k_norm);
        rope_heads(q_row(t), H_, c.pos[t]);
        rope_heads(k_row(t), Hk_, c.pos[t]);
        store_kv(il, c, t);
      });
      attention(il, c, q_, att_);                           // att [T, H*Dh]
      mm(l.attn.wo, att_, y_, T);                           // y [T, D]
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.ffn.norm, T);                 // xn [T, D]
      mm(l.ffn.router, xn_, probs_, T);                     // probs [T, E]: router logits, softmaxed next
      par_for(T, [&](int t) {
        route_top_k(&probs_[(size_t)t * E_], E_, Ek_, &sel_[(size_t)t * Ek_], &selw_[(size_t)t * Ek_]);
      });
      run_experts(l.ffn, xn_, sel_, T, res_);               // res [T, Ek, D]
      // each expert's output scaled, then summed in rank order, as ggml's mul + add chain does
      par_for(T, [&](int t) {
        float* y = &y_[(size_t)t * D_];                     // [D]
        for (int k = 0; k < Ek_; k++) {
          const float w = selw_[(size_t)t * Ek_ + k];
          const float* r = &res_[((size_t)t * Ek_ + k) * D_];
          if (k == 0)
            for (int d = 0; d < D_; d++) y[d] = r[d] * w;
          else
            for (int d = 0; d < D_; d++) y[d] += r[d] * w;
        }
      });
      add_rows(x_, y_, T);
    }
    logits_of_wanted(c, x_, logits);                        // [wanted rows, V]
  }

  struct Layer {
    AttentionWeights attn;     // blk.N.attn_norm, attn_{q,k,v,output}; attn_{q,k,v}.bias if present
    std::vector<float> q_norm; // [Dh] blk.N.attn_q_norm
    std::vector<float> k_norm; // [Dh] blk.N.attn_k_norm
    MoeWeights ffn;            // blk.N.ffn_norm, ffn_gate_inp, ffn_{gate,up,down}_exps
  };
  const int E_, Ek_;
  std::vector<Layer> layers_;         // [L]
  std::vector<float> probs_;          // [Tm, E] router probabilities
  std::vector<int> sel_;              // [Tm, Ek] chosen experts, best first
  std::vector<float> selw_;           // [Tm, Ek] their renormalized weights
  std::vector<float> res_;            // [Tm, Ek, D] expert outputs per (token, rank)
};

}  // namespace

std::unique_ptr<Model> load_qwen3moe(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                     const model_detail::Capacity& cap, ThreadPool* pool) {
  cfg.rope_neox = true;
  if (cfg.n_expert <= 0 || cfg.n_expert_used <= 0 || cfg.n_expert_used > cfg.n_expert || cfg.n_ff <= 0)
    throw std::runtime_error(
        "model: qwen3moe needs expert_count >= expert_used_count > 0 and expert_feed_forward_length");
  return std::make_unique<Qwen3Moe>(std::move(file), cfg, cap, pool);
}

}  // namespace mb
