#include "model/tests/harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "kernels/blocks.h"

namespace mb {
namespace harness {
namespace {

// splitmix64: cheap, seedable per chunk so threads produce the same bytes in any order.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return (float)(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
};

void put_f16(uint8_t* p, float v) {
  const uint16_t h = kq::f2h(v);
  p[0] = (uint8_t)h;
  p[1] = (uint8_t)(h >> 8);
}

// Fills one row of K values of type t with values of spread about `sd`.
void fill_row(GgmlType t, int64_t K, float sd, Rng& r, uint8_t* row) {
  const size_t bb = ggml_block_bytes(t);
  const int64_t nb = K / ggml_block_elems(t);
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
    for (int64_t i = 0; i < K; i++) {
      const float v = (r.uniform() * 2.f - 1.f) * sd * 1.7320508f;
      if (t == GgmlType::F32) {
        std::memcpy(row + 4 * i, &v, 4);
      } else if (t == GgmlType::F16) {
        put_f16(row + 2 * i, v);
      } else {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        row[2 * i] = (uint8_t)(u >> 16);
        row[2 * i + 1] = (uint8_t)(u >> 24);
      }
    }
    return;
  }
  for (size_t i = 0; i < (size_t)nb * bb; i += 8) {
    const uint64_t v = r.next();
    std::memcpy(row + i, &v, std::min<size_t>(8, (size_t)nb * bb - i));
  }
  for (int64_t b = 0; b < nb; b++) {
    uint8_t* p = row + b * bb;
    switch (t) {
      case GgmlType::Q4_0: put_f16(p, sd / 4.6f); break;
      case GgmlType::Q4_1: put_f16(p, sd / 4.6f); put_f16(p + 2, -7.5f * sd / 4.6f); break;
      case GgmlType::Q5_0: put_f16(p, sd / 9.2f); break;
      case GgmlType::Q5_1: put_f16(p, sd / 9.2f); put_f16(p + 2, -15.5f * sd / 9.2f); break;
      case GgmlType::Q8_0: put_f16(p, sd / 74.f); break;
      case GgmlType::Q4_K: put_f16(p, sd / 250.f); put_f16(p + 2, 7.5f * sd / 250.f); break;
      case GgmlType::Q5_K: put_f16(p, sd / 500.f); put_f16(p + 2, 15.5f * sd / 500.f); break;
      case GgmlType::Q6_K: put_f16(p + 208, sd / 1370.f); break;
      default: throw std::invalid_argument("make_random_gguf: unsupported weight type");
    }
  }
}

struct TensorPlan {
  std::string name;
  GgmlType type;
  int64_t ne0, ne1;  // ne1 = 1 for vectors
  float sd;          // spread; norms are 1 +- sd
  bool norm;
  size_t offset = 0, bytes = 0;
};

void put_u32(std::vector<uint8_t>& o, uint32_t v) { for (int i = 0; i < 4; i++) o.push_back((uint8_t)(v >> (8 * i))); }
void put_u64(std::vector<uint8_t>& o, uint64_t v) { for (int i = 0; i < 8; i++) o.push_back((uint8_t)(v >> (8 * i))); }
void put_str(std::vector<uint8_t>& o, const std::string& s) {
  put_u64(o, s.size());
  o.insert(o.end(), s.begin(), s.end());
}
void kv_u32(std::vector<uint8_t>& o, const std::string& k, uint32_t v) { put_str(o, k); put_u32(o, 4); put_u32(o, v); }
void kv_f32(std::vector<uint8_t>& o, const std::string& k, float v) {
  put_str(o, k);
  put_u32(o, 6);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  put_u32(o, u);
}
void kv_str(std::vector<uint8_t>& o, const std::string& k, const std::string& v) { put_str(o, k); put_u32(o, 8); put_str(o, v); }

}  // namespace

std::vector<uint8_t> random_matrix(GgmlType t, int64_t K, int64_t N, float sd, uint64_t seed) {
  const size_t rb = ggml_row_bytes(t, K);
  std::vector<uint8_t> v(rb * (size_t)N);
  Rng r{seed};
  for (int64_t n = 0; n < N; n++) fill_row(t, K, sd, r, v.data() + n * rb);
  return v;
}

