// gemma3: a pre- and post-norm decoder whose attention layers alternate between a sliding
// window of W positions (local, RoPE base 10000) and the whole context (global, RoPE base
// rope.freq_base): of every P = attention.sliding_window_pattern layers (default 6) the first
// P - 1 are local, the last is global, as llama.cpp's set_swa_pattern(P) lays them out. What else
// sets it apart from llama (all as llama.cpp's src/models/gemma3.cpp builds it):
//   - the embedding is scaled by sqrt(D);
//   - RMSNorm multiplies by (1 + w) in the reference model, but llama.cpp's converter writes
//     w + 1 into the GGUF (Gemma3Model's norm_shift), so the file's norm weights are used as they
//     are here, like every other architecture's; adding 1 again would be the bug;
//   - Q and K are RMS-normed per head (attn_q_norm, attn_k_norm) before RoPE on rotated halves;
//   - Q is scaled by 1/sqrt(Dh) (27B: 1/sqrt(D/H)) before the f16 K·Q, and the softmax takes no
//     further scale, as llama.cpp scales Qcur and passes kq_scale 1;
//   - the attention and FFN outputs are RMS-normed again (post_attention_norm, post_ffw_norm)
//     before their residual adds;
//   - the FFN is GeGLU with tanh-approximate GELU (kernels.h gelu_mul: llama.cpp's f16 table);
//   - the logits are soft-capped, cap * tanh(logits / cap), when final_logit_softcapping is set.
//
// K/V: global layers keep C positions per slot like every model here; a local layer keeps a ring
// of R = W + Tm positions (position p at p mod R). A chunk of T <= Tm tokens writes its K/V before
// its queries read, so a query at p needs [p - W + 1, p] while the chunk overwrites at most
// positions <= p + T - 1 - R < p - W + 1: the window is always intact. llama.cpp sizes its SWA
// cache the same way (n_swa + n_ubatch cells, padded to 256). The price is that a slot can no
// longer be cut back to any prefix: kv_reusable() says which ones still have their window.
//
// Dimension legend: T tokens in the chunk (<= Tm), D n_embd, H heads, Hk KV heads, G = H / Hk,
// Dh head dim (attention.key_length), F n_ff, V n_vocab, L layers, Lg global layers, Ls local
// layers, W sliding window, R ring positions of a local layer, S slots, C context per slot,
// P threads.
//
//   x = token_embd[token] * sqrt(D)                                     x [T, D]
//   each layer (local or global):
//     xn = rmsnorm(x) * attn_norm
//     q, k, v = xn·Wq, xn·Wk, xn·Wv                                     q [T, H*Dh]  k, v [T, Hk*Dh]
//     q, k = rmsnorm(each head) * q_norm, k_norm                         q_norm, k_norm [Dh]
//     q, k = rope(q), rope(k) with the layer's base;  q *= attn_scale;  k, v -> its cache
//     x += rmsnorm(attention(q, K, V over the layer's window)·Wo) * post_attention_norm
//     xn = rmsnorm(x) * ffn_norm
//     x += rmsnorm((gelu(xn·Wgate) * (xn·Wup))·Wdown) * post_ffw_norm
//   logits = softcap((rmsnorm(x) * output_norm)·Wout)                  [wanted rows, V]
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "model/transformer.h"

namespace mb {
using namespace model_detail;
namespace {

struct Gemma3Params {
  int n_swa;                // W: attention.sliding_window (0: every layer global)
  int swa_pattern;          // P: attention.sliding_window_pattern
  float rope_base_local;    // rope.freq_base_swa, else 10000
  float rope_base_global;   // rope.freq_base
  float attn_scale;         // applied to q before attention
  float logit_softcap;      // final_logit_softcapping (0: none)
};

class Gemma3 final : public Transformer {
 public:
  Gemma3(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, std::unique_ptr<Backend> be,
         const Gemma3Params& gp)
      : Transformer(std::move(file), cfg, cap, std::move(be), /*own_kv=*/false), gp_(gp) {
    const WeightLoader w(*file_, cfg_, be_.get());
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      Layer l{w.attention(il, Biases::optional),
              w.vec(p + "attn_q_norm.weight", Dh_),
              w.vec(p + "attn_k_norm.weight", Dh_),
              w.vec(p + "post_attention_norm.weight", D_),
              w.swiglu(il),  // the GeGLU's tensors are named as SwiGLU's: ffn_norm, ffn_{gate,up,down}
              w.vec(p + "post_ffw_norm.weight", D_),
              gp_.n_swa > 0 && il % gp_.swa_pattern < gp_.swa_pattern - 1,
              0};
      l.cache = l.local ? Ls_++ : Lg_++;
      layers_.push_back(std::move(l));
    }
    R_ = std::min(C_, gp_.n_swa + Tm_);
    kv_.push_back(be_->alloc_kv(Lg_, S_, Hk_, C_, Dh_, G_, /*ring=*/false));  // kGlobal
    kv_.push_back(be_->alloc_kv(Ls_, S_, Hk_, R_, Dh_, G_, /*ring=*/true));   // kLocal
    ring_lo_.assign(S_, 0);
  }

