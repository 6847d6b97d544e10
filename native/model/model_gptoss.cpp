// gpt-oss (general.architecture "gpt-oss"; llama.cpp's LLM_ARCH_OPENAI_MOE graph): a routed
// mixture of experts with a few quirks of its own, each as llama.cpp computes it:
//  - attention with biases on q, k, v and the output projection, and a learned "sink" logit per
//    query head that joins every softmax (it takes probability mass but contributes no value);
//  - layers alternate sliding-window attention (a query sees its last `sliding_window` positions,
//    itself included; layer il is windowed when il % pattern < pattern - 1, pattern 2) with full
//    causal attention;
//  - RoPE (rotated halves) with YaRN scaling: each frequency interpolated by 1/factor, blended back
//    to the original where the wavelength is short (a ramp between the corr dims of beta_fast and
//    beta_slow), and cos/sin scaled by 1 + 0.1 ln(factor);
//  - router: logits = xn·Wrouter + b; the Ek largest logits are chosen and softmaxed among
//    themselves (llama.cpp's SOFTMAX_WEIGHT gating);
//  - each expert: g = xn·Wgate_e + bg_e, u = xn·Wup_e + bu_e,
//    h = min(g, 7) * sigmoid(1.702 * min(g, 7)) * (clamp(u, -7, 7) + 1)   (ggml_swiglu_oai),
//    out_e = h·Wdown_e + bd_e; outputs weighted and summed in rank order;
//  - the FFN's input norm is blk.N.post_attention_norm.
// The expert weights are MXFP4 in the published GGUFs (kernels.h matmul handles the type).
//
// Dimension legend: T tokens in the chunk (<= Tm), D n_embd, H heads, Hk KV heads, G = H / Hk,
// Dh head dim, F n_ff of one expert, E experts, Ek experts per token, V n_vocab, L layers,
// W sliding window, C context per slot.
//
//   x = token_embd[token]                                              x [T, D]
//   each layer:
//     xn = rmsnorm(x) * attn_norm
//     q, k, v = xn·Wq + bq, xn·Wk + bk, xn·Wv + bv                       q [T, H*Dh]  k, v [T, Hk*Dh]
//     q, k = yarn_rope(q), yarn_rope(k);  k, v -> KV cache
//     att = softmax_with_sink(q·K^T / sqrt(Dh) over the window) · V     att [T, H*Dh]
//     x += att·Wo + bo
//     xn = rmsnorm(x) * post_attention_norm
//     sel, w = top Ek of (xn·Wrouter + br), softmax over those Ek        [T, Ek]
//     x += sum_k w_k * expert_{sel_k}(xn)
//   logits = (rmsnorm(x) * output_norm)·Wout                          [wanted rows, V]
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model/transformer.h"

namespace mb {
namespace {
using namespace model_detail;

// YaRN's frequency plan (ggml_rope_yarn_corr_dims and rope_yarn in ggml), for rotated halves.
struct Yarn {
  float freq_base = 10000.f;
  float freq_scale = 1.f;   // 1 / rope.scaling.factor
  float ext_factor = 0.f;   // 1 for yarn unless the file says otherwise
  float mscale = 1.f;       // attn_factor * (1 + 0.1 ln(1 / freq_scale)) when ext_factor != 0
  float corr_lo = 0.f, corr_hi = 0.f;

