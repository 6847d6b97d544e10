// Shared decoder body (see decoder.h for the dimension legend). Per layer and step:
//   xn = rmsnorm(x) ; q,k,v = xn·Wq,Wk,Wv (+bias) ; per-head rmsnorm(q,k) ; rope(q,k)
//   K/V -> cache (f16) ; att = softmax(q·K^T / sqrt(Dh)) · V ; x += att·Wo
//   xn = rmsnorm(x) ; x += ffn(xn)
// Each matmul takes all T tokens of the step at once (one GEMM per weight per step). Attention
// takes each run of consecutive positions of one slot in blocks of Bq positions, per KV head, and
// hands it to the tiled kernel (kernels.h: mb::attention), so the keys and values are read once
// per block of queries rather than once per query.
#include "model/decoder.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>

namespace mb {
namespace model_detail {

const GgufTensor* require(const GgufFile& f, const std::string& name) {
  const GgufTensor* t = f.tensor(name);
  if (!t) throw std::runtime_error("model: missing tensor '" + name + "'");
  return t;
}

void check_matmul_type(GgmlType t, const std::string& name) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return;
    default:
      break;
  }
  const char* tn = "unknown";
  try { tn = ggml_type_name(t); } catch (...) {}
  throw std::runtime_error("model: tensor '" + name + "' has unsupported type " + tn + " (" +
                           std::to_string((unsigned)t) + ")");
}

static std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); i++) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

QMatrix weight_2d(const GgufFile& f, const std::string& name, int64_t K, int64_t N) {
  const GgufTensor* t = require(f, name);
  if (t->ne.size() < 2 || t->ne[0] != K || t->ne[1] != N || t->n_elements() != K * N)
    throw std::runtime_error("model: tensor '" + name + "' has shape " + shape_str(t->ne) + ", expected [" +
                             std::to_string(K) + ", " + std::to_string(N) + "]");
  check_matmul_type(t->type, name);
  return QMatrix{t->type, K, N, t->data};
}

std::vector<float> vector_f32(const GgufFile& f, const std::string& name, int64_t n, bool optional) {
  const GgufTensor* t = f.tensor(name);
  if (!t) {
    if (optional) return {};
    throw std::runtime_error("model: missing tensor '" + name + "'");
  }
  if (t->n_elements() != n)
    throw std::runtime_error("model: tensor '" + name + "' has shape " + shape_str(t->ne) + ", expected [" +
                             std::to_string(n) + "]");
  std::vector<float> v((size_t)n);
  if (t->type == GgmlType::F32) {
    std::memcpy(v.data(), t->data, (size_t)n * 4);
  } else {
    check_matmul_type(t->type, name);
    dequantize_row(QMatrix{t->type, n, 1, t->data}, 0, v.data());
  }
  return v;
}

ModelConfig read_config(const GgufFile& f) {
  ModelConfig c;
  c.arch = f.get_str("general.architecture");
  const std::string a = c.arch + ".";
  c.n_layer = (int)f.get_int(a + "block_count");
  c.n_embd = (int)f.get_int(a + "embedding_length");
  c.n_head = (int)f.get_int(a + "attention.head_count");
  c.n_head_kv = (int)f.get_int(a + "attention.head_count_kv", c.n_head);
  c.head_dim = (int)f.get_int(a + "attention.key_length", c.n_head ? c.n_embd / c.n_head : 0);
  c.n_ctx_train = (int)f.get_int(a + "context_length", 0);
  c.rms_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-6);
  c.rope_freq_base = (float)f.get_float(a + "rope.freq_base", 10000.0);
  c.rope_dim = (int)f.get_int(a + "rope.dimension_count", c.head_dim);
  c.n_expert = (int)f.get_int(a + "expert_count", 0);
  c.n_expert_used = (int)f.get_int(a + "expert_used_count", 0);
  c.n_ff = c.n_expert > 0 ? (int)f.get_int(a + "expert_feed_forward_length", f.get_int(a + "feed_forward_length", 0))
                          : (int)f.get_int(a + "feed_forward_length");
  // the vocabulary size is whatever the embedding matrix holds (vocab_size is optional)
  const GgufTensor* emb = require(f, "token_embd.weight");
  c.n_vocab = emb->ne.size() >= 2 ? (int)emb->ne[1] : 0;
  // llama.cpp: LLAMA_ROPE_TYPE_NORM for llama, NEOX for the qwen family
  c.rope_neox = c.arch != "llama";
  if (c.n_layer <= 0 || c.n_embd <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0 ||
      c.head_dim <= 0 || c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0 || c.n_vocab <= 0)
    throw std::runtime_error("model: inconsistent hyperparameters for architecture '" + c.arch + "'");
  return c;
}

