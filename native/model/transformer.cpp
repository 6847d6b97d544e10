// Shared pieces of the decoder-only architectures (see transformer.h for the dimension legend).
// Each matmul takes all T tokens of a chunk at once (one GEMM per weight per chunk). Attention
// takes each run of consecutive positions of one slot in blocks of Bq positions, per KV head, and
// hands it to the tiled kernel (kernels.h: mb::attention), so the keys and values are read once
// per block of queries rather than once per query.
#include "model/transformer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace mb {
namespace model_detail {

// IEEE binary16 conversion for the KV cache, round to nearest even like ggml's GGML_FP32_TO_FP16.
uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds past 65504
  if (a < 0x38800000u) {
    // below 2^-14: adding 0.5 leaves round(a / 2^-24) in the low mantissa bits
    float af;
    std::memcpy(&af, &a, 4);
    af += 0.5f;
    uint32_t r;
    std::memcpy(&r, &af, 4);
    return (uint16_t)(sign | (r - 0x3f000000u));
  }
  a += 0xc8000fffu + ((a >> 13) & 1u);  // rebias exponent by -112 and round half to even
  return (uint16_t)(sign | (a >> 13));
}

Transformer::Transformer(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap,
                         ThreadPool* pool, bool own_kv)
    : file_(std::move(file)), cfg_(cfg), pool_(pool), S_(cap.n_slots), C_(cap.n_ctx), Tm_(cap.max_batch) {
  if (S_ <= 0 || C_ <= 0 || Tm_ <= 0) throw std::runtime_error("model: slots, ctx and max batch must be positive");
  L_ = cfg_.n_layer; D_ = cfg_.n_embd; H_ = cfg_.n_head; Hk_ = cfg_.n_head_kv; G_ = H_ / Hk_; Dh_ = cfg_.head_dim;
  F_ = cfg_.n_ff; V_ = cfg_.n_vocab;
  HD_ = H_ * Dh_; KD_ = Hk_ * Dh_;
  const WeightLoader w(*file_, cfg_);
  token_embd_ = w.token_embd();
  output_norm_ = w.vector("output_norm.weight", D_);
  output_ = w.output(token_embd_);

  const size_t kv_elems = own_kv ? (size_t)L_ * S_ * Hk_ * C_ * Dh_ : 0;
  k_cache_.assign(kv_elems, 0);
  v_cache_.assign(kv_elems, 0);
  slot_len_.assign(S_, 0);
  len_scratch_.assign(S_, 0);

  x_.assign((size_t)Tm_ * D_, 0.f);
  xn_.assign((size_t)Tm_ * D_, 0.f);
  q_.assign((size_t)Tm_ * HD_, 0.f);
  k_.assign((size_t)Tm_ * KD_, 0.f);
  v_.assign((size_t)Tm_ * KD_, 0.f);
  att_.assign((size_t)Tm_ * HD_, 0.f);
  y_.assign((size_t)Tm_ * D_, 0.f);
  gate_.assign((size_t)Tm_ * F_, 0.f);
  up_.assign((size_t)Tm_ * F_, 0.f);
  rows_.assign(Tm_, 0);
  kept_token_.assign(Tm_, 0);
  kept_pos_.assign(Tm_, 0);
  kept_slot_.assign(Tm_, 0);
  kept_want_.assign(Tm_, 1);

  // ~96 query rows per item: the kernel converts each key block once per item, so fewer rows
  // would spend more on conversion; more would leave too few items to share out in a chunk.
  Bq_ = std::max(1, std::min(Tm_, 96 / G_));
  attn_items_.reserve((size_t)Tm_ * Hk_);
  attn_scratch_n_ = own_kv ? attention_scratch_floats(Bq_, G_, Dh_, C_) : 0;
  const int P = pool_ ? pool_->size() : 1;
  attn_scratch_.assign((size_t)P * attn_scratch_n_, 0.f);

  if (cfg_.n_expert > 0) {
    members_.assign(Tm_, 0);
    xe_.assign((size_t)Tm_ * D_, 0.f);
    ye_.assign((size_t)Tm_ * D_, 0.f);
  }
}

size_t Transformer::kv_bytes() const {
  return k_cache_.size() * sizeof(uint16_t) + v_cache_.size() * sizeof(uint16_t);
}

void Transformer::kv_truncate(int slot, int pos) {
  if (slot < 0 || slot >= S_) throw std::out_of_range("model: kv_truncate slot out of range");
  // attention only ever reads [0, pos] of a slot, so forgetting is bookkeeping
  slot_len_[slot] = std::max(0, std::min(slot_len_[slot], pos));
}

