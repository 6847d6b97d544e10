// qwen3: the llama/qwen2 block with an RMSNorm over each head of q and k (attn_q_norm,
// attn_k_norm, required) before RoPE on rotated halves (LLAMA_ROPE_TYPE_NEOX). The head dim
// comes from attention.key_length and need not be D / H. Q/K/V biases are added when the file
// has them, as llama.cpp's build_qkv does.
//
// Dimension legend: T tokens in the chunk (<= Tm), D n_embd, H heads, Hk KV heads, Dh head dim,
// F n_ff, V n_vocab, L layers, n rows carried through a layer (T; in the last, the wanted ones).
//
//   x = token_embd[token]                                              x [T, D]
//   each layer:
//     xn = rmsnorm(x) * attn_norm
//     q, k, v = xn·Wq (+bq), xn·Wk (+bk), xn·Wv (+bv)                   q [T, H*Dh]  k, v [T, Hk*Dh]
//     q, k = rmsnorm(each head) * q_norm, k_norm                        q_norm, k_norm [Dh]
//     q, k = rope(q), rope(k);  k, v -> KV cache
//     (last layer: from here on only the rows whose logits are wanted)
//     x += attention(q, K, V)·Wo
//     x += swiglu(rmsnorm(x) * ffn_norm)
//   logits = (rmsnorm(x) * output_norm)·Wout                          [wanted rows, V]
#include "model/transformer.h"

namespace mb {
using namespace model_detail;
namespace {

class Qwen3 final : public Transformer {
 public:
  Qwen3(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, std::unique_ptr<Backend> be)
      : Transformer(std::move(file), cfg, cap, std::move(be)) {
    const WeightLoader w(*file_, cfg_, be_.get());
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      layers_.push_back({w.attention(il, Biases::optional), w.vec(p + "attn_q_norm.weight", Dh_),
                         w.vec(p + "attn_k_norm.weight", Dh_), w.swiglu(il)});
    }
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    embed(x_);                                              // x [T, D]
    Chunk r = c;  // the rows carried on: all of them, then in the last layer the wanted ones
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      rmsnorm_rows(xn_, x_, l.attn.norm, c.T);              // xn [T, D]
      project_qkv(l.attn, xn_, c.T);                        // q [T, H*Dh], k, v [T, Hk*Dh]
      rmsnorm_heads(q_, H_, l.q_norm, c.T);
      rmsnorm_heads(k_, Hk_, l.k_norm, c.T);
      rope_heads(q_, H_, c.T);
      rope_heads(k_, Hk_, c.T);
      store_kv(il, c.T);
      if (il == L_ - 1) r = wanted_rows(c, {{x_, D_}, {q_, H_ * Dh_}});  // x [n, D], q [n, H*Dh]
      if (r.T == 0) break;
      attention(il, q_, att_, r.T);                         // att [n, H*Dh]
      mm(l.attn.wo, att_, y_, r.T);                         // y [n, D]
      add_rows(x_, y_, r.T);
      rmsnorm_rows(xn_, x_, l.ffn.norm, r.T);               // xn [n, D]
      swiglu(l.ffn, xn_, y_, r.T);                          // y [n, D]
      add_rows(x_, y_, r.T);
    }
    logits_of_wanted(r, x_, logits);                        // [wanted rows, V]
  }

  struct Layer {
    AttentionWeights attn;     // blk.N.attn_norm, attn_{q,k,v,output}; attn_{q,k,v}.bias if present
    const float* q_norm;       // [Dh] blk.N.attn_q_norm
    const float* k_norm;       // [Dh] blk.N.attn_k_norm
    SwiGluWeights ffn;         // blk.N.ffn_norm, ffn_{gate,up,down}
  };
  std::vector<Layer> layers_;  // [L]
};

}  // namespace

std::unique_ptr<Transformer> load_qwen3(std::shared_ptr<GgufFile> file, ModelConfig cfg, const Capacity& cap,
                                        std::unique_ptr<Backend> be) {
  cfg.rope_neox = true;
  if (cfg.n_ff <= 0) throw std::runtime_error("model: qwen3.feed_forward_length must be positive");
  be->require(cfg.arch, {Op::embed, Op::matmul, Op::rmsnorm, Op::add, Op::rope, Op::store_kv, Op::attention,
                         Op::glu_silu, Op::move_rows});
  if (file->tensor("blk.0.attn_q.bias") || file->tensor("blk.0.attn_k.bias") || file->tensor("blk.0.attn_v.bias"))
    be->require(cfg.arch, {Op::add_bias});
  return std::make_unique<Qwen3>(std::move(file), cfg, cap, std::move(be));
}

}  // namespace mb