  // The host prompt cache stores every position of every layer, which the rings no longer have.
  size_t kv_token_bytes() const override { return 0; }
  void kv_read(int, int, int, uint8_t*) const override { throw std::logic_error("model: gemma3 has no kv_read"); }
  void kv_write(int, int, int, const uint8_t*) override { throw std::logic_error("model: gemma3 has no kv_write"); }

  // Continuing from n needs the local layers' K/V of [n - W + 1, n): still in the ring unless a
  // later position has overwritten it. As in llama.cpp's server, a prefix without its window is
  // not patched up: the slot starts over.
  int kv_reusable(int slot, int n) const override {
    if (slot < 0 || slot >= S_) throw std::out_of_range("model: kv_reusable slot out of range");
    n = std::max(0, std::min(n, slot_len(slot)));
    return std::max(0, n - gp_.n_swa + 1) >= ring_lo_[slot] ? n : 0;
  }

  bool kv_rewindable() const override { return false; }

  void kv_truncate(int slot, int pos) override {
    if (slot < 0 || slot >= S_) throw std::out_of_range("model: kv_truncate slot out of range");
    const int keep = std::max(0, std::min(pos, slot_len(slot)));
    if (keep > 0 && kv_reusable(slot, keep) != keep)
      throw std::logic_error("model: gemma3 slot " + std::to_string(slot) + " cannot continue from position " +
                             std::to_string(keep) + ": its sliding-window layers no longer hold positions below " +
                             std::to_string(ring_lo_[slot]));
    Transformer::kv_truncate(slot, keep);
    if (keep == 0) ring_lo_[slot] = 0;
  }

  void kv_copy(int src, int dst, int n) override {
    if (src >= 0 && src < S_ && n > 0 && kv_reusable(src, n) != n)
      throw std::logic_error("model: gemma3 kv_copy of a prefix whose sliding window is gone");
    Transformer::kv_copy(src, dst, n);  // both caches, a ring whole; sets dst's length
    if (src != dst) ring_lo_[dst] = ring_lo_[src];
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    embed(x_);                                                  // x [T, D]
    be_->scale(x_, T, D_, std::sqrt((float)D_));
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      const RopeArgs rope{cfg_.rope_dim, l.local ? gp_.rope_base_local : gp_.rope_base_global, /*neox=*/true};
      const KvBuf& kv = kv_[l.local ? kLocal : kGlobal];
      rmsnorm_rows(xn_, x_, l.attn.norm, T);                    // xn [T, D]
      project_qkv(l.attn, xn_, T);                              // q [T, H*Dh], k, v [T, Hk*Dh]
      rmsnorm_heads(q_, H_, l.q_norm, T);
      be_->rope(q_, H_, Dh_, rope, T);
      rmsnorm_heads(k_, Hk_, l.k_norm, T);
      be_->rope(k_, Hk_, Dh_, rope, T);
      be_->scale(q_, T, HD_, gp_.attn_scale);
      be_->store_kv(kv, l.cache, k_, v_, T);                    // a local layer's at pos mod R
      // q is already scaled; a local layer sees its window of the ring
      be_->attention(kv, l.cache, q_, att_, H_, AttnArgs{1.0f, l.local ? gp_.n_swa : 0}, T);  // att [T, H*Dh]
      mm(l.attn.wo, att_, y_, T);                               // y [T, D]
      rmsnorm_rows(y_, y_, l.post_attn_norm, T);
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.ffn.norm, T);                     // xn [T, D]
      mm(l.ffn.gate, xn_, gate_, T);                            // gate [T, F]
      mm(l.ffn.up, xn_, up_, T);                                // up [T, F]
      be_->glu(Glu::gelu, gate_, up_, T, F_);
      mm(l.ffn.down, gate_, y_, T);                             // y [T, D]
      rmsnorm_rows(y_, y_, l.post_ffn_norm, T);
      add_rows(x_, y_, T);
    }
    for (int t = 0; t < T; t++)  // what the chunk overwrote in the rings is gone
      ring_lo_[c.slot[t]] = std::max(ring_lo_[c.slot[t]], c.pos[t] - R_ + 1);
    logits_of_wanted(c, x_, logits);                            // [wanted rows, V]
    if (gp_.logit_softcap > 0.f) {
      int n = 0;
      for (int t = 0; t < T; t++) n += c.want[t] ? 1 : 0;
      be_->softcap(logits, n, V_, gp_.logit_softcap);
    }
  }

  struct Layer {
    AttentionWeights attn;             // blk.N.attn_norm, attn_{q,k,v,output}
    const float* q_norm;               // [Dh] blk.N.attn_q_norm
    const float* k_norm;               // [Dh] blk.N.attn_k_norm
    const float* post_attn_norm;       // [D] blk.N.post_attention_norm
    SwiGluWeights ffn;                 // blk.N.ffn_norm, ffn_{gate,up,down} (used as GeGLU)
    const float* post_ffn_norm;        // [D] blk.N.post_ffw_norm
    bool local;                        // sliding-window layer
    int cache;                         // index among the local or the global layers
  };

  Gemma3Params gp_;
  std::vector<Layer> layers_;        // [L]
  int Lg_ = 0, Ls_ = 0;              // global and local layers
  int R_ = 0;                        // ring positions of a local layer: min(C, W + Tm)
  enum { kGlobal, kLocal };          // kv_[kGlobal]: [Lg][S][Hk][C][Dh]; kv_[kLocal]: [Ls][S][Hk][R][Dh], p at p mod R
  std::vector<int> ring_lo_;         // [S] lowest position whose local K/V is still in the rings
};

}  // namespace