  static Yarn from(const GgufFile& f, const ModelConfig& cfg) {
    const std::string a = cfg.arch + ".rope.";
    Yarn y;
    y.freq_base = cfg.rope_freq_base;
    const float factor = (float)f.get_float(a + "scaling.factor", 0.0);
    const bool yarn = f.get_str(a + "scaling.type", "none") == "yarn";
    y.freq_scale = yarn && factor > 0.f ? 1.0f / factor : 1.0f;
    y.ext_factor = (float)f.get_float(a + "scaling.yarn_ext_factor", yarn ? 1.0 : 0.0);
    const float beta_fast = (float)f.get_float(a + "scaling.yarn_beta_fast", 32.0);
    const float beta_slow = (float)f.get_float(a + "scaling.yarn_beta_slow", 1.0);
    const int n_ctx_orig = (int)f.get_int(a + "scaling.original_context_length", cfg.n_ctx_train);
    if (f.get_float(a + "scaling.yarn_log_multiplier", 0.0) != 0.0)
      throw std::runtime_error("model: " + cfg.arch + ": rope.scaling.yarn_log_multiplier is not supported");
    float attn = 1.0f;
    if (y.ext_factor != 0.f) {
      // llama.cpp sets attn_factor to get_mscale(factor) and cancels it again, since ggml's rope
      // applies 1 + 0.1 ln(factor) itself; the round trip is kept for its float rounding
      const float f1 = 1.0f / y.freq_scale;
      attn = f1 <= 1.0f ? 1.0f : 0.1f * std::log(f1) + 1.0f;
      attn *= 1.0f / (1.0f + 0.1f * std::log(f1));
    }
    attn *= (float)f.get_float(a + "scaling.attn_factor", 1.0);
    y.mscale = attn * (y.ext_factor != 0.f ? 1.0f + 0.1f * std::log(1.0f / y.freq_scale) : 1.0f);
    const int n_dims = cfg.rope_dim;
    auto corr_dim = [&](float n_rot) {
      return n_dims * std::log((float)n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * std::log(y.freq_base));
    };
    y.corr_lo = std::max(0.0f, std::floor(corr_dim(beta_fast)));
    y.corr_hi = std::min((float)(n_dims - 1), std::ceil(corr_dim(beta_slow)));
    return y;
  }

  // cs[2i], cs[2i+1] = cos, sin of pair i (i < n_dims / 2) at position pos.
  void angles(int pos, int n_dims, float* cs) const {
    const float theta_scale = std::pow(freq_base, -2.0f / (float)n_dims);
    float theta_extrap = (float)pos;
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
      const float theta_interp = freq_scale * theta_extrap;
      float theta = theta_interp;
      if (ext_factor != 0.f) {
        const float y = (i0 / 2 - corr_lo) / std::max(0.001f, corr_hi - corr_lo);
        const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, y))) * ext_factor;
        theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
      }
      cs[i0] = std::cos(theta) * mscale;
      cs[i0 + 1] = std::sin(theta) * mscale;
      theta_extrap *= theta_scale;
    }
  }
};

// Rotated-halves RoPE of each head of x[n_heads * Dh] with a precomputed angle table.
void rope_neox_with(float* x, int n_heads, int Dh, int n_dims, const float* cs) {
  const int half = n_dims / 2;
  for (int h = 0; h < n_heads; h++) {
    float* v = x + (size_t)h * Dh;
    for (int i = 0; i < half; i++) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float x0 = v[i], x1 = v[i + half];
      v[i] = x0 * c - x1 * s;
      v[i + half] = x0 * s + x1 * c;
    }
  }
}