void Transformer::kv_copy(int src, int dst, int n) {
  if (src < 0 || src >= S_ || dst < 0 || dst >= S_) throw std::out_of_range("model: kv_copy slot out of range");
  if (n < 0 || n > slot_len_[src]) throw std::out_of_range("model: kv_copy beyond the source slot's length");
  if (src == dst) return;
  for (int il = 0; il < L_ && !k_cache_.empty(); il++)
    for (int g = 0; g < Hk_; g++) {
      std::memcpy(&k_cache_[kv_index(il, dst, g, 0)], &k_cache_[kv_index(il, src, g, 0)], (size_t)n * Dh_ * 2);
      std::memcpy(&v_cache_[kv_index(il, dst, g, 0)], &v_cache_[kv_index(il, src, g, 0)], (size_t)n * Dh_ * 2);
    }
  slot_len_[dst] = n;
}

// One position's K/V, token-major: [L][K, V][Hk][Dh] elements of the cache's own type.
size_t Transformer::kv_token_bytes() const {
  return (size_t)L_ * 2 * Hk_ * Dh_ * sizeof(k_cache_[0]);
}

void Transformer::kv_read(int slot, int pos, int n, uint8_t* dst) const {
  if (slot < 0 || slot >= S_) throw std::out_of_range("model: kv_read slot out of range");
  if (pos < 0 || n < 0 || pos + n > slot_len_[slot]) throw std::out_of_range("model: kv_read beyond the slot's length");
  const size_t row = (size_t)Dh_ * sizeof(k_cache_[0]);
  for (int t = 0; t < n; t++)
    for (int il = 0; il < L_; il++)
      for (int g = 0; g < Hk_; g++) {
        std::memcpy(dst, &k_cache_[kv_index(il, slot, g, pos + t)], row);
        std::memcpy(dst + (size_t)Hk_ * row, &v_cache_[kv_index(il, slot, g, pos + t)], row);
        dst += row;
        if (g + 1 == Hk_) dst += (size_t)Hk_ * row;
      }
}

void Transformer::kv_write(int slot, int pos, int n, const uint8_t* src) {
  if (slot < 0 || slot >= S_) throw std::out_of_range("model: kv_write slot out of range");
  if (pos < 0 || n < 0 || pos > slot_len_[slot] || pos + n > C_) throw std::out_of_range("model: kv_write outside the slot");
  const size_t row = (size_t)Dh_ * sizeof(k_cache_[0]);
  for (int t = 0; t < n; t++)
    for (int il = 0; il < L_; il++)
      for (int g = 0; g < Hk_; g++) {
        std::memcpy(&k_cache_[kv_index(il, slot, g, pos + t)], src, row);
        std::memcpy(&v_cache_[kv_index(il, slot, g, pos + t)], src + (size_t)Hk_ * row, row);
        src += row;
        if (g + 1 == Hk_) src += (size_t)Hk_ * row;
      }
  slot_len_[slot] = pos + n;
}

// The whole batch is checked before the cache is touched: a token may extend its slot by at most
// one position past what is already there (no holes), in batch order.
void Transformer::validate(const Batch& b) {
  const int T = (int)b.token.size();
  if ((int)b.pos.size() != T || (int)b.slot.size() != T || (int)b.logits.size() != T)
    throw std::invalid_argument("model: batch arrays differ in length");
  std::vector<int>& len = len_scratch_;  // committed to slot_len_ only if the whole batch is valid
  len = slot_len_;                        // same size: no allocation
  for (int t = 0; t < T; t++) {
    const int s = b.slot[t], p = b.pos[t], tok = b.token[t];
    std::string err;
    if (s < 0 || s >= S_) err = "slot " + std::to_string(s) + " out of range";
    else if (p < 0 || p >= C_) err = "position " + std::to_string(p) + " outside the context of " + std::to_string(C_);
    else if (p > len[s]) err = "position " + std::to_string(p) + " leaves a hole in slot " + std::to_string(s);
    else if (tok < 0 || tok >= V_) err = "token id " + std::to_string(tok) + " outside the vocabulary";
    if (!err.empty()) throw std::invalid_argument("model: batch row " + std::to_string(t) + ": " + err);
    len[s] = std::max(len[s], p + 1);
  }
  slot_len_.swap(len_scratch_);
}

void Transformer::forward(const Batch& b, float* out) {
  validate(b);
  const int T = (int)b.token.size();
  size_t n_out = 0;
  for (int t0 = 0; t0 < T; t0 += Tm_) {
    const int n = std::min(Tm_, T - t0);
    forward_chunk(Chunk{&b.token[t0], &b.pos[t0], &b.slot[t0], &b.logits[t0], n}, out + n_out * (size_t)V_);
    for (int t = t0; t < t0 + n; t++) n_out += b.logits[t] ? 1 : 0;
  }
}