DecoderBase::DecoderBase(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, int n_slots, int n_ctx,
                         int max_batch, ThreadPool* pool)
    : file_(std::move(file)), cfg_(cfg), pool_(pool), S_(n_slots), C_(n_ctx), Tm_(max_batch) {
  if (S_ <= 0 || C_ <= 0 || Tm_ <= 0) throw std::runtime_error("model: slots, ctx and max batch must be positive");
  const GgufFile& f = *file_;
  D_ = cfg_.n_embd; H_ = cfg_.n_head; Hk_ = cfg_.n_head_kv; G_ = H_ / Hk_; Dh_ = cfg_.head_dim; V_ = cfg_.n_vocab;
  const int HD = H_ * Dh_, KD = Hk_ * Dh_;

  tok_embd_ = weight_2d(f, "token_embd.weight", D_, V_);
  output_ = f.tensor("output.weight") ? weight_2d(f, "output.weight", D_, V_) : tok_embd_;
  output_norm_ = vector_f32(f, "output_norm.weight", D_);
  layers_.resize(cfg_.n_layer);
  for (int il = 0; il < cfg_.n_layer; il++) {
    Layer& l = layers_[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    l.attn_norm = vector_f32(f, p + "attn_norm.weight", D_);
    l.wq = weight_2d(f, p + "attn_q.weight", D_, HD);
    l.wk = weight_2d(f, p + "attn_k.weight", D_, KD);
    l.wv = weight_2d(f, p + "attn_v.weight", D_, KD);
    l.wo = weight_2d(f, p + "attn_output.weight", HD, D_);
    l.bq = vector_f32(f, p + "attn_q.bias", HD, true);
    l.bk = vector_f32(f, p + "attn_k.bias", KD, true);
    l.bv = vector_f32(f, p + "attn_v.bias", KD, true);
    l.q_norm = vector_f32(f, p + "attn_q_norm.weight", Dh_, true);
    l.k_norm = vector_f32(f, p + "attn_k_norm.weight", Dh_, true);
    l.ffn_norm = vector_f32(f, p + "ffn_norm.weight", D_);
  }

  const size_t kv_elems = (size_t)cfg_.n_layer * S_ * Hk_ * C_ * Dh_;
  k_cache_.assign(kv_elems, 0);
  v_cache_.assign(kv_elems, 0);
  slot_len_.assign(S_, 0);
  len_scratch_.assign(S_, 0);

  const int P = pool_ ? pool_->size() : 1;
  x_.assign((size_t)Tm_ * D_, 0.f);
  xn_.assign((size_t)Tm_ * D_, 0.f);
  q_.assign((size_t)Tm_ * HD, 0.f);
  k_.assign((size_t)Tm_ * KD, 0.f);
  v_.assign((size_t)Tm_ * KD, 0.f);
  att_.assign((size_t)Tm_ * HD, 0.f);
  tmp_.assign((size_t)Tm_ * D_, 0.f);
  rows_.assign(Tm_, 0);
  // ~96 query rows per item: the kernel converts each key block once per item, so fewer rows
  // would spend more on conversion; more would leave too few items to share out in a chunk.
  Bq_ = std::max(1, std::min(Tm_, 96 / G_));
  attn_items_.reserve((size_t)Tm_ * Hk_);
  // the kernel keeps a score for every (row, key) of an item and 16 partial sums per output:
  // about Bq * G * (C + 16 * Dh) floats per thread
  attn_scratch_n_ = attention_scratch_floats(Bq_, G_, Dh_, C_);
  attn_scratch_.assign((size_t)P * attn_scratch_n_, 0.f);
}

size_t DecoderBase::kv_bytes() const {
  return k_cache_.size() * sizeof(uint16_t) + v_cache_.size() * sizeof(uint16_t);
}

void DecoderBase::kv_truncate(int slot, int pos) {
  if (slot < 0 || slot >= S_) throw std::out_of_range("model: kv_truncate slot out of range");
  // attention only ever reads [0, pos] of a slot, so forgetting is bookkeeping
  slot_len_[slot] = std::max(0, std::min(slot_len_[slot], pos));
}

void DecoderBase::kv_copy(int src, int dst, int n) {
  if (src < 0 || src >= S_ || dst < 0 || dst >= S_) throw std::out_of_range("model: kv_copy slot out of range");
  if (n < 0 || n > slot_len_[src]) throw std::out_of_range("model: kv_copy beyond the source slot's length");
  if (src == dst) return;
  for (int il = 0; il < cfg_.n_layer; il++)
    for (int g = 0; g < Hk_; g++) {
      std::memcpy(&k_cache_[kv_index(il, dst, g, 0)], &k_cache_[kv_index(il, src, g, 0)], (size_t)n * Dh_ * 2);
      std::memcpy(&v_cache_[kv_index(il, dst, g, 0)], &v_cache_[kv_index(il, src, g, 0)], (size_t)n * Dh_ * 2);
    }
  slot_len_[dst] = n;
}

void DecoderBase::forward(const Batch& b, float* out) {
  const int T = (int)b.token.size();
  if ((int)b.pos.size() != T || (int)b.slot.size() != T || (int)b.logits.size() != T)
    throw std::invalid_argument("model: batch arrays differ in length");
  // Validate the whole batch before touching the cache: a token may extend its slot by at most
  // one position past what is already there (no holes), in batch order.
  std::vector<int>& len = len_scratch_;  // committed to slot_len_ only if the whole batch is valid
  len = slot_len_;                        // same size: no allocation
  for (int t = 0; t < T; t++) {
    const int s = b.slot[t], p = b.pos[t], tok = b.token[t];
    std::string err;
    if (s < 0 || s >= S_) err = "slot " + std::to_string(s) + " out of range";
    else if (p < 0 || p >= C_) err = "position " + std::to_string(p) + " outside the context of " + std::to_string(C_);
    else if (p > len[s]) err = "position " + std::to_string(p) + " leaves a hole in slot " + std::to_string(s);
    else if (tok < 0 || tok >= V_) err = "token id " + std::to_string(tok) + " outside the vocabulary";
    if (!err.empty()) {
      throw std::invalid_argument("model: batch row " + std::to_string(t) + ": " + err);
    }
    len[s] = std::max(len[s], p + 1);
  }
  slot_len_.swap(len_scratch_);
  size_t n_out = 0;
  for (int t0 = 0; t0 < T; t0 += Tm_) {
    const int n = std::min(Tm_, T - t0);
    forward_chunk(&b.token[t0], &b.pos[t0], &b.slot[t0], &b.logits[t0], n, out + n_out * (size_t)V_);
    for (int t = t0; t < t0 + n; t++) n_out += b.logits[t] ? 1 : 0;
  }
}

void DecoderBase::forward_chunk(const int32_t* token, const int32_t* pos, const int32_t* slot, const uint8_t* want,
                                int T, float* out) {
  const int HD = H_ * Dh_, KD = Hk_ * Dh_;
  const float eps = cfg_.rms_eps;
  float* x = x_.data();
  float* xn = xn_.data();

  par_for(T, [&](int t) { dequantize_row(tok_embd_, token[t], x + (size_t)t * D_); });

  for (int il = 0; il < cfg_.n_layer; il++) {
    const Layer& l = layers_[il];
    par_for(T, [&](int t) { rmsnorm(xn + (size_t)t * D_, x + (size_t)t * D_, l.attn_norm.data(), D_, eps); });
    mm(l.wq, xn, q_.data(), T);
    mm(l.wk, xn, k_.data(), T);
    mm(l.wv, xn, v_.data(), T);
    par_for(T, [&](int t) {
      float* qt = &q_[(size_t)t * HD];
      float* kt = &k_[(size_t)t * KD];
      float* vt = &v_[(size_t)t * KD];
      if (!l.bq.empty()) add(qt, l.bq.data(), HD);
      if (!l.bk.empty()) add(kt, l.bk.data(), KD);
      if (!l.bv.empty()) add(vt, l.bv.data(), KD);
      if (!l.q_norm.empty())
        for (int h = 0; h < H_; h++) rmsnorm(qt + h * Dh_, qt + h * Dh_, l.q_norm.data(), Dh_, eps);
      if (!l.k_norm.empty())
        for (int h = 0; h < Hk_; h++) rmsnorm(kt + h * Dh_, kt + h * Dh_, l.k_norm.data(), Dh_, eps);
      rope(qt, H_, Dh_, cfg_.rope_dim, pos[t], cfg_.rope_freq_base, cfg_.rope_neox);
      rope(kt, Hk_, Dh_, cfg_.rope_dim, pos[t], cfg_.rope_freq_base, cfg_.rope_neox);
      for (int g = 0; g < Hk_; g++) {
        uint16_t* kc = &k_cache_[kv_index(il, slot[t], g, pos[t])];
        uint16_t* vc = &v_cache_[kv_index(il, slot[t], g, pos[t])];
        for (int d = 0; d < Dh_; d++) {
          kc[d] = f32_to_f16(kt[g * Dh_ + d]);
          vc[d] = f32_to_f16(vt[g * Dh_ + d]);
        }
      }
    });
    attention(il, pos, slot, T);
    mm(l.wo, att_.data(), tmp_.data(), T);
    par_for(T, [&](int t) {
      add(x + (size_t)t * D_, &tmp_[(size_t)t * D_], D_);
      rmsnorm(xn + (size_t)t * D_, x + (size_t)t * D_, l.ffn_norm.data(), D_, eps);
    });
    ffn(il, xn, tmp_.data(), T);
    par_for(T, [&](int t) { add(x + (size_t)t * D_, &tmp_[(size_t)t * D_], D_); });
  }

  // Only the wanted rows go through the final norm and the [D -> V] head.
  int n = 0;
  for (int t = 0; t < T; t++)
    if (want[t]) rows_[n++] = t;
  if (n == 0) return;
  par_for(n, [&](int i) { rmsnorm(xn + (size_t)i * D_, x + (size_t)rows_[i] * D_, output_norm_.data(), D_, eps); });
  mm(output_, xn, out, n);
}

// Work items: each maximal run of batch rows that are consecutive positions of one slot (a
// prefill chunk; a decode row is a run of one), cut into blocks of Bq positions, times the Hk KV
// heads. Items go largest first to whichever thread is free, since causal blocks differ in size.
// A row's result does not depend on how its run was cut (see mb::attention), so neither does it
// depend on the rest of the batch.
void DecoderBase::attention(int il, const int32_t* pos, const int32_t* slot, int T) {
  const int HD = H_ * Dh_;
  const float scale = 1.0f / std::sqrt((float)Dh_);
  std::vector<AttnItem>& items = attn_items_;  // reserved for Tm * Hk: no allocation
  items.clear();
  for (int t0 = 0; t0 < T;) {
    int t1 = t0 + 1;
    while (t1 < T && t1 - t0 < Bq_ && slot[t1] == slot[t0] && pos[t1] == pos[t1 - 1] + 1) t1++;
    const int n = t1 - t0;
    const double cost = (double)n * G_ * (pos[t0] + n);
    for (int g = 0; g < Hk_; g++) items.push_back({t0, n, g, cost});
    t0 = t1;
  }
  std::sort(items.begin(), items.end(), [](const AttnItem& a, const AttnItem& b) { return a.cost > b.cost; });
  auto run = [&](const AttnItem& it, float* scratch) {
    const size_t off = kv_index(il, slot[it.t0], it.g, 0);
    const size_t qo = (size_t)it.t0 * HD + (size_t)it.g * G_ * Dh_;  // first head of the group
    mb::attention(&q_[qo], HD, &k_cache_[off], &v_cache_[off], &att_[qo], HD, it.n, G_, Dh_, pos[it.t0], scale,
                  scratch);
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

}  // namespace model_detail

std::unique_ptr<Model> Model::load(std::shared_ptr<GgufFile> file, int n_slots, int n_ctx, ThreadPool* pool,
                                   int max_batch) {
  if (!file) throw std::invalid_argument("model: no GGUF file");
  const std::string arch = file->get_str("general.architecture", "");
  const bool dense = arch == "llama" || arch == "qwen2" || arch == "qwen3";
  if (!dense && arch != "qwen3moe")
    throw std::runtime_error("model: unsupported architecture '" + arch + "' (supported: llama, qwen2, qwen3, qwen3moe)");
  const ModelConfig cfg = model_detail::read_config(*file);
  if (dense) return load_llama_family(std::move(file), cfg, n_slots, n_ctx, max_batch, pool);
  return load_qwen3moe(std::move(file), cfg, n_slots, n_ctx, max_batch, pool);
}

}  // namespace mb