class GptOss final : public Transformer {
 public:
  GptOss(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, ThreadPool* pool)
      : Transformer(std::move(file), cfg, cap, pool), E_(cfg.n_expert), Ek_(cfg.n_expert_used),
        yarn_(Yarn::from(*file_, cfg_)) {
    const std::string a = cfg_.arch + ".attention.";
    window_ = (int)file_->get_int(a + "sliding_window", 0);
    const int pattern = (int)file_->get_int(a + "sliding_window_pattern", 2);
    if (window_ <= 0 || pattern <= 0)
      throw std::runtime_error("model: gpt-oss needs attention.sliding_window > 0 (and a positive pattern)");
    const WeightLoader w(*file_, cfg_);
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      Layer l;
      l.attn = w.attention(il, Biases::required);
      l.bo = w.vector(p + "attn_output.bias", D_);
      l.sinks = w.vector(p + "attn_sinks.weight", H_);
      l.windowed = il % pattern < pattern - 1;
      l.norm = w.vector(p + "post_attention_norm.weight", D_);
      l.router = w.matrix(p + "ffn_gate_inp.weight", D_, E_);
      l.router_b = w.vector(p + "ffn_gate_inp.bias", E_);
      l.gate = w.experts(p + "ffn_gate_exps.weight", D_, F_, E_);
      l.up = w.experts(p + "ffn_up_exps.weight", D_, F_, E_);
      l.down = w.experts(p + "ffn_down_exps.weight", F_, D_, E_);
      l.gate_b = per_expert(w, p + "ffn_gate_exps.bias", F_);
      l.up_b = per_expert(w, p + "ffn_up_exps.bias", F_);
      l.down_b = per_expert(w, p + "ffn_down_exps.bias", D_);
      layers_.push_back(std::move(l));
    }
    logits_.assign((size_t)Tm_ * E_, 0.f);
    sel_.assign((size_t)Tm_ * Ek_, 0);
    selw_.assign((size_t)Tm_ * Ek_, 0.f);
    res_.assign((size_t)Tm_ * Ek_ * D_, 0.f);
    members_.assign(Tm_, 0);
    xe_.assign((size_t)Tm_ * D_, 0.f);
    ye_.assign((size_t)Tm_ * D_, 0.f);
    angles_.assign((size_t)Tm_ * cfg_.rope_dim, 0.f);
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    embed(c, x_);                                           // x [T, D]
    // Every layer rotates by the same YaRN angles: computed once per chunk (a pow, cos, sin a pair).
    par_for(T, [&](int t) { yarn_.angles(c.pos[t], cfg_.rope_dim, &angles_[(size_t)t * cfg_.rope_dim]); });
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      rmsnorm_rows(xn_, x_, l.attn.norm, T);                // xn [T, D]
      project_qkv(l.attn, xn_, T);                          // q [T, H*Dh], k, v [T, Hk*Dh]
      par_for(T, [&](int t) {
        const float* cs = &angles_[(size_t)t * cfg_.rope_dim];  // [Dh/2][cos, sin]
        rope_neox_with(q_row(t), H_, Dh_, cfg_.rope_dim, cs);
        rope_neox_with(k_row(t), Hk_, Dh_, cfg_.rope_dim, cs);
        store_kv(il, c, t);
      });
      // the kernel's window and sinks: llama.cpp's soft_max_ext (or flash_attn_ext) with sinks
      attention(il, c, q_, att_, 0.f, l.windowed ? window_ : 0, l.sinks.data());  // att [T, H*Dh]
      mm(l.attn.wo, att_, y_, T);                           // y [T, D]
      par_for(T, [&](int t) { add(&y_[(size_t)t * D_], l.bo.data(), D_); });
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.norm, T);                     // xn [T, D]
      mm(l.router, xn_, logits_, T);                        // logits [T, E]
      par_for(T, [&](int t) {
        float* r = &logits_[(size_t)t * E_];
        add(r, l.router_b.data(), E_);
        route(r, &sel_[(size_t)t * Ek_], &selw_[(size_t)t * Ek_]);
      });
      run_experts(l, T);                                    // res [T, Ek, D]
      // each expert's output scaled, then summed in rank order, as ggml's mul + add chain does
      par_for(T, [&](int t) {
        float* y = &y_[(size_t)t * D_];                     // [D]
        for (int k = 0; k < Ek_; k++) {
          const float wk = selw_[(size_t)t * Ek_ + k];
          const float* r = &res_[((size_t)t * Ek_ + k) * D_];
          if (k == 0)
            for (int d = 0; d < D_; d++) y[d] = r[d] * wk;
          else
            for (int d = 0; d < D_; d++) y[d] += r[d] * wk;
        }
      });
      add_rows(x_, y_, T);
    }
    logits_of_wanted(c, x_, logits);                        // [wanted rows, V]
  }

  // A per-expert bias, ne [n, E], as f32 [E][n].
  std::vector<float> per_expert(const WeightLoader& w, const std::string& name, int64_t n) const {
    const GgufTensor* t = file_->tensor(name);
    if (!t)
      throw tensor_error(cfg_.arch, name, "is missing", "shape " + shape_str({n, E_}) + ", type " + weight_types_str());
    if (t->ne.size() != 2 || t->ne[0] != n || t->ne[1] != E_)
      throw tensor_error(cfg_.arch, name, "has shape " + shape_str(t->ne), shape_str({n, E_}));
    return w.vector(name, n * E_);
  }

  struct Layer {
    AttentionWeights attn;          // blk.N.attn_norm, attn_{q,k,v,output}, attn_{q,k,v}.bias
    std::vector<float> bo;          // [D] attn_output.bias
    std::vector<float> sinks;       // [H] attn_sinks.weight: one logit per query head
    bool windowed;                  // sliding-window layer (else full causal attention)
    std::vector<float> norm;        // [D] post_attention_norm: the FFN's input norm
    QMatrix router;                 // [D -> E] ffn_gate_inp
    std::vector<float> router_b;    // [E]
    ExpertMatrices gate, up;        // E x [D -> F] ffn_{gate,up}_exps
    ExpertMatrices down;            // E x [F -> D] ffn_down_exps
    std::vector<float> gate_b, up_b;  // [E][F]
    std::vector<float> down_b;      // [E][D]
  };

  // sel[Ek] = the Ek largest router logits r[E] (best first, the lower index on a tie, as a stable
  // descending argsort gives), weight[Ek] = their softmax among themselves.
  void route(const float* r, int* sel, float* weight) const {
    for (int k = 0; k < Ek_; k++) {
      int best = -1;
      for (int e = 0; e < E_; e++) {
        bool taken = false;
        for (int j = 0; j < k; j++) taken |= sel[j] == e;
        if (!taken && (best < 0 || r[e] > r[best])) best = e;
      }
      sel[k] = best;
      weight[k] = r[best];
    }
    softmax(weight, Ek_);
  }

  // res[t, k, :] = expert sel[t, k] of xn[t], biases and clamped SwiGLU included. Each expert's
  // weights are read once for all the rows routed to it.
  void run_experts(const Layer& l, int T) {
    constexpr float kAlpha = 1.702f, kLimit = 7.0f;
    for (int e = 0; e < E_; e++) {
      int n = 0;  // an expert appears at most once among a token's Ek, so n <= T
      for (int i = 0; i < T * Ek_; i++)
        if (sel_[i] == e) members_[n++] = i;
      if (n == 0) continue;
      for (int i = 0; i < n; i++)
        std::copy_n(&xn_[(size_t)(members_[i] / Ek_) * D_], D_, &xe_[(size_t)i * D_]);  // xe [n, D]
      matmul(l.up.expert(e), xe_.data(), up_.data(), n, pool_, &scratch_);      // up [n, F]
      matmul(l.gate.expert(e), xe_.data(), gate_.data(), n, pool_, &scratch_);  // gate [n, F]
      count_routed_expert();  // Health's routed_experts reports the routed call sites that ran
      const float* bu = &l.up_b[(size_t)e * F_];
      const float* bg = &l.gate_b[(size_t)e * F_];
      par_for(n, [&](int i) {
        float* g = &gate_[(size_t)i * F_];
        const float* u = &up_[(size_t)i * F_];
        for (int f = 0; f < F_; f++) {
          const float x = std::min(g[f] + bg[f], kLimit);
          const float y = std::clamp(u[f] + bu[f], -kLimit, kLimit);
          g[f] = x / (1.f + std::exp(kAlpha * (-x))) * (y + 1.f);
        }
      });
      matmul(l.down.expert(e), gate_.data(), ye_.data(), n, pool_, &scratch_);  // ye [n, D]
      const float* bd = &l.down_b[(size_t)e * D_];
      for (int i = 0; i < n; i++) {
        float* out = &res_[(size_t)members_[i] * D_];
        const float* y = &ye_[(size_t)i * D_];
        for (int d = 0; d < D_; d++) out[d] = y[d] + bd[d];
      }
    }
  }

  const int E_, Ek_;
  const Yarn yarn_;
  int window_ = 0;                    // W
  std::vector<Layer> layers_;         // [L]
  std::vector<float> logits_;         // [Tm, E] router logits
  std::vector<int> sel_;              // [Tm, Ek] chosen experts, best first
  std::vector<float> selw_;           // [Tm, Ek] their weights
  std::vector<float> res_;            // [Tm, Ek, D] expert outputs per (token, rank)
  std::vector<int> members_;          // [Tm] (t * Ek + k) routed to the current expert
  std::vector<float> xe_;             // [Tm, D] their inputs, gathered
  std::vector<float> ye_;             // [Tm, D] the expert's outputs
  std::vector<float> angles_;         // [Tm, Dh] YaRN cos/sin per row
  MatmulScratch scratch_;             // the experts' quantized activations
};

}  // namespace

std::unique_ptr<Model> load_gptoss(std::shared_ptr<GgufFile> file, ModelConfig cfg, const model_detail::Capacity& cap,
                                   ThreadPool* pool) {
  cfg.rope_neox = true;
  if (cfg.n_expert <= 0 || cfg.n_expert_used <= 0 || cfg.n_expert_used > cfg.n_expert || cfg.n_ff <= 0)
    throw std::runtime_error(
        "model: gpt-oss needs expert_count >= expert_used_count > 0 and expert_feed_forward_length");
  return std::make_unique<GptOss>(std::move(file), cfg, cap, pool);
}

}  // namespace mb
