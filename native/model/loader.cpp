#include "model/loader.h"

#include "model/backend.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace mb {
namespace model_detail {
std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); i++) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::runtime_error tensor_error(const std::string& arch, const std::string& tensor, const std::string& found,
                                const std::string& expected) {
  return std::runtime_error("model: architecture '" + arch + "': tensor '" + tensor + "' " + found + "; expected " +
                            expected);
}

std::runtime_error key_error(const std::string& arch, const std::string& key, const std::string& found,
                             const std::string& expected) {
  return std::runtime_error("model: architecture '" + arch + "': key '" + key + "' " + found + "; expected " + expected);
}

bool is_weight_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K: case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

std::string weight_types_str() {
  std::string s;
  for (uint32_t v = 0; v < 64; v++) {
    const GgmlType t = (GgmlType)v;
    if (is_weight_type(t)) s += std::string(s.empty() ? "" : ", ") + ggml_type_name(t);
  }
  return "one of " + s;
}

namespace {

std::string type_str(GgmlType t) {
  try {
    return ggml_type_name(t);
  } catch (...) {
    return "unknown (" + std::to_string((unsigned)t) + ")";
  }
}

}  // namespace

namespace {

// An integer key of the architecture: present (unless it has a default) and within int.
int key_int(const GgufFile& f, const std::string& arch, const std::string& key, const int64_t* dflt = nullptr) {
  if (!f.has(key)) {
    if (dflt) return (int)*dflt;
    throw key_error(arch, key, "is missing", "an integer");
  }
  const int64_t v = f.get_int(key);
  if (v < 0 || v > INT32_MAX) throw key_error(arch, key, "is " + std::to_string(v), "0 to " + std::to_string(INT32_MAX));
  return (int)v;
}

}  // namespace

ModelConfig read_config(const GgufFile& f) {
  ModelConfig c;
  c.arch = f.get_str("general.architecture");
  const std::string a = c.arch + ".";
  auto req = [&](const std::string& key) { return key_int(f, c.arch, a + key); };
  auto opt = [&](const std::string& key, int64_t dflt) { return key_int(f, c.arch, a + key, &dflt); };
  auto positive = [&](int v, const std::string& key) {
    if (v <= 0) throw key_error(c.arch, a + key, "is " + std::to_string(v), "a positive number");
  };
  c.n_layer = req("block_count");
  positive(c.n_layer, "block_count");
  c.n_embd = req("embedding_length");
  positive(c.n_embd, "embedding_length");
  c.n_head = req("attention.head_count");
  positive(c.n_head, "attention.head_count");
  c.n_head_kv = opt("attention.head_count_kv", c.n_head);
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    throw key_error(c.arch, a + "attention.head_count_kv", "is " + std::to_string(c.n_head_kv),
                    "a divisor of attention.head_count (" + std::to_string(c.n_head) + ")");
  c.head_dim = opt("attention.key_length", c.n_embd / c.n_head);
  positive(c.head_dim, "attention.key_length");
  c.n_ctx_train = opt("context_length", 0);
  c.rms_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-6);
  c.rope_freq_base = (float)f.get_float(a + "rope.freq_base", 10000.0);
  c.rope_dim = opt("rope.dimension_count", c.head_dim);
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    throw key_error(c.arch, a + "rope.dimension_count", "is " + std::to_string(c.rope_dim),
                    "an even number from 2 to the head dim (" + std::to_string(c.head_dim) + ")");
  c.n_expert = opt("expert_count", 0);
  c.n_expert_used = opt("expert_used_count", 0);
  c.n_ff = c.n_expert > 0 ? opt("expert_feed_forward_length", opt("feed_forward_length", 0)) : req("feed_forward_length");
  // vocab_size is optional; the embedding matrix always says how many tokens there are
  const GgufTensor* emb = f.tensor("token_embd.weight");
  if (!emb)
    throw tensor_error(c.arch, "token_embd.weight", "is missing",
                       "shape [" + std::to_string(c.n_embd) + ", n_vocab], type " + weight_types_str());
  c.n_vocab = emb->ne.size() == 2 && emb->ne[1] <= INT32_MAX ? (int)emb->ne[1] : 0;
  if (c.n_vocab <= 0)
    throw tensor_error(c.arch, "token_embd.weight", "has shape " + shape_str(emb->ne),
                       "[" + std::to_string(c.n_embd) + ", n_vocab]");
  return c;
}

const GgufTensor& WeightLoader::require(const std::string& name, const std::vector<int64_t>& want) const {
  const GgufTensor* t = f_.tensor(name);
  if (!t) throw error(name, "is missing", "shape " + shape_str(want) + ", type " + weight_types_str());
  return *t;
}

