// Each architecture loads exactly the tensors it needs, and says so the same way when a file is
// not what it expects. For a tiny complete model of every supported architecture (written here as
// an in-memory GGUF, f32 weights):
//   - dropping any one tensor must fail to load naming that tensor and the architecture, unless
//     the tensor is optional (a tied output head; Q/K/V biases outside qwen2; phi3's LongRoPE
//     factors and QKV bias);
//   - any one tensor with a wrong shape must fail naming the tensor, the architecture, the shape
//     found and the one expected;
//   - any one tensor of a type no kernel takes (Q8_1, where its row length allows) must fail
//     naming the tensor, the architecture, the type and the types expected;
//   - a missing or impossible hyperparameter must fail naming the key, the architecture and what
//     was expected;
//   - an unknown general.architecture must fail naming it and the supported ones.
// The complete model must load and give finite logits, and so must each file missing only an
// optional tensor.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "util/threadpool.h"
#include "../../util/tests/check.h"

namespace {

// Dimensions of the synthetic models (Dh != D / H, as qwen3 allows).
constexpr int D = 32, H = 2, HK = 1, DH = 24, F = 64, V = 40, L = 2, E = 4, EK = 2;

struct Tensor {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
  uint32_t type = 0;        // ggml type: 0 F32, 9 Q8_1 (a type no weight may have)
};
constexpr uint32_t kF32 = 0, kQ8_1 = 9;

// The tensors a complete file of `arch` holds, and which of them the architecture may go without.
std::vector<Tensor> complete_model(const std::string& arch, std::set<std::string>& optional) {
  const bool moe = arch == "qwen3moe", gemma3 = arch == "gemma3", qk_norm = arch == "qwen3" || moe || gemma3;
  std::vector<Tensor> t = {{"token_embd.weight", {D, V}}, {"output_norm.weight", {D}}, {"output.weight", {D, V}}};
  optional.insert("output.weight");
  if (arch == "phi3") {
    // fused projections; RoPE factors of the rope dims (= Dh here), one pair for all layers
    t.push_back({"rope_factors_long.weight", {DH / 2}});
    t.push_back({"rope_factors_short.weight", {DH / 2}});
    optional.insert({"rope_factors_long.weight", "rope_factors_short.weight"});
    for (int il = 0; il < L; il++) {
      const std::string p = "blk." + std::to_string(il) + ".";
      t.push_back({p + "attn_norm.weight", {D}});
      t.push_back({p + "attn_qkv.weight", {D, (H + 2 * HK) * DH}});
      t.push_back({p + "attn_qkv.bias", {(H + 2 * HK) * DH}});
      optional.insert(p + "attn_qkv.bias");
      t.push_back({p + "attn_output.weight", {H * DH, D}});
      t.push_back({p + "ffn_norm.weight", {D}});
      t.push_back({p + "ffn_up.weight", {D, 2 * F}});
      t.push_back({p + "ffn_down.weight", {F, D}});
    }
    return t;
  }
  if (arch == "gpt-oss") {
    // biased attention with sinks, a biased router and biased experts; nothing optional but the head
    for (int il = 0; il < L; il++) {
      const std::string p = "blk." + std::to_string(il) + ".";
      t.push_back({p + "attn_norm.weight", {D}});
      t.push_back({p + "attn_q.weight", {D, H * DH}});
      t.push_back({p + "attn_k.weight", {D, HK * DH}});
      t.push_back({p + "attn_v.weight", {D, HK * DH}});
      t.push_back({p + "attn_q.bias", {H * DH}});
      t.push_back({p + "attn_k.bias", {HK * DH}});
      t.push_back({p + "attn_v.bias", {HK * DH}});
      t.push_back({p + "attn_output.weight", {H * DH, D}});
      t.push_back({p + "attn_output.bias", {D}});
      t.push_back({p + "attn_sinks.weight", {H}});
      t.push_back({p + "post_attention_norm.weight", {D}});
      t.push_back({p + "ffn_gate_inp.weight", {D, E}});
      t.push_back({p + "ffn_gate_inp.bias", {E}});
      t.push_back({p + "ffn_gate_exps.weight", {D, F, E}});
      t.push_back({p + "ffn_up_exps.weight", {D, F, E}});
      t.push_back({p + "ffn_down_exps.weight", {F, D, E}});
      t.push_back({p + "ffn_gate_exps.bias", {F, E}});
      t.push_back({p + "ffn_up_exps.bias", {F, E}});
      t.push_back({p + "ffn_down_exps.bias", {D, E}});
    }
    return t;
  }
  for (int il = 0; il < L; il++) {
    const std::string p = "blk." + std::to_string(il) + ".";
    t.push_back({p + "attn_norm.weight", {D}});
    t.push_back({p + "attn_q.weight", {D, H * DH}});
    t.push_back({p + "attn_k.weight", {D, HK * DH}});
    t.push_back({p + "attn_v.weight", {D, HK * DH}});
    t.push_back({p + "attn_q.bias", {H * DH}});
    t.push_back({p + "attn_k.bias", {HK * DH}});
    t.push_back({p + "attn_v.bias", {HK * DH}});
    if (arch != "qwen2")
      for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) optional.insert(p + b);
    if (qk_norm) {
      t.push_back({p + "attn_q_norm.weight", {DH}});
      t.push_back({p + "attn_k_norm.weight", {DH}});
    }
    t.push_back({p + "attn_output.weight", {H * DH, D}});
    if (gemma3) t.push_back({p + "post_attention_norm.weight", {D}});
    t.push_back({p + "ffn_norm.weight", {D}});
    if (gemma3) t.push_back({p + "post_ffw_norm.weight", {D}});
    if (moe) {
      t.push_back({p + "ffn_gate_inp.weight", {D, E}});
      t.push_back({p + "ffn_gate_exps.weight", {D, F, E}});
      t.push_back({p + "ffn_up_exps.weight", {D, F, E}});
      t.push_back({p + "ffn_down_exps.weight", {F, D, E}});
    } else {
      t.push_back({p + "ffn_gate.weight", {D, F}});
      t.push_back({p + "ffn_up.weight", {D, F}});
      t.push_back({p + "ffn_down.weight", {F, D}});
    }
  }
  return t;
}

