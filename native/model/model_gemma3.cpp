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
namespace {
using namespace model_detail;

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
  Gemma3(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, ThreadPool* pool,
         const Gemma3Params& gp)
      : Transformer(std::move(file), cfg, cap, pool, /*own_kv=*/false), gp_(gp) {
    const WeightLoader w(*file_, cfg_);
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      Layer l{w.attention(il, Biases::optional),
              w.vector(p + "attn_q_norm.weight", Dh_),
              w.vector(p + "attn_k_norm.weight", Dh_),
              w.vector(p + "post_attention_norm.weight", D_),
              w.swiglu(il),  // the GeGLU's tensors are named as SwiGLU's: ffn_norm, ffn_{gate,up,down}
              w.vector(p + "post_ffw_norm.weight", D_),
              gp_.n_swa > 0 && il % gp_.swa_pattern < gp_.swa_pattern - 1,
              0};
      l.cache = l.local ? Ls_++ : Lg_++;
      layers_.push_back(std::move(l));
    }
    R_ = std::min(C_, gp_.n_swa + Tm_);
    k_global_.assign((size_t)Lg_ * S_ * Hk_ * C_ * Dh_, 0);
    v_global_.assign(k_global_.size(), 0);
    k_local_.assign((size_t)Ls_ * S_ * Hk_ * R_ * Dh_, 0);
    v_local_.assign(k_local_.size(), 0);
    ring_lo_.assign(S_, 0);