void Transformer::embed(const Chunk& c, std::vector<float>& x) {
  par_for(c.T, [&](int t) { dequantize_row(token_embd_, c.token[t], &x[(size_t)t * D_]); });
}

void Transformer::rmsnorm_rows(std::vector<float>& out, const std::vector<float>& x, const std::vector<float>& w,
                               int T) {
  par_for(T, [&](int t) { rmsnorm(&out[(size_t)t * D_], &x[(size_t)t * D_], w.data(), D_, cfg_.rms_eps); });
}

void Transformer::add_rows(std::vector<float>& x, const std::vector<float>& y, int T) {
  par_for(T, [&](int t) { add(&x[(size_t)t * D_], &y[(size_t)t * D_], D_); });
}

void Transformer::project_qkv(const AttentionWeights& w, const std::vector<float>& xn, int T) {
  const QMatrix* W[3] = {&w.wq, &w.wk, &w.wv};
  float* y[3] = {q_.data(), k_.data(), v_.data()};
  matmul_n(W, 3, xn.data(), y, T, pool_, &mm_scratch_);
  if (w.bq.empty() && w.bk.empty() && w.bv.empty()) return;
  par_for(T, [&](int t) {
    if (!w.bq.empty()) add(q_row(t), w.bq.data(), HD_);
    if (!w.bk.empty()) add(k_row(t), w.bk.data(), KD_);
    if (!w.bv.empty()) add(v_row(t), w.bv.data(), KD_);
  });
}

void Transformer::rmsnorm_heads(float* x, int n_heads, const std::vector<float>& w) const {
  for (int h = 0; h < n_heads; h++) rmsnorm(x + h * Dh_, x + h * Dh_, w.data(), Dh_, cfg_.rms_eps);
}

void Transformer::rope_heads(float* x, int n_heads, int pos) const {
  rope(x, n_heads, Dh_, cfg_.rope_dim, pos, cfg_.rope_freq_base, cfg_.rope_neox);
}

void Transformer::store_kv(int il, const Chunk& c, int t) {
  const int slot = c.slot[t], pos = c.pos[t];
  const float* k = k_row(t);
  const float* v = v_row(t);
  for (int g = 0; g < Hk_; g++) {
    uint16_t* kc = &k_cache_[kv_index(il, slot, g, pos)];
    uint16_t* vc = &v_cache_[kv_index(il, slot, g, pos)];
    for (int d = 0; d < Dh_; d++) {
      kc[d] = f32_to_f16(k[g * Dh_ + d]);
      vc[d] = f32_to_f16(v[g * Dh_ + d]);
    }
  }
}

// Work items: each maximal run of chunk rows that are consecutive positions of one slot (a
// prefill run; a decode row is a run of one), cut into blocks of Bq positions, times the Hk KV
// heads. Items go largest first to whichever thread is free, since causal blocks differ in size.
// A row's result does not depend on how its run was cut (see mb::attention), so neither does it
// depend on the rest of the batch.
void Transformer::attention(int il, const Chunk& c, const std::vector<float>& q, std::vector<float>& att,
                            float kq_scale, int window, const float* sinks) {
  const int T = c.T;
  const float scale = kq_scale != 0.f ? kq_scale : 1.0f / std::sqrt((float)Dh_);
  std::vector<AttnItem>& items = attn_items_;  // reserved for Tm * Hk: no allocation
  items.clear();
  for (int t0 = 0; t0 < T;) {
    int t1 = t0 + 1;
    while (t1 < T && t1 - t0 < Bq_ && c.slot[t1] == c.slot[t0] && c.pos[t1] == c.pos[t1 - 1] + 1) t1++;
    const int n = t1 - t0;
    const double cost = (double)n * G_ * (window > 0 ? std::min(c.pos[t0], window) + n : c.pos[t0] + n);
    for (int g = 0; g < Hk_; g++) items.push_back({t0, n, g, cost});
    t0 = t1;
  }
  std::sort(items.begin(), items.end(), [](const AttnItem& a, const AttnItem& b) { return a.cost > b.cost; });
  auto run = [&](const AttnItem& it, float* scratch) {
    const size_t off = kv_index(il, c.slot[it.t0], it.g, 0);
    const size_t qo = (size_t)it.t0 * HD_ + (size_t)it.g * G_ * Dh_;  // first head of the group
    mb::attention(&q[qo], HD_, &k_cache_[off], &v_cache_[off], &att[qo], HD_, it.n, G_, Dh_, c.pos[it.t0], scale,
                  window, sinks ? sinks + (size_t)it.g * G_ : nullptr, scratch);
  };
  const int n_items = (int)items.size();
  const int nth = pool_ ? pool_->size() : 1;
  if (nth <= 1 || n_items <= 1) {
    for (const AttnItem& it : items) run(it, attn_scratch_.data());
    return;
  }
  std::atomic<int> next{0};
  pool_->run([&](int ith, int) {
    float* scratch = &attn_scratch_[(size_t)ith * attn_scratch_n_];
    for (int i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) run(items[i], scratch);
  });
}