ModelShape shape_preset(const std::string& name, GgmlType wtype) {
  if (name == "qwen3-8b") return {name, 36, 4096, 32, 8, 128, 12288, 151936, wtype};
  if (name == "qwen3-tiny") return {name, 2, 256, 4, 2, 64, 512, 1024, wtype};
  if (name == "smollm2-135m") return {name, 30, 576, 9, 3, 64, 1536, 49152, wtype, "llama"};
  if (name == "llama-tiny") return {name, 2, 384, 6, 2, 64, 512, 1024, wtype, "llama"};
  throw std::invalid_argument("unknown model shape '" + name + "' (qwen3-8b, qwen3-tiny, smollm2-135m, llama-tiny)");
}

uint64_t step_weight_bytes(const ModelShape& s) {
  auto mat = [&](int64_t K, int64_t N) { return (uint64_t)ggml_row_bytes(s.wtype, K) * (uint64_t)N; };
  const uint64_t layer = mat(s.D, (int64_t)s.H * s.Dh) + 2 * mat(s.D, (int64_t)s.Hk * s.Dh) +
                         mat((int64_t)s.H * s.Dh, s.D) + 2 * mat(s.D, s.F) + mat(s.F, s.D) +
                         4ull * (2 * s.D + (s.arch == "qwen3" ? 2 * s.Dh : 0));
  return (uint64_t)s.L * layer + mat(s.D, s.V) + ggml_row_bytes(s.wtype, s.D) + 4ull * s.D;
}

