// qwen3: qwen2's block without the required biases and with an RMSNorm over each head of q
// and k (attn_q_norm, attn_k_norm) before RoPE on rotated halves (LLAMA_ROPE_TYPE_NEOX). The head
// dim comes from attention.key_length and need not be D / H. Q/K/V biases are added when the
// file has them, as llama.cpp's build_qkv does.
//
// Dimension legend: T tokens in the chunk (<= Tm), D n_embd, H heads, Hk KV heads, Dh head dim,
// F n_ff, V n_vocab, L layers.
//
//   x = token_embd[token]                                              x [T, D]
//   each layer:
//     xn = rmsnorm(x) * attn_norm
//     q, k, v = xn·Wq (+bq), xn·Wk (+bk), xn·Wv (+bv)                   q [T, H*Dh]  k, v [T, Hk*Dh]
//     q, k = rmsnorm(each head) * q_norm, k_norm                        q_norm, k_norm [Dh]
//     q, k = rope_neox(q), rope_neox(k);  k, v -> KV cache
//     x += attention(q, K, V)·Wo
//     x += swiglu(rmsnorm(x) * ffn_norm)
//   logits = (rmsnorm(x) * output_norm)·Wout                          [wanted rows, V]
#include "model/transformer.h"

namespace mb {
namespace {
using namespace model_detail;

class Qwen3 final : public Transformer {
 public:
  Qwen3(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, ThreadPool* pool)
      : Transformer(std::move(file), cfg, cap, pool) {
    const WeightLoader w(*file_, cfg_);
    token_embd_ = w.token_embd();
    output_norm_ = w.vector("output_norm.weight", D_);
    output_ = w.output(token_embd_);
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      layers_.push_back({w.attention(il, Biases::optional), w.vector(p + "attn_q_norm.weight", Dh_),
                         w.vector(p + "attn_k_norm.weight", Dh_), w.swiglu(il)});
    }
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    embed(token_embd_, c, x_);                              // x [T, D]
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      rmsnorm_rows(xn_, x_, l.attn.norm, T);                // xn [T, D]
      mm(l.attn.wq, xn_, q_, T);                            // q [T, H*Dh]
      mm(l.attn.wk, xn_, k_, T);                            // k [T, Hk*Dh]
      mm(l.attn.wv, xn_, v_, T);                            // v [T, Hk*Dh]
      par_for(T, [&](int t) {
        float* q = &q_[(size_t)t * HD_];                    // [H*Dh]
        float* k = &k_[(size_t)t * KD_];                    // [Hk*Dh]
        float* v = &v_[(size_t)t * KD_];                    // [Hk*Dh]
        add_qkv_biases(l.attn, q, k, v);
        rmsnorm_heads(q, H_, l.q_norm);
        rmsnorm_heads(k, Hk_, l.k_norm);
        rope_heads(q, H_, c.pos[t]);
        rope_heads(k, Hk_, c.pos[t]);
        store_kv(il, c.slot[t], c.pos[t], k, v);
      });
      attention(il, c, q_, att_);                           // att [T, H*Dh]
      mm(l.attn.wo, att_, y_, T);                           // y [T, D]
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.ffn.norm, T);                 // xn [T, D]
      swiglu(l.ffn, xn_, y_, T);                            // y [T, D]
      add_rows(x_, y_, T);
    }
    logits_of_wanted(output_norm_, output_, c, x_, logits);
  }

  struct Layer {
    AttentionWeights attn;     // blk.N.attn_norm, attn_{q,k,v,output}; attn_{q,k,v}.bias if present
    std::vector<float> q_norm; // [Dh] blk.N.attn_q_norm
    std::vector<float> k_norm; // [Dh] blk.N.attn_k_norm
    SwiGluWeights ffn;         // blk.N.ffn_norm, ffn_{gate,up,down}
  };
  QMatrix token_embd_;                // [D -> V], rows are embeddings
  QMatrix output_;                    // [D -> V], token_embd_ when tied
  std::vector<float> output_norm_;    // [D]
  std::vector<Layer> layers_;         // [L]
};

}  // namespace

std::unique_ptr<Model> load_qwen3(std::shared_ptr<GgufFile> file, ModelConfig cfg, const model_detail::Capacity& cap,
                                  ThreadPool* pool) {
  cfg.rope_neox = true;
  if (cfg.n_ff <= 0) throw std::runtime_error("model: qwen3.feed_forward_length must be positive");
  return std::make_unique<Qwen3>(std::move(file), cfg, cap, pool);
}

}  // namespace mb
