// Shared pieces of the decoder-only architectures (see transformer.h for the dimension legend):
// the batch checks and chunks, the KV slots, and the helpers the forward passes are written in,
// all of them calls on the backend (backend.h). Each matmul takes all T tokens of a chunk at once
// (one GEMM per weight per chunk).
#include "model/transformer.h"

#include <algorithm>
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
                         std::unique_ptr<Backend> backend, bool own_kv)
    : be_(std::move(backend)), file_(std::move(file)), cfg_(cfg), S_(cap.n_slots), C_(cap.n_ctx), Tm_(cap.max_batch) {
  if (S_ <= 0 || C_ <= 0 || Tm_ <= 0) throw std::runtime_error("model: slots, ctx and max batch must be positive");
  L_ = cfg_.n_layer; D_ = cfg_.n_embd; H_ = cfg_.n_head; Hk_ = cfg_.n_head_kv; G_ = H_ / Hk_; Dh_ = cfg_.head_dim;
  F_ = cfg_.n_ff; V_ = cfg_.n_vocab;
  HD_ = H_ * Dh_; KD_ = Hk_ * Dh_;
  const WeightLoader w(*file_, cfg_, be_.get());
  token_embd_ = w.token_embd();
  output_norm_ = w.vec("output_norm.weight", D_);
  output_ = w.output(token_embd_);

  if (own_kv) kv_.push_back(be_->alloc_kv(L_, S_, Hk_, C_, Dh_, G_, /*ring=*/false));
  slot_len_.assign(S_, 0);
  len_scratch_.assign(S_, 0);

  x_ = be_->alloc((size_t)Tm_ * D_);
  xn_ = be_->alloc((size_t)Tm_ * D_);
  q_ = be_->alloc((size_t)Tm_ * HD_);
  k_ = be_->alloc((size_t)Tm_ * KD_);
  v_ = be_->alloc((size_t)Tm_ * KD_);
  att_ = be_->alloc((size_t)Tm_ * HD_);
  y_ = be_->alloc((size_t)Tm_ * D_);
  gate_ = be_->alloc((size_t)Tm_ * F_);
  up_ = be_->alloc((size_t)Tm_ * F_);
  if (!be_->on_host()) logits_ = be_->alloc((size_t)Tm_ * V_);
  rows_.assign(Tm_, 0);
  kept_token_.assign(Tm_, 0);
  kept_pos_.assign(Tm_, 0);
  kept_slot_.assign(Tm_, 0);
  kept_want_.assign(Tm_, 1);
}

size_t Transformer::kv_bytes() const {
  size_t n = 0;
  for (const KvBuf& kv : kv_) n += 2 * kv.elems() * sizeof(uint16_t);
  return n;
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
  device_call([&] {
    for (const KvBuf& kv : kv_)
      if (n > 0 || kv.ring) be_->kv_copy(kv, src, dst, n);
  });
  slot_len_[dst] = n;
}

// One position's K/V, token-major: [L][K, V][Hk][Dh] elements of the cache's own type.
size_t Transformer::kv_token_bytes() const {
  return (size_t)L_ * 2 * Hk_ * Dh_ * sizeof(uint16_t);
}

void Transformer::kv_read(int slot, int pos, int n, uint8_t* dst) const {
  if (slot < 0 || slot >= S_) throw std::out_of_range("model: kv_read slot out of range");
  if (pos < 0 || n < 0 || pos + n > slot_len_[slot]) throw std::out_of_range("model: kv_read beyond the slot's length");
  device_call([&] { be_->kv_read(kv_[0], slot, pos, n, dst); });
}

void Transformer::kv_write(int slot, int pos, int n, const uint8_t* src) {
  if (slot < 0 || slot >= S_) throw std::out_of_range("model: kv_write slot out of range");
  if (pos < 0 || n < 0 || pos > slot_len_[slot] || pos + n > C_) throw std::out_of_range("model: kv_write outside the slot");
  device_call([&] { be_->kv_write(kv_[0], slot, pos, n, src); });
  slot_len_[slot] = pos + n;
}

// The whole batch is checked before the cache is touched, whatever the backend: a token may
// extend its slot by at most one position past what is already there (no holes), in batch order.
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
  device_call([&] {
    for (int t0 = 0; t0 < T; t0 += Tm_) {
      const int n = std::min(Tm_, T - t0);
      const Chunk c{&b.token[t0], &b.pos[t0], &b.slot[t0], &b.logits[t0], n};
      int nw = 0;
      for (int t = 0; t < n; t++) nw += c.want[t] ? 1 : 0;
      float* dst = logits_ ? logits_ : out + n_out * (size_t)V_;
      be_->step(c, nw, [&] { forward_chunk(c, dst); });
      if (logits_ && nw > 0) be_->read(out + n_out * (size_t)V_, logits_, (size_t)nw * V_);
      n_out += (size_t)nw;
    }
  });
}

void Transformer::project_qkv(const AttentionWeights& w, const float* xn, int T) {
  const QMatrix* W[3] = {&w.wq, &w.wk, &w.wv};
  float* y[3] = {q_, k_, v_};
  be_->matmul_n(W, 3, xn, y, T);
  if (w.bq) be_->add_bias(q_, HD_, w.bq, T, HD_);
  if (w.bk) be_->add_bias(k_, KD_, w.bk, T, KD_);
  if (w.bv) be_->add_bias(v_, KD_, w.bv, T, KD_);
}

void Transformer::attention(int il, const float* q, float* att, int T, float kq_scale, int window, const float* sinks) {
  const float scale = kq_scale != 0.f ? kq_scale : 1.0f / std::sqrt((float)Dh_);
  be_->attention(kv_[0], il, q, att, H_, AttnArgs{scale, window, sinks}, T);
}

void Transformer::swiglu(const SwiGluWeights& w, const float* xn, float* out, int T) {
  const QMatrix* W[2] = {&w.gate, &w.up};
  float* y[2] = {gate_, up_};
  be_->matmul_n(W, 2, xn, y, T);
  be_->glu(Glu::silu, gate_, up_, T, F_);
  mm(w.down, gate_, out, T);
}

std::vector<std::pair<std::string, int64_t>> Transformer::routed_expert_calls() const {
  if (cfg_.n_expert <= 0) return {};
  return {{"ffn_gate_exps", gate_exps_calls_}, {"ffn_up_exps", up_exps_calls_}, {"ffn_down_exps", down_exps_calls_}};
}

void Transformer::logits_of_wanted(const Chunk& c, float* x, float* logits) {
  const Chunk r = wanted_rows(c, {{x, D_}});  // x [n, D]
  if (r.T == 0) return;
  rmsnorm_rows(xn_, x, output_norm_, r.T);
  mm(output_, xn_, logits, r.T);
}

Chunk Transformer::wanted_rows(const Chunk& c, std::initializer_list<std::pair<float*, int>> bufs) {
  int n = 0;
  for (int t = 0; t < c.T; t++) {
    if (!c.want[t]) continue;
    rows_[n] = t;
    kept_token_[n] = c.token[t];
    kept_pos_[n] = c.pos[t];
    kept_slot_[n] = c.slot[t];
    n++;
  }
  if (n == c.T) return c;  // every row wanted (a decode step): nothing moves, the rows stay current
  for (const auto& [buf, width] : bufs) be_->move_rows(buf, (size_t)width, rows_.data(), n);
  const Chunk r{kept_token_.data(), kept_pos_.data(), kept_slot_.data(), kept_want_.data(), n};
  be_->set_rows(r);
  return r;
}

}  // namespace model_detail
}  // namespace mb