void WeightLoader::check_type(const GgufTensor& t) const {
  if (!is_weight_type(t.type)) throw error(t.name, "has type " + type_str(t.type), weight_types_str());
}

QMatrix WeightLoader::matrix(const std::string& name, int64_t K, int64_t N) const {
  const GgufTensor& t = require(name, {K, N});
  if (t.ne.size() < 2 || t.ne[0] != K || t.ne[1] != N || t.n_elements() != K * N)
    throw error(name, "has shape " + shape_str(t.ne), shape_str({K, N}));
  check_type(t);
  const QMatrix m{t.type, K, N, t.data};
  return be_ ? be_->matrix(name, m) : m;
}

ExpertMatrices WeightLoader::experts(const std::string& name, int64_t K, int64_t N, int64_t E) const {
  const GgufTensor& t = require(name, {K, N, E});
  if (t.ne.size() != 3 || t.ne[0] != K || t.ne[1] != N || t.ne[2] != E)
    throw error(name, "has shape " + shape_str(t.ne), shape_str({K, N, E}));
  check_type(t);
  const ExpertMatrices m{t.type, K, N, t.data, ggml_row_bytes(t.type, K) * (size_t)N};
  return be_ ? be_->experts(name, m) : m;
}

std::vector<float> WeightLoader::vector(const std::string& name, int64_t n) const {
  const GgufTensor& t = require(name, {n});
  if (t.n_elements() != n) throw error(name, "has shape " + shape_str(t.ne), shape_str({n}));
  check_type(t);
  std::vector<float> v((size_t)n);
  if (t.type == GgmlType::F32)
    std::memcpy(v.data(), t.data, (size_t)n * 4);
  else
    dequantize_row(QMatrix{t.type, n, 1, t.data}, 0, v.data());
  return v;
}

std::vector<float> WeightLoader::optional_vector(const std::string& name, int64_t n) const {
  return f_.tensor(name) ? vector(name, n) : std::vector<float>{};
}

const float* WeightLoader::vec(const std::string& name, int64_t n) const {
  if (!be_) throw std::logic_error("model: WeightLoader::vec without a backend");
  return be_->vector(vector(name, n));
}

const float* WeightLoader::optional_vec(const std::string& name, int64_t n) const {
  return f_.tensor(name) ? vec(name, n) : nullptr;
}

QMatrix WeightLoader::token_embd() const { return matrix("token_embd.weight", cfg_.n_embd, cfg_.n_vocab); }

QMatrix WeightLoader::output(const QMatrix& token_embd) const {
  return f_.tensor("output.weight") ? matrix("output.weight", cfg_.n_embd, cfg_.n_vocab) : token_embd;
}

AttentionWeights WeightLoader::attention(int il, Biases biases) const {
  const int D = cfg_.n_embd, HD = cfg_.n_head * cfg_.head_dim, KD = cfg_.n_head_kv * cfg_.head_dim;
  const std::string p = blk(il);
  AttentionWeights a;
  a.norm = vec(p + "attn_norm.weight", D);
  a.wq = matrix(p + "attn_q.weight", D, HD);
  a.wk = matrix(p + "attn_k.weight", D, KD);
  a.wv = matrix(p + "attn_v.weight", D, KD);
  a.wo = matrix(p + "attn_output.weight", HD, D);
  auto bias = [&](const std::string& name, int64_t n) {
    return biases == Biases::required ? vec(name, n) : optional_vec(name, n);
  };
  a.bq = bias(p + "attn_q.bias", HD);
  a.bk = bias(p + "attn_k.bias", KD);
  a.bv = bias(p + "attn_v.bias", KD);
  return a;
}

SwiGluWeights WeightLoader::swiglu(int il) const {
  const int D = cfg_.n_embd, F = cfg_.n_ff;
  const std::string p = blk(il);
  return SwiGluWeights{vec(p + "ffn_norm.weight", D), matrix(p + "ffn_gate.weight", D, F),
                       matrix(p + "ffn_up.weight", D, F), matrix(p + "ffn_down.weight", F, D)};
}

MoeWeights WeightLoader::moe(int il) const {
  const int D = cfg_.n_embd, F = cfg_.n_ff, E = cfg_.n_expert;
  const std::string p = blk(il);
  return MoeWeights{vec(p + "ffn_norm.weight", D), matrix(p + "ffn_gate_inp.weight", D, E),
                    experts(p + "ffn_gate_exps.weight", D, F, E), experts(p + "ffn_up_exps.weight", D, F, E),
                    experts(p + "ffn_down_exps.weight", F, D, E)};
}

}  // namespace model_detail
}  // namespace mb