uint64_t tensor_bytes(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d : t.ne) n *= d;
  return t.type == kQ8_1 ? (uint64_t)n / 32 * 36 : (uint64_t)n * 4;
}

// GGUF v3 with the hyperparameters of `arch` and every tensor but `skip`.
// keys: integer hyperparameters (without the "<arch>." prefix) to set, or with -1 to leave out.
std::vector<uint8_t> write_gguf(const std::string& arch, const std::vector<Tensor>& tensors, const std::string& skip,
                                const std::map<std::string, int64_t>& keys = {}) {
  std::vector<uint8_t> b;
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; i++) b.push_back(uint8_t(v >> (8 * i))); };
  auto u64 = [&](uint64_t v) { for (int i = 0; i < 8; i++) b.push_back(uint8_t(v >> (8 * i))); };
  auto str = [&](const std::string& s) { u64(s.size()); b.insert(b.end(), s.begin(), s.end()); };
  auto f32 = [&](float f) { uint32_t v; std::memcpy(&v, &f, 4); u32(v); };
  const uint32_t kU32 = 4, kFloat = 6, kStr = 8;

  std::vector<const Tensor*> kept;
  for (const Tensor& t : tensors)
    if (t.name != skip) kept.push_back(&t);
  std::vector<std::pair<std::string, uint32_t>> ints = {
      {"block_count", L}, {"embedding_length", D}, {"feed_forward_length", F}, {"attention.head_count", H},
      {"attention.head_count_kv", HK}, {"attention.key_length", DH}, {"attention.value_length", DH},
      {"context_length", 256}};
  if (arch == "qwen3moe" || arch == "gpt-oss")
    ints.insert(ints.end(), {{"expert_count", E}, {"expert_used_count", EK}, {"expert_feed_forward_length", F}});
  if (arch == "gpt-oss" || arch == "gemma3") ints.push_back({"attention.sliding_window", 4});
  for (const auto& [key, v] : keys) {
    auto it = std::find_if(ints.begin(), ints.end(), [&](const auto& kv) { return kv.first == key; });
    if (it != ints.end()) ints.erase(it);
    if (v >= 0) ints.push_back({key, (uint32_t)v});
  }

  u32(0x46554747); u32(3); u64(kept.size()); u64(2 + ints.size());
  str("general.architecture"); u32(kStr); str(arch);
  str(arch + ".attention.layer_norm_rms_epsilon"); u32(kFloat); f32(1e-6f);
  for (auto& [key, v] : ints) { str(arch + "." + key); u32(kU32); u32(v); }
  uint64_t offset = 0;
  for (const Tensor* t : kept) {
    str(t->name); u32((uint32_t)t->ne.size());
    int64_t n = 1;
    for (int64_t d : t->ne) { u64((uint64_t)d); n *= d; }
    u32(t->type);
    u64(offset);
    offset += (tensor_bytes(*t) + 31) / 32 * 32;
  }
  while (b.size() % 32) b.push_back(0);
  for (const Tensor* t : kept) {
    if (t->type != kF32) {  // any bytes do: the load must refuse the type before reading them
      b.insert(b.end(), tensor_bytes(*t), 0);
      while (b.size() % 32) b.push_back(0);
      continue;
    }
    int64_t n = 1;
    for (int64_t d : t->ne) n *= d;
    const bool norm = t->name.find("norm") != std::string::npos;
    for (int64_t i = 0; i < n; i++) f32(norm ? 1.0f : 0.05f * std::sin(0.7f * (float)i + (float)t->name.size()));
    while (b.size() % 32) b.push_back(0);
  }
  return b;
}