std::vector<uint8_t> make_random_gguf(const ModelShape& s, uint64_t seed, int threads) {
  std::vector<TensorPlan> plan;
  const float sd_in = 1.f / std::sqrt((float)s.D);
  auto mat = [&](const std::string& n, int64_t K, int64_t N, float sd) { plan.push_back({n, s.wtype, K, N, sd, false}); };
  auto vec = [&](const std::string& n, int64_t K) { plan.push_back({n, GgmlType::F32, K, 1, 0.1f, true}); };
  const bool qwen3 = s.arch == "qwen3";
  if (!qwen3 && s.arch != "llama") throw std::invalid_argument("make_random_gguf: architecture " + s.arch);
  if (!qwen3 && s.H * s.Dh != s.D) throw std::invalid_argument("make_random_gguf: llama's head dim is D / H");
  // llama ties the head to the embedding (as SmolLM2 does), which then serves both: values of
  // about 1/sqrt(D) keep the logits in range, and rmsnorm rescales the embedded rows anyway
  mat("token_embd.weight", s.D, s.V, qwen3 ? 1.0f : sd_in);
  vec("output_norm.weight", s.D);
  if (qwen3) mat("output.weight", s.D, s.V, sd_in);
  for (int il = 0; il < s.L; il++) {
    const std::string p = "blk." + std::to_string(il) + ".";
    vec(p + "attn_norm.weight", s.D);
    mat(p + "attn_q.weight", s.D, (int64_t)s.H * s.Dh, sd_in);
    mat(p + "attn_k.weight", s.D, (int64_t)s.Hk * s.Dh, sd_in);
    mat(p + "attn_v.weight", s.D, (int64_t)s.Hk * s.Dh, sd_in);
    mat(p + "attn_output.weight", (int64_t)s.H * s.Dh, s.D, 1.f / std::sqrt((float)(s.H * s.Dh)));
    if (qwen3) {
      vec(p + "attn_q_norm.weight", s.Dh);
      vec(p + "attn_k_norm.weight", s.Dh);
    }
    vec(p + "ffn_norm.weight", s.D);
    mat(p + "ffn_gate.weight", s.D, s.F, sd_in);
    mat(p + "ffn_up.weight", s.D, s.F, sd_in);
    mat(p + "ffn_down.weight", s.F, s.D, 1.f / std::sqrt((float)s.F));
  }
  size_t off = 0;
  for (auto& t : plan) {
    t.bytes = ggml_row_bytes(t.type, t.ne0) * (size_t)t.ne1;
    t.offset = off;
    off = (off + t.bytes + 31) / 32 * 32;
  }
  std::vector<uint8_t> o;
  const std::string a = s.arch + ".";
  put_u32(o, 0x46554747u);  // "GGUF"
  put_u32(o, 3);
  put_u64(o, plan.size());
  put_u64(o, qwen3 ? 11 : 10);
  kv_str(o, "general.architecture", s.arch);
  kv_str(o, "general.name", "random " + s.name);
  kv_u32(o, a + "block_count", (uint32_t)s.L);
  kv_u32(o, a + "embedding_length", (uint32_t)s.D);
  kv_u32(o, a + "feed_forward_length", (uint32_t)s.F);
  kv_u32(o, a + "attention.head_count", (uint32_t)s.H);
  kv_u32(o, a + "attention.head_count_kv", (uint32_t)s.Hk);
  if (qwen3) kv_u32(o, a + "attention.key_length", (uint32_t)s.Dh);
  kv_u32(o, a + "context_length", 40960);
  kv_f32(o, a + "attention.layer_norm_rms_epsilon", 1e-6f);
  kv_f32(o, a + "rope.freq_base", 1000000.f);
  for (const auto& t : plan) {
    put_str(o, t.name);
    put_u32(o, 2);
    put_u64(o, (uint64_t)t.ne0);
    put_u64(o, (uint64_t)t.ne1);
    put_u32(o, (uint32_t)t.type);
    put_u64(o, t.offset);
  }
  o.resize((o.size() + 31) / 32 * 32, 0);
  const size_t data0 = o.size();
  o.resize(data0 + off, 0);

  // Work items: rows of every tensor in chunks, each chunk seeded by (seed, tensor, chunk).
  struct Item { size_t tensor; int64_t r0, r1; };
  std::vector<Item> items;
  for (size_t i = 0; i < plan.size(); i++)
    for (int64_t r = 0; r < plan[i].ne1; r += 256) items.push_back({i, r, std::min<int64_t>(plan[i].ne1, r + 256)});
  int nth = threads > 0 ? threads : (int)std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int th = 0; th < nth; th++) {
    pool.emplace_back([&, th] {
      for (size_t it = (size_t)th; it < items.size(); it += (size_t)nth) {
        const Item& w = items[it];
        const TensorPlan& t = plan[w.tensor];
        Rng r{seed ^ (w.tensor * 0x100000001b3ull) ^ ((uint64_t)w.r0 << 32)};
        const size_t rb = ggml_row_bytes(t.type, t.ne0);
        for (int64_t row = w.r0; row < w.r1; row++) {
          uint8_t* dst = o.data() + data0 + t.offset + (size_t)row * rb;
          if (t.norm) {
            for (int64_t k = 0; k < t.ne0; k++) {
              const float v = 1.f + (r.uniform() * 2.f - 1.f) * t.sd;
              std::memcpy(dst + 4 * k, &v, 4);
            }
          } else {
            fill_row(t.type, t.ne0, t.sd, r, dst);
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return o;
}

int32_t sample_ref(const float* logits, int V, int top_k, float top_p, float temperature, float u) {
  int k = temperature <= 0.f ? 1 : std::min(top_k, V);
  std::vector<int> idx(V);
  for (int i = 0; i < V; i++) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (k == 1) return idx[0];
  std::vector<float> p(k);
  float sum = 0.f;
  for (int r = 0; r < k; r++) sum += (p[r] = std::exp((logits[idx[r]] - logits[idx[0]]) / temperature));
  int keep = k;
  float mass = 0.f;
  for (int r = 0; r < k; r++) {
    mass += p[r] / sum;
    if (mass >= top_p) { keep = r + 1; break; }
  }
  float kept = 0.f;
  for (int r = 0; r < keep; r++) kept += p[r];
  const float target = u * kept;
  float c = 0.f;
  for (int r = 0; r < keep; r++) {
    c += p[r];
    if (target < c) return idx[r];
  }
  return idx[keep - 1];
}

std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if ((unsigned char)c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += c;
  }
  return o + "\"";
}
JsonLine& JsonLine::num(const std::string& k, double v) {
  char b[64];
  if (std::isfinite(v)) std::snprintf(b, sizeof b, "%.6g", v);
  else std::snprintf(b, sizeof b, "null");
  items_.push_back({k, b});
  return *this;
}
JsonLine& JsonLine::str(const std::string& k, const std::string& v) { items_.push_back({k, json_quote(v)}); return *this; }
JsonLine& JsonLine::boolean(const std::string& k, bool v) { items_.push_back({k, v ? "true" : "false"}); return *this; }
JsonLine& JsonLine::raw(const std::string& k, const std::string& j) { items_.push_back({k, j}); return *this; }
std::string JsonLine::done() const {
  std::string o = "{";
  for (size_t i = 0; i < items_.size(); i++) o += (i ? "," : "") + json_quote(items_[i].first) + ":" + items_[i].second;
  return o + "}";
}

}  // namespace harness
}  // namespace mb