    Bq_ = std::max(1, std::min(Tm_, 96 / G_));
    items_.reserve((size_t)Tm_ * Hk_);
    const int P = pool_ ? pool_->size() : 1;
    // a local call's keys: [its window's aligned start, its last position], < R + kAttentionKeyAlign
    const int local_keys = R_ + kAttentionKeyAlign;
    scratch_n_ = attention_scratch_floats(Bq_, G_, Dh_, std::max(Lg_ > 0 ? C_ : 0, local_keys));
    scratch_.assign((size_t)P * scratch_n_, 0.f);
    gather_n_ = Ls_ > 0 ? (size_t)2 * local_keys * Dh_ : 0;
    gather_.assign((size_t)P * gather_n_, 0);
  }

  size_t kv_bytes() const override {
    return (k_global_.size() + v_global_.size() + k_local_.size() + v_local_.size()) * sizeof(uint16_t);
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
    Transformer::kv_copy(src, dst, n);  // checks the arguments, sets dst's length
    if (src == dst) return;
    for (int gl = 0; gl < Lg_; gl++)
      for (int g = 0; g < Hk_; g++) {
        std::memcpy(global_k(gl, dst, g), global_k(gl, src, g), (size_t)n * Dh_ * 2);
        std::memcpy(global_v(gl, dst, g), global_v(gl, src, g), (size_t)n * Dh_ * 2);
      }
    // the whole ring: positions past n are stale in dst as they would be in a truncated src
    for (int ll = 0; ll < Ls_; ll++)
      for (int g = 0; g < Hk_; g++) {
        std::memcpy(local_k(ll, dst, g), local_k(ll, src, g), (size_t)R_ * Dh_ * 2);
        std::memcpy(local_v(ll, dst, g), local_v(ll, src, g), (size_t)R_ * Dh_ * 2);
      }
    ring_lo_[dst] = ring_lo_[src];
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    const float emb_scale = std::sqrt((float)D_);
    embed(c, x_);                                               // x [T, D]
    par_for(T, [&](int t) {
      float* xr = &x_[(size_t)t * D_];
      for (int d = 0; d < D_; d++) xr[d] *= emb_scale;
    });
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      const float base = l.local ? gp_.rope_base_local : gp_.rope_base_global;
      rmsnorm_rows(xn_, x_, l.attn.norm, T);                    // xn [T, D]
      project_qkv(l.attn, xn_, T);                              // q [T, H*Dh], k, v [T, Hk*Dh]
      par_for(T, [&](int t) {
        float* q = q_row(t);
        float* k = k_row(t);
        rmsnorm_heads(q, H_, l.q_norm);
        rope(q, H_, Dh_, cfg_.rope_dim, c.pos[t], base, /*neox=*/true);
        rmsnorm_heads(k, Hk_, l.k_norm);
        rope(k, Hk_, Dh_, cfg_.rope_dim, c.pos[t], base, /*neox=*/true);
        for (int i = 0; i < HD_; i++) q[i] *= gp_.attn_scale;
        store_kv(l, c, t);
      });
      attend(l, c);                                             // att [T, H*Dh]
      mm(l.attn.wo, att_, y_, T);                               // y [T, D]
      rmsnorm_rows(y_, y_, l.post_attn_norm, T);
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.ffn.norm, T);                     // xn [T, D]
      mm(l.ffn.gate, xn_, gate_, T);                            // gate [T, F]
      mm(l.ffn.up, xn_, up_, T);                                // up [T, F]
      par_for(T, [&](int t) { gelu_mul(&gate_[(size_t)t * F_], &up_[(size_t)t * F_], F_); });
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
      const float cap = gp_.logit_softcap;
      par_for(n, [&](int i) {
        float* row = logits + (size_t)i * V_;
        for (int j = 0; j < V_; j++) row[j] = std::tanh(row[j] * (1.0f / cap)) * cap;
      });
    }
  }

  struct Layer {
    AttentionWeights attn;             // blk.N.attn_norm, attn_{q,k,v,output}
    std::vector<float> q_norm;         // [Dh] blk.N.attn_q_norm
    std::vector<float> k_norm;         // [Dh] blk.N.attn_k_norm
    std::vector<float> post_attn_norm; // [D] blk.N.post_attention_norm
    SwiGluWeights ffn;                 // blk.N.ffn_norm, ffn_{gate,up,down} (used as GeGLU)
    std::vector<float> post_ffn_norm;  // [D] blk.N.post_ffw_norm
    bool local;                        // sliding-window layer
    int cache;                         // index among the local or the global layers
  };

  // One (layer, slot, KV head)'s rows: C positions for a global layer, R for a local one.
  uint16_t* global_k(int gl, int s, int g) { return &k_global_[((((size_t)gl * S_ + s) * Hk_ + g) * C_) * Dh_]; }
  uint16_t* global_v(int gl, int s, int g) { return &v_global_[((((size_t)gl * S_ + s) * Hk_ + g) * C_) * Dh_]; }
  uint16_t* local_k(int ll, int s, int g) { return &k_local_[((((size_t)ll * S_ + s) * Hk_ + g) * R_) * Dh_]; }
  uint16_t* local_v(int ll, int s, int g) { return &v_local_[((((size_t)ll * S_ + s) * Hk_ + g) * R_) * Dh_]; }

  void store_kv(const Layer& l, const Chunk& c, int t) {
    const int s = c.slot[t], pos = c.pos[t];
    const float* k = k_row(t);
    const float* v = v_row(t);
    for (int g = 0; g < Hk_; g++) {
      uint16_t* kc = l.local ? local_k(l.cache, s, g) + (size_t)(pos % R_) * Dh_ : global_k(l.cache, s, g) + (size_t)pos * Dh_;
      uint16_t* vc = l.local ? local_v(l.cache, s, g) + (size_t)(pos % R_) * Dh_ : global_v(l.cache, s, g) + (size_t)pos * Dh_;
      for (int d = 0; d < Dh_; d++) {
        kc[d] = f32_to_f16(k[g * Dh_ + d]);
        vc[d] = f32_to_f16(v[g * Dh_ + d]);
      }
    }
  }

  // att_[T, H*Dh] from q_ (already scaled), work shared out as in Transformer::attention: each
  // run of consecutive positions of one slot in blocks of Bq, per KV head, largest first.
  void attend(const Layer& l, const Chunk& c) {
    const int T = c.T;
    items_.clear();
    for (int t0 = 0; t0 < T;) {
      int t1 = t0 + 1;
      while (t1 < T && t1 - t0 < Bq_ && c.slot[t1] == c.slot[t0] && c.pos[t1] == c.pos[t1 - 1] + 1) t1++;
      const int n = t1 - t0;
      const int keys = l.local ? std::min(c.pos[t0] + n, gp_.n_swa + n) : c.pos[t0] + n;
      for (int g = 0; g < Hk_; g++) items_.push_back({t0, n, g, (double)n * G_ * keys});
      t0 = t1;
    }
    std::sort(items_.begin(), items_.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
    const int n_items = (int)items_.size();
    const int nth = pool_ ? pool_->size() : 1;
    if (nth <= 1 || n_items <= 1) {
      for (const Item& it : items_) attend_item(l, c, it, scratch_.data(), gather_.data());
      return;
    }
    std::atomic<int> next{0};
    pool_->run([&](int ith, int) {
      float* scratch = &scratch_[(size_t)ith * scratch_n_];
      uint16_t* gather = &gather_[(size_t)ith * gather_n_];
      for (int i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_items;)
        attend_item(l, c, items_[i], scratch, gather);
    });
  }

  struct Item {
    int t0, n, g;   // chunk rows [t0, t0 + n), KV head g
    double cost;    // ~ query rows x keys
  };

  void attend_item(const Layer& l, const Chunk& c, const Item& it, float* scratch, uint16_t* gather) {
    const int s = c.slot[it.t0], p0 = c.pos[it.t0];
    const float* q = &q_[(size_t)it.t0 * HD_ + (size_t)it.g * G_ * Dh_];  // first head of the group
    float* out = &att_[(size_t)it.t0 * HD_ + (size_t)it.g * G_ * Dh_];
    if (!l.local) {
      mb::attention(q, HD_, global_k(l.cache, s, it.g), global_v(l.cache, s, it.g), out, HD_, it.n, G_, Dh_, p0, 1.0f,
                    0, nullptr, scratch);
      return;
    }
    // One windowed call over keys [base, p0 + n) in position order, base the first row's window
    // start rounded down to kAttentionKeyAlign: the kernel then blocks the keys as it would the
    // whole context, so a row's bits do not depend on where its chunk or item began. Positions
    // in [base, lo0) are masked; the ring may have reused their cells (anything finite will do).
    // In place unless the span wraps around the ring's end.
    const int W = gp_.n_swa;
    const int lo0 = std::max(0, p0 - W + 1);
    const int base = lo0 / kAttentionKeyAlign * kAttentionKeyAlign, len = p0 + it.n - base;
    const uint16_t* ring_k = local_k(l.cache, s, it.g);  // [R][Dh]
    const uint16_t* ring_v = local_v(l.cache, s, it.g);  // [R][Dh]
    const uint16_t* k = ring_k + (size_t)(base % R_) * Dh_;
    const uint16_t* v = ring_v + (size_t)(base % R_) * Dh_;
    if (base % R_ + len > R_) {
      uint16_t* gk = gather;                                                   // [len][Dh]
      uint16_t* gv = gather + (size_t)(R_ + kAttentionKeyAlign) * Dh_;         // [len][Dh]
      for (int x = 0; x < len;) {
        const int r = (base + x) % R_, m = std::min(len - x, R_ - r);
        std::memcpy(gk + (size_t)x * Dh_, ring_k + (size_t)r * Dh_, (size_t)m * Dh_ * 2);
        std::memcpy(gv + (size_t)x * Dh_, ring_v + (size_t)r * Dh_, (size_t)m * Dh_ * 2);
        x += m;
      }
      k = gk;
      v = gv;
    }
    mb::attention(q, HD_, k, v, out, HD_, it.n, G_, Dh_, p0 - base, 1.0f, W, nullptr, scratch);
  }

  Gemma3Params gp_;
  std::vector<Layer> layers_;        // [L]
  int Lg_ = 0, Ls_ = 0;              // global and local layers
  int R_ = 0;                        // ring positions of a local layer: min(C, W + Tm)
  std::vector<uint16_t> k_global_;   // [Lg][S][Hk][C][Dh] f16
  std::vector<uint16_t> v_global_;   // [Lg][S][Hk][C][Dh] f16
  std::vector<uint16_t> k_local_;    // [Ls][S][Hk][R][Dh] f16, position p at p mod R
  std::vector<uint16_t> v_local_;    // [Ls][S][Hk][R][Dh] f16
  std::vector<int> ring_lo_;         // [S] lowest position whose local K/V is still in the rings

  int Bq_;                           // positions per attention item
  std::vector<Item> items_;          // [<= Tm * Hk]
  size_t scratch_n_;                 // floats of kernel scratch per thread
  std::vector<float> scratch_;       // [P][scratch_n_]
  size_t gather_n_;                  // f16 values per thread for a wrapped window's K and V
  std::vector<uint16_t> gather_;     // [P][2][R + kAttentionKeyAlign][Dh]
};

}  // namespace

std::unique_ptr<Model> load_gemma3(std::shared_ptr<GgufFile> file, ModelConfig cfg, const model_detail::Capacity& cap,
                                   ThreadPool* pool) {
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
  return std::make_unique<Gemma3>(std::move(file), cfg, cap, pool, gp);
}

}  // namespace mb