void Transformer::swiglu(const SwiGluWeights& w, const std::vector<float>& xn, std::vector<float>& out, int T) {
  const QMatrix* W[2] = {&w.gate, &w.up};
  float* y[2] = {gate_.data(), up_.data()};
  matmul_n(W, 2, xn.data(), y, T, pool_, &mm_scratch_);
  par_for(T, [&](int t) { silu_mul(&gate_[(size_t)t * F_], &up_[(size_t)t * F_], F_); });
  mm(w.down, gate_, out, T);
}

void Transformer::route_top_k(float* probs, int E, int Ek, int* sel, float* weight) {
  softmax(probs, E);
  // partial selection: E is small
  for (int k = 0; k < Ek; k++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      bool taken = false;
      for (int j = 0; j < k; j++) taken |= sel[j] == e;
      if (!taken && (best < 0 || probs[e] > probs[best])) best = e;
    }
    sel[k] = best;
    weight[k] = probs[best];
  }
  float sum = 0.f;
  for (int k = 0; k < Ek; k++) sum += weight[k];
  for (int k = 0; k < Ek; k++) weight[k] /= sum;
}

void Transformer::run_experts(const MoeWeights& w, const std::vector<float>& xn, const std::vector<int>& sel, int T,
                              std::vector<float>& res) {
  const int E = cfg_.n_expert, Ek = cfg_.n_expert_used;
  for (int e = 0; e < E; e++) {
    int n = 0;  // an expert appears at most once among a token's Ek, so n <= T
    for (int i = 0; i < T * Ek; i++)
      if (sel[i] == e) members_[n++] = i;
    if (n == 0) continue;
    for (int i = 0; i < n; i++)
      std::memcpy(&xe_[(size_t)i * D_], &xn[(size_t)(members_[i] / Ek) * D_], (size_t)D_ * 4);
    matmul(w.gate.expert(e), xe_.data(), gate_.data(), n, pool_, &mm_scratch_);
    gate_exps_calls_++;
    matmul(w.up.expert(e), xe_.data(), up_.data(), n, pool_, &mm_scratch_);
    up_exps_calls_++;
    par_for(n, [&](int i) { silu_mul(&gate_[(size_t)i * F_], &up_[(size_t)i * F_], F_); });
    matmul(w.down.expert(e), gate_.data(), ye_.data(), n, pool_, &mm_scratch_);
    down_exps_calls_++;
    for (int i = 0; i < n; i++)
      std::memcpy(&res[(size_t)members_[i] * D_], &ye_[(size_t)i * D_], (size_t)D_ * 4);
  }
}

std::vector<std::pair<std::string, int64_t>> Transformer::routed_expert_calls() const {
  if (cfg_.n_expert <= 0) return {};
  return {{"ffn_gate_exps", gate_exps_calls_}, {"ffn_up_exps", up_exps_calls_}, {"ffn_down_exps", down_exps_calls_}};
}

void Transformer::logits_of_wanted(const Chunk& c, const std::vector<float>& x, float* logits) {
  int n = 0;
  for (int t = 0; t < c.T; t++)
    if (c.want[t]) rows_[n++] = t;
  if (n == 0) return;
  par_for(n, [&](int i) {
    rmsnorm(&xn_[(size_t)i * D_], &x[(size_t)rows_[i] * D_], output_norm_.data(), D_, cfg_.rms_eps);
  });
  matmul(output_, xn_.data(), logits, n, pool_, &mm_scratch_);
}

Chunk Transformer::wanted_rows(const Chunk& c, std::initializer_list<std::pair<std::vector<float>*, int>> bufs) {
  int n = 0;
  for (int t = 0; t < c.T; t++) {
    if (!c.want[t]) continue;
    kept_token_[n] = c.token[t];
    kept_pos_[n] = c.pos[t];
    kept_slot_[n] = c.slot[t];
    if (n != t)  // n < t: row n was already moved, or not wanted
      for (const auto& [buf, width] : bufs)
        std::copy_n(buf->data() + (size_t)t * width, width, buf->data() + (size_t)n * width);
    n++;
  }
  return Chunk{kept_token_.data(), kept_pos_.data(), kept_slot_.data(), kept_want_.data(), n};
}

}  // namespace model_detail
}  // namespace mb
