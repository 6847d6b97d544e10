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
using namespace model_detail;
namespace {

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
class GptOss final : public Transformer {
 public:
  GptOss(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, std::unique_ptr<Backend> be)
      : Transformer(std::move(file), cfg, cap, std::move(be)), E_(cfg.n_expert), Ek_(cfg.n_expert_used),
        yarn_(Yarn::from(*file_, cfg_)) {
    const std::string a = cfg_.arch + ".attention.";
    window_ = (int)file_->get_int(a + "sliding_window", 0);
    const int pattern = (int)file_->get_int(a + "sliding_window_pattern", 2);
    if (window_ <= 0 || pattern <= 0)
      throw std::runtime_error("model: gpt-oss needs attention.sliding_window > 0 (and a positive pattern)");
    const WeightLoader w(*file_, cfg_, be_.get());
    for (int il = 0; il < L_; il++) {
      const std::string p = WeightLoader::blk(il);
      Layer l;
      l.attn = w.attention(il, Biases::required);
      l.bo = w.vec(p + "attn_output.bias", D_);
      l.sinks = w.vec(p + "attn_sinks.weight", H_);
      l.windowed = il % pattern < pattern - 1;
      l.norm = w.vec(p + "post_attention_norm.weight", D_);
      l.router = w.matrix(p + "ffn_gate_inp.weight", D_, E_);
      l.router_b = w.vec(p + "ffn_gate_inp.bias", E_);
      l.experts.gate = w.experts(p + "ffn_gate_exps.weight", D_, F_, E_);
      l.experts.up = w.experts(p + "ffn_up_exps.weight", D_, F_, E_);
      l.experts.down = w.experts(p + "ffn_down_exps.weight", F_, D_, E_);
      l.experts.E = E_;
      l.experts.act = ExpertAct::swiglu_oai;
      l.experts.gate_b = per_expert(w, p + "ffn_gate_exps.bias", F_);
      l.experts.up_b = per_expert(w, p + "ffn_up_exps.bias", F_);
      l.experts.down_b = per_expert(w, p + "ffn_down_exps.bias", D_);
      layers_.push_back(std::move(l));
    }
    logits_ = be_->alloc((size_t)Tm_ * E_);
    sel_ = be_->alloc_i32((size_t)Tm_ * Ek_);
    selw_ = be_->alloc((size_t)Tm_ * Ek_);
    res_ = be_->alloc((size_t)Tm_ * Ek_ * D_);
    angles_.assign((size_t)Tm_ * cfg_.rope_dim, 0.f);
  }

 private:
  void forward_chunk(const Chunk& c, float* logits) override {
    const int T = c.T;
    embed(x_);                                              // x [T, D]
    // Every layer rotates by the same YaRN angles: computed once per chunk on the host (a pow,
    // cos, sin a pair).
    for (int t = 0; t < T; t++) yarn_.angles(c.pos[t], cfg_.rope_dim, &angles_[(size_t)t * cfg_.rope_dim]);
    for (int il = 0; il < L_; il++) {
      const Layer& l = layers_[il];
      rmsnorm_rows(xn_, x_, l.attn.norm, T);                // xn [T, D]
      project_qkv(l.attn, xn_, T);                          // q [T, H*Dh], k, v [T, Hk*Dh]
      be_->rope_angles(q_, H_, Dh_, cfg_.rope_dim, angles_.data(), T);
      be_->rope_angles(k_, Hk_, Dh_, cfg_.rope_dim, angles_.data(), T);
      store_kv(il, T);
      // the kernel's window and sinks: llama.cpp's soft_max_ext (or flash_attn_ext) with sinks
      attention(il, q_, att_, T, 0.f, l.windowed ? window_ : 0, l.sinks);  // att [T, H*Dh]
      mm(l.attn.wo, att_, y_, T);                           // y [T, D]
      be_->add_bias(y_, D_, l.bo, T, D_);
      add_rows(x_, y_, T);
      rmsnorm_rows(xn_, x_, l.norm, T);                     // xn [T, D]
      mm(l.router, xn_, logits_, T);                        // logits [T, E]
      be_->add_bias(logits_, E_, l.router_b, T, E_);
      be_->route(Routing::top_k_softmax, logits_, E_, Ek_, sel_, selw_, T);  // sel, selw [T, Ek]
      run_experts(l.experts, xn_, Ek_, sel_, res_, T);      // res [T, Ek, D]
      be_->weighted_sum(y_, res_, selw_, Ek_, D_, T);       // y [T, D] = sum_k res[t, k] * selw[t, k]
      add_rows(x_, y_, T);
    }
    logits_of_wanted(c, x_, logits);                        // [wanted rows, V]
  }

  // A per-expert bias, ne [n, E], as f32 [E][n] in the backend's memory.
  const float* per_expert(const WeightLoader& w, const std::string& name, int64_t n) const {
    const GgufTensor* t = file_->tensor(name);
    if (!t)
      throw tensor_error(cfg_.arch, name, "is missing", "shape " + shape_str({n, E_}) + ", type " + weight_types_str());
    if (t->ne.size() != 2 || t->ne[0] != n || t->ne[1] != E_)
      throw tensor_error(cfg_.arch, name, "has shape " + shape_str(t->ne), shape_str({n, E_}));
    return w.vec(name, n * E_);
  }

  struct Layer {
    AttentionWeights attn;          // blk.N.attn_norm, attn_{q,k,v,output}, attn_{q,k,v}.bias
    const float* bo;                // [D] attn_output.bias
    const float* sinks;             // [H] attn_sinks.weight: one logit per query head
    bool windowed;                  // sliding-window layer (else full causal attention)
    const float* norm;              // [D] post_attention_norm: the FFN's input norm
    QMatrix router;                 // [D -> E] ffn_gate_inp
    const float* router_b;          // [E]
    ExpertFfn experts;              // E x ffn_{gate,up,down}_exps and their biases [E][F], [E][F], [E][D];
                                    // sel[Ek] = the Ek largest router logits (best first, the lower
                                    // index on a tie, as a stable descending argsort gives), weighted
                                    // by their softmax among themselves; clamped SwiGLU
  };

  const int E_, Ek_;
  const Yarn yarn_;
  int window_ = 0;                    // W
  std::vector<Layer> layers_;         // [L]
  float* logits_;                     // [Tm, E] router logits
  int32_t* sel_;                      // [Tm, Ek] chosen experts, best first
  float* selw_;                       // [Tm, Ek] their weights
  float* res_;                        // [Tm, Ek, D] expert outputs per (token, rank)
  std::vector<float> angles_;         // [Tm, Dh] YaRN cos/sin per row (host)
};

}  // namespace

std::unique_ptr<Transformer> load_gptoss(std::shared_ptr<GgufFile> file, ModelConfig cfg, const Capacity& cap,
                                         std::unique_ptr<Backend> be) {
  cfg.rope_neox = true;
  if (cfg.n_expert <= 0 || cfg.n_expert_used <= 0 || cfg.n_expert_used > cfg.n_expert || cfg.n_ff <= 0)
    throw std::runtime_error(
        "model: gpt-oss needs expert_count >= expert_used_count > 0 and expert_feed_forward_length");
  be->require(cfg.arch, {Op::embed, Op::matmul, Op::rmsnorm, Op::add, Op::add_bias, Op::rope_angles, Op::store_kv,
                         Op::attention, Op::attention_window, Op::attention_sinks, Op::moe_route, Op::moe_experts,
                         Op::weighted_sum, Op::move_rows});
  return std::make_unique<GptOss>(std::move(file), cfg, cap, std::move(be));
}

}  // namespace mb