// "" when the file loads and gives finite logits, else the error.
std::string try_load(const std::vector<uint8_t>& buf, mb::ThreadPool* pool) {
  try {
    std::shared_ptr<mb::GgufFile> f = mb::GgufFile::parse(buf.data(), buf.size());
    auto m = mb::Model::load(f, 1, 8, pool, 4);
    std::vector<float> out(2 * V);
    m->forward(mb::Batch{{1, 7}, {0, 1}, {0, 0}, {1, 1}}, out.data());
    for (float x : out)
      if (!std::isfinite(x)) return "non-finite logits";
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}


bool names_all(const std::string& err, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts)
    if (err.find(p) == std::string::npos) return false;
  return true;
}

std::string shape_of(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); i++) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

int main() {
  mb::ThreadPool pool(2);
  for (const std::string arch : {"llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gpt-oss", "gemma3"}) {
    std::set<std::string> optional;
    const std::vector<Tensor> tensors = complete_model(arch, optional);
    const std::string complete = try_load(write_gguf(arch, tensors, ""), &pool);
    check(complete.empty(), arch + ": complete model fails to load: " + complete);
    int n_required = 0, n_typed = 0;
    for (size_t i = 0; i < tensors.size(); i++) {
      const Tensor& t = tensors[i];
      const std::string who = "'" + t.name + "'", which = "architecture '" + arch + "'";
      const std::string err = try_load(write_gguf(arch, tensors, t.name), &pool);
      if (optional.count(t.name)) {
        check(err.empty(), arch + " without optional " + t.name + ": " + err);
      } else {
        n_required++;
        // the vocabulary size comes from the embedding itself, so without it only D is known
        const std::string shape = t.name == "token_embd.weight" ? "[" + std::to_string(D) + ", n_vocab]" : shape_of(t.ne);
        check(names_all(err, {who, which, "is missing", "expected shape " + shape}),
              arch + " without " + t.name + " must fail naming it, the architecture and its shape; got: '" + err + "'");
      }
      // wrong shape: rows one longer (the embedding's row count sets n_vocab, so rows are the
      // dimension every tensor has a fixed expectation for)
      std::vector<Tensor> reshaped = tensors;
      reshaped[i].ne[0] += 1;
      const std::string shape_err = try_load(write_gguf(arch, reshaped, ""), &pool);
      check(names_all(shape_err, {who, which, "has shape " + shape_of(reshaped[i].ne), "expected " + shape_of(t.ne)}),
            arch + " with " + t.name + " of shape " + shape_of(reshaped[i].ne) +
                " must fail naming it, the architecture and both shapes; got: '" + shape_err + "'");
      // wrong type, where Q8_1's 32-element blocks fit the row
      if (t.ne[0] % 32 != 0) continue;
      n_typed++;
      std::vector<Tensor> retyped = tensors;
      retyped[i].type = kQ8_1;
      const std::string type_err = try_load(write_gguf(arch, retyped, ""), &pool);
      check(names_all(type_err, {who, which, "has type Q8_1", "expected one of F32"}),
            arch + " with " + t.name + " in Q8_1 must fail naming it, the architecture and the types; got: '" +
                type_err + "'");
    }
    std::printf("ok %s: %d required tensors each refused when missing, %zu optional; %zu refused with a wrong shape, "
                "%d with a wrong type\n", arch.c_str(), n_required, optional.size(), tensors.size(), n_typed);
  }
  std::set<std::string> optional;
  // hyperparameters: a missing key and values the shapes cannot have, each named with its arch
  const std::vector<Tensor> phi3 = complete_model("phi3", optional);
  const struct {
    std::map<std::string, int64_t> keys;
    std::string message;
  } bad_keys[] = {
      {{{"block_count", -1}}, "key 'phi3.block_count' is missing; expected an integer"},
      {{{"attention.head_count_kv", 3}}, "key 'phi3.attention.head_count_kv' is 3; expected a divisor of attention.head_count (2)"},
      {{{"rope.dimension_count", 13}}, "key 'phi3.rope.dimension_count' is 13; expected an even number from 2 to the head dim (24)"},
      {{{"embedding_length", 0}}, "key 'phi3.embedding_length' is 0; expected a positive number"},
  };
  for (const auto& b : bad_keys) {
    const std::string key_err = try_load(write_gguf("phi3", phi3, "", b.keys), &pool);
    check(names_all(key_err, {"architecture 'phi3'", b.message}), "expected '" + b.message + "'; got: '" + key_err + "'");
  }
  std::printf("ok phi3: %zu bad hyperparameters refused naming the key and what was expected\n", std::size(bad_keys));
  const std::string err = try_load(write_gguf("mamba", complete_model("llama", optional), ""), &pool);
  check(names_all(err, {"unsupported architecture 'mamba'", "expected one of", "llama", "phi3"}),
        "an unknown architecture must fail naming it and the supported ones; got: '" + err + "'");
  std::printf(g_failures ? "%d failures\n" : "all required-tensor tests passed\n", g_failures);
  return g_failures ? 1 : 0;
}