std::unique_ptr<Transformer> load_gemma3(std::shared_ptr<GgufFile> file, ModelConfig cfg, const Capacity& cap,
                                         std::unique_ptr<Backend> be) {
  cfg.rope_neox = true;
  if (cfg.n_ff <= 0) throw std::runtime_error("model: gemma3.feed_forward_length must be positive");
  Gemma3Params gp;
  gp.n_swa = (int)file->get_int("gemma3.attention.sliding_window", 0);
  gp.swa_pattern = (int)file->get_int("gemma3.attention.sliding_window_pattern", 6);
  if (gp.n_swa < 0 || gp.swa_pattern < 1)
    throw std::runtime_error("model: gemma3.attention.sliding_window and its pattern must be positive");
  gp.rope_base_local = (float)file->get_float("gemma3.rope.freq_base_swa", 10000.0);
  gp.rope_base_global = cfg.rope_freq_base;
  const double rope_scale = file->get_float("gemma3.rope.scaling.factor", 1.0);
  if (rope_scale != 1.0 && file->get_str("gemma3.rope.scaling.type", "linear") != "none")
    throw std::runtime_error("model: gemma3 with RoPE scaling (rope.scaling.factor " + std::to_string(rope_scale) +
                             ") is not supported");
  // llama.cpp's f_attention_scale: the 27B model (62 layers) scales by D / H, the others by Dh
  gp.attn_scale = cfg.n_layer == 62 ? 1.0f / std::sqrt((float)(cfg.n_embd / cfg.n_head))
                                    : 1.0f / std::sqrt((float)cfg.head_dim);
  gp.logit_softcap = (float)file->get_float("gemma3.final_logit_softcapping", 0.0);
  be->require(cfg.arch, {Op::embed, Op::scale, Op::matmul, Op::rmsnorm, Op::add, Op::rope, Op::store_kv,
                         Op::attention, Op::glu_gelu, Op::move_rows});
  if (gp.n_swa > 0) be->require(cfg.arch, {Op::kv_ring, Op::attention_window});
  if (gp.logit_softcap > 0.f) be->require(cfg.arch, {Op::softcap});
  if (file->tensor("blk.0.attn_q.bias") || file->tensor("blk.0.attn_k.bias") || file->tensor("blk.0.attn_v.bias"))
    be->require(cfg.arch, {Op::add_bias});
  return std::make_unique<Gemma3>(std::move(file), cfg, cap, std::move(be), gp);
}

}  // namespace mb
