// The CPU backend: every op on the kernel set dispatch.cpp picked (kernels.h), rows shared out
// over the thread pool. Each row of an op is computed by the same kernel call whatever the rows
// around it, so a token's logits do not depend on its batch. Attention takes each run of
// consecutive positions of one slot in blocks of Bq positions, per KV head, and hands it to the
// tiled kernel (mb::attention), so the keys and values are read once per block of queries
// rather than once per query.
//
// Dimension legend: see backend.h; P threads in the pool, Bq query positions per attention item.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <stdexcept>

#include "model/backend.h"
#include "model/transformer.h"
#include "util/threadpool.h"

namespace mb {
namespace model_detail {

const char* op_name(Op op) {
  static const char* const kNames[] = {"embed", "matmul", "rmsnorm", "add", "add_bias", "scale", "copy_cols", "rope",
                                       "rope_factors", "rope_angles", "store_kv", "kv_ring", "attention",
                                       "attention_window", "attention_sinks", "glu_silu", "glu_gelu", "softcap",
                                       "moe_route", "moe_experts", "weighted_sum", "move_rows"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == (size_t)Op::count, "one name per op");
  return kNames[(int)op];
}

void Backend::require(const std::string& arch, std::initializer_list<Op> ops) const {
  for (Op op : ops)
    if (!supports(op))
      throw std::runtime_error("model: architecture '" + arch + "' does not run on the " + name() +
                               " backend yet: it needs the op '" + op_name(op) + "', which that backend lacks");
}

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(ThreadPool* pool, int max_rows) : pool_(pool), Tm_(max_rows) {
    rows_ = Chunk{nullptr, nullptr, nullptr, nullptr, 0};
  }
  const char* name() const override { return "cpu"; }
  bool supports(Op) const override { return true; }
  bool on_host() const override { return true; }

  float* alloc(size_t n) override { return f32_.emplace_back(n, 0.f).data(); }
  int32_t* alloc_i32(size_t n) override { return i32_.emplace_back(n, 0).data(); }
  KvBuf alloc_kv(int L, int S, int Hk, int N, int Dh, int G, bool ring) override {
    KvBuf kv;
    kv.L = L; kv.S = S; kv.Hk = Hk; kv.N = N; kv.Dh = Dh; kv.ring = ring;
    kv.k = f16_.emplace_back(kv.elems(), 0).data();
    kv.v = f16_.emplace_back(kv.elems(), 0).data();
    if (L == 0) return kv;
    // the kernel converts each key block once per item, so fewer rows would spend more on
    // conversion; more would leave too few items to share out in a chunk (attention_rows)
    const int Bq = std::max(1, std::min(Tm_, attention_rows() / G));
    // a ring's call spans keys [its window's aligned start, its last position], < N + align
    const int keys = ring ? N + kAttentionKeyAlign : N;
    scratch_n_ = std::max(scratch_n_, attention_scratch_floats(Bq, G, Dh, keys));
    if (ring) gather_n_ = std::max(gather_n_, (size_t)2 * keys * Dh);
    const int P = pool_ ? pool_->size() : 1;
    scratch_.assign((size_t)P * scratch_n_, 0.f);
    gather_.assign((size_t)P * gather_n_, 0);
    items_.reserve((size_t)Tm_ * Hk);
    return kv;
  }
  QMatrix matrix(const std::string&, const QMatrix& host) override { return host; }
  ExpertMatrices experts(const std::string&, const ExpertMatrices& host) override {
    // one expert's share of a chunk: at most Tm rows
    members_.resize(Tm_);
    xe_.resize(std::max(xe_.size(), (size_t)Tm_ * host.K));
    ye_.resize(std::max(ye_.size(), (size_t)Tm_ * host.N));
    const size_t F = (size_t)std::max(host.K, host.N);
    gate_.resize(std::max(gate_.size(), (size_t)Tm_ * F));
    up_.resize(std::max(up_.size(), (size_t)Tm_ * F));
    return host;
  }
  const float* vector(const std::vector<float>& host) override {
    return host.empty() ? nullptr : vec_.emplace_back(host).data();
  }

  void set_rows(const Chunk& c) override { rows_ = c; }
  void read(float* out, const float* logits, size_t n) override {
    if (out != logits) std::memcpy(out, logits, n * sizeof(float));
  }

  void kv_copy(const KvBuf& kv, int src, int dst, int n) override {
    const size_t len = (size_t)(kv.ring ? kv.N : n) * kv.Dh;  // positions past n in a ring are stale, as in src
    for (int il = 0; il < kv.L; il++)
      for (int g = 0; g < kv.Hk; g++) {
        std::memcpy(&kv.k[kv.index(il, dst, g, 0)], &kv.k[kv.index(il, src, g, 0)], len * 2);
        std::memcpy(&kv.v[kv.index(il, dst, g, 0)], &kv.v[kv.index(il, src, g, 0)], len * 2);
      }
  }
  void kv_read(const KvBuf& kv, int slot, int pos, int n, uint8_t* dst) override {
    const size_t row = (size_t)kv.Dh * sizeof(uint16_t);
    for (int t = 0; t < n; t++)
      for (int il = 0; il < kv.L; il++)
        for (int g = 0; g < kv.Hk; g++) {
          std::memcpy(dst, &kv.k[kv.index(il, slot, g, pos + t)], row);
          std::memcpy(dst + (size_t)kv.Hk * row, &kv.v[kv.index(il, slot, g, pos + t)], row);
          dst += row;
          if (g + 1 == kv.Hk) dst += (size_t)kv.Hk * row;
        }
  }
  void kv_write(const KvBuf& kv, int slot, int pos, int n, const uint8_t* src) override {
    const size_t row = (size_t)kv.Dh * sizeof(uint16_t);
    for (int t = 0; t < n; t++)
      for (int il = 0; il < kv.L; il++)
        for (int g = 0; g < kv.Hk; g++) {
          std::memcpy(&kv.k[kv.index(il, slot, g, pos + t)], src, row);
          std::memcpy(&kv.v[kv.index(il, slot, g, pos + t)], src + (size_t)kv.Hk * row, row);
          src += row;
          if (g + 1 == kv.Hk) src += (size_t)kv.Hk * row;
        }
  }

  void embed(const QMatrix& W, float* x) override {
    par_for(rows_.T, [&](int t) { dequantize_row(W, rows_.token[t], x + (size_t)t * W.K); });
  }
  void matmul(const QMatrix& W, const float* x, float* y, int T) override {
    mb::matmul(W, x, y, T, pool_, &mm_scratch_);
  }
  // One token: one pool run with x quantized once, instead of one per matrix (mb::matmul_n).
  void matmul_n(const QMatrix* const* W, int n, const float* x, float* const* y, int T) override {
    mb::matmul_n(W, n, x, y, T, pool_, &mm_scratch_);
  }
  void rmsnorm(float* out, const float* x, const float* w, int R, int n, float eps) override {
    par_for(R, [&](int r) { mb::rmsnorm(out + (size_t)r * n, x + (size_t)r * n, w, n, eps); });
  }
  void add(float* x, const float* y, int R, int n) override {
    par_for(R, [&](int r) { mb::add(x + (size_t)r * n, y + (size_t)r * n, n); });
  }
  void add_bias(float* x, size_t ld, const float* b, int R, int n) override {
    par_for(R, [&](int r) { mb::add(x + (size_t)r * ld, b, n); });
  }
  void scale(float* x, int R, int n, float s) override {
    par_for(R, [&](int r) {
      float* row = x + (size_t)r * n;
      for (int i = 0; i < n; i++) row[i] *= s;
    });
  }
  void copy_cols(float* dst, size_t ld_dst, const float* src, size_t ld_src, int R, int n) override {
    par_for(R, [&](int r) { std::memcpy(dst + (size_t)r * ld_dst, src + (size_t)r * ld_src, (size_t)n * 4); });
  }
  void rope(float* x, int n_heads, int Dh, const RopeArgs& a, int T) override {
    par_for(T, [&](int t) {
      mb::rope(x + (size_t)t * n_heads * Dh, n_heads, Dh, a.dims, rows_.pos[t], a.base, a.neox, a.factors,
               a.attn_factor);
    });
  }
  void rope_angles(float* x, int n_heads, int Dh, int dims, const float* cs, int T) override {
    const int half = dims / 2;
    par_for(T, [&](int t) {
      const float* a = cs + (size_t)t * dims;  // [dims / 2][cos, sin]
      for (int h = 0; h < n_heads; h++) {
        float* v = x + ((size_t)t * n_heads + h) * Dh;
        for (int i = 0; i < half; i++) {
          const float c = a[2 * i], s = a[2 * i + 1];
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * c - x1 * s;
          v[i + half] = x0 * s + x1 * c;
        }
      }
    });
  }
  void store_kv(const KvBuf& kv, int il, const float* k, const float* v, int T) override {
    const int Dh = kv.Dh, Hk = kv.Hk;
    par_for(T, [&](int t) {
      const int slot = rows_.slot[t], p = kv.ring ? rows_.pos[t] % kv.N : rows_.pos[t];
      const float* kr = k + (size_t)t * Hk * Dh;
      const float* vr = v + (size_t)t * Hk * Dh;
      for (int g = 0; g < Hk; g++) {
        uint16_t* kc = &kv.k[kv.index(il, slot, g, p)];
        uint16_t* vc = &kv.v[kv.index(il, slot, g, p)];
        for (int d = 0; d < Dh; d++) {
          kc[d] = f32_to_f16(kr[g * Dh + d]);
          vc[d] = f32_to_f16(vr[g * Dh + d]);
        }
      }
    });
  }

  // Work items: each maximal run of rows that are consecutive positions of one slot (a prefill
  // run; a decode row is a run of one), cut into blocks of Bq positions, times the Hk KV heads.
  // Items go largest first to whichever thread is free, since causal blocks differ in size. A
  // row's result does not depend on how its run was cut (see mb::attention), so neither does it
  // depend on the rest of the batch.
  void attention(const KvBuf& kv, int il, const float* q, float* out, int H, const AttnArgs& a, int T) override {
    const Chunk& c = rows_;
    const int Hk = kv.Hk, G = H / Hk;
    const int Bq = std::max(1, std::min(Tm_, attention_rows() / G));
    std::vector<Item>& items = items_;  // reserved for Tm * Hk: no allocation
    items.clear();
    for (int t0 = 0; t0 < T;) {
      int t1 = t0 + 1;
      while (t1 < T && t1 - t0 < Bq && c.slot[t1] == c.slot[t0] && c.pos[t1] == c.pos[t1 - 1] + 1) t1++;
      const int n = t1 - t0;
      const double cost = (double)n * G * (a.window > 0 ? std::min(c.pos[t0], a.window) + n : c.pos[t0] + n);
      for (int g = 0; g < Hk; g++) items.push_back({t0, n, g, cost});
      t0 = t1;
    }
    std::sort(items.begin(), items.end(), [](const Item& x, const Item& y) { return x.cost > y.cost; });
    const int n_items = (int)items.size();
    const int nth = pool_ ? pool_->size() : 1;
    if (nth <= 1 || n_items <= 1) {
      for (const Item& it : items) attend(kv, il, q, out, H, a, it, scratch_.data(), gather_.data());
      return;
    }
    std::atomic<int> next{0};
    pool_->run([&](int ith, int) {
      float* scratch = &scratch_[(size_t)ith * scratch_n_];
      uint16_t* gather = &gather_[(size_t)ith * gather_n_];
      for (int i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_items;)
        attend(kv, il, q, out, H, a, items[i], scratch, gather);
    });
  }

  void glu(Glu act, float* gate, const float* up, int R, int n) override {
    if (act == Glu::silu) par_for(R, [&](int r) { silu_mul(gate + (size_t)r * n, up + (size_t)r * n, n); });
    else par_for(R, [&](int r) { gelu_mul(gate + (size_t)r * n, up + (size_t)r * n, n); });
  }
  void softcap(float* x, int R, int n, float cap) override {
    par_for(R, [&](int r) {
      float* row = x + (size_t)r * n;
      for (int j = 0; j < n; j++) row[j] = std::tanh(row[j] * (1.0f / cap)) * cap;
    });
  }

  void route(Routing r, float* logits, int E, int Ek, int32_t* sel, float* weight, int T) override {
    par_for(T, [&](int t) {
      float* p = logits + (size_t)t * E;
      int32_t* s = sel + (size_t)t * Ek;
      float* w = weight + (size_t)t * Ek;
      if (r == Routing::softmax_top_k) softmax(p, E);
      // partial selection, the lower index on a tie: E is small
      for (int k = 0; k < Ek; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
          bool taken = false;
          for (int j = 0; j < k; j++) taken |= s[j] == e;
          if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        s[k] = best;
        w[k] = p[best];
      }
      if (r == Routing::top_k_softmax) {
        softmax(w, Ek);
        return;
      }
      float sum = 0.f;
      for (int k = 0; k < Ek; k++) sum += w[k];
      for (int k = 0; k < Ek; k++) w[k] /= sum;
    });
  }

  // Each expert's weights are read once for all the rows routed to it.
  int experts(const ExpertFfn& f, const float* xn, int Ek, const int32_t* sel, float* res, int T) override {
    const int D = (int)f.gate.K, F = (int)f.gate.N;
    int ran = 0;
    for (int e = 0; e < f.E; e++) {
      int n = 0;  // an expert appears at most once among a token's Ek, so n <= T
      for (int i = 0; i < T * Ek; i++)
        if (sel[i] == e) members_[n++] = i;
      if (n == 0) continue;
      ran++;
      for (int i = 0; i < n; i++)
        std::memcpy(&xe_[(size_t)i * D], xn + (size_t)(members_[i] / Ek) * D, (size_t)D * 4);  // xe [n, D]
      if (f.act == ExpertAct::swiglu) {
        mb::matmul(f.gate.expert(e), xe_.data(), gate_.data(), n, pool_, &mm_scratch_);  // gate [n, F]
        mb::matmul(f.up.expert(e), xe_.data(), up_.data(), n, pool_, &mm_scratch_);      // up [n, F]
        par_for(n, [&](int i) { silu_mul(&gate_[(size_t)i * F], &up_[(size_t)i * F], F); });
        mb::matmul(f.down.expert(e), gate_.data(), ye_.data(), n, pool_, &mm_scratch_);  // ye [n, D]
        for (int i = 0; i < n; i++)
          std::memcpy(res + (size_t)members_[i] * D, &ye_[(size_t)i * D], (size_t)D * 4);
        continue;
      }
      constexpr float kAlpha = 1.702f, kLimit = 7.0f;
      mb::matmul(f.up.expert(e), xe_.data(), up_.data(), n, pool_, &mm_scratch_);      // up [n, F]
      mb::matmul(f.gate.expert(e), xe_.data(), gate_.data(), n, pool_, &mm_scratch_);  // gate [n, F]
      const float* bu = f.up_b + (size_t)e * F;
      const float* bg = f.gate_b + (size_t)e * F;
      par_for(n, [&](int i) {
        float* g = &gate_[(size_t)i * F];
        const float* u = &up_[(size_t)i * F];
        for (int j = 0; j < F; j++) {
          const float x = std::min(g[j] + bg[j], kLimit);
          const float y = std::clamp(u[j] + bu[j], -kLimit, kLimit);
          g[j] = x / (1.f + std::exp(kAlpha * (-x))) * (y + 1.f);
        }
      });
      mb::matmul(f.down.expert(e), gate_.data(), ye_.data(), n, pool_, &mm_scratch_);  // ye [n, D]
      const float* bd = f.down_b + (size_t)e * D;
      for (int i = 0; i < n; i++) {
        float* o = res + (size_t)members_[i] * D;
        const float* y = &ye_[(size_t)i * D];
        for (int d = 0; d < D; d++) o[d] = y[d] + bd[d];
      }
    }
    return ran;
  }

  // each expert's output scaled, then summed in rank order, as ggml's mul + add chain does
  void weighted_sum(float* y, const float* res, const float* w, int Ek, int n, int T) override {
    par_for(T, [&](int t) {
      float* yr = y + (size_t)t * n;
      for (int k = 0; k < Ek; k++) {
        const float wk = w[(size_t)t * Ek + k];
        const float* r = res + ((size_t)t * Ek + k) * n;
        if (k == 0)
          for (int d = 0; d < n; d++) yr[d] = r[d] * wk;
        else
          for (int d = 0; d < n; d++) yr[d] += r[d] * wk;
      }
    });
  }

  void move_rows(float* buf, size_t width, const int* rows, int n) override {
    for (int i = 0; i < n; i++)
      if (rows[i] != i) std::copy_n(buf + (size_t)rows[i] * width, width, buf + (size_t)i * width);
  }

 private:
  struct Item {
    int t0, n, g;   // rows [t0, t0 + n), KV head g
    double cost;    // ~ query rows x keys, for largest-first scheduling
  };

  // Runs fn(i) for i in [0, n) over the pool, strided so neighbouring items land on different threads.
  template <class Fn>
  void par_for(int n, const Fn& fn) {
    const int nth = pool_ ? pool_->size() : 1;
    if (nth <= 1 || n <= 1) {
      for (int i = 0; i < n; i++) fn(i);
      return;
    }
    pool_->run([&](int ith, int nt) {
      for (int i = ith; i < n; i += nt) fn(i);
    });
  }

  void attend(const KvBuf& kv, int il, const float* q0, float* out0, int H, const AttnArgs& a, const Item& it,
              float* scratch, uint16_t* gather) {
    const int Dh = kv.Dh, G = H / kv.Hk;
    const size_t HD = (size_t)H * Dh;
    const int s = rows_.slot[it.t0], p0 = rows_.pos[it.t0];
    const size_t qo = (size_t)it.t0 * HD + (size_t)it.g * G * Dh;  // first head of the group
    const float* sinks = a.sinks ? a.sinks + (size_t)it.g * G : nullptr;
    const size_t off = kv.index(il, s, it.g, 0);
    if (!kv.ring) {
      mb::attention(q0 + qo, HD, &kv.k[off], &kv.v[off], out0 + qo, HD, it.n, G, Dh, p0, a.scale, a.window, sinks,
                    scratch);
      return;
    }
    // One windowed call over keys [base, p0 + n) in position order, base the first row's window
    // start rounded down to kAttentionKeyAlign: the kernel then blocks the keys as it would the
    // whole context, so a row's bits do not depend on where its chunk or item began. Positions
    // in [base, lo0) are masked; the ring may have reused their cells (anything finite will do).
    // In place unless the span wraps around the ring's end.
    const int R = kv.N;
    const int lo0 = std::max(0, p0 - a.window + 1);
    const int base = lo0 / kAttentionKeyAlign * kAttentionKeyAlign, len = p0 + it.n - base;
    const uint16_t* ring_k = &kv.k[off];  // [R][Dh]
    const uint16_t* ring_v = &kv.v[off];  // [R][Dh]
    const uint16_t* k = ring_k + (size_t)(base % R) * Dh;
    const uint16_t* v = ring_v + (size_t)(base % R) * Dh;
    if (base % R + len > R) {
      uint16_t* gk = gather;                                             // [len][Dh]
      uint16_t* gv = gather + (size_t)(R + kAttentionKeyAlign) * Dh;     // [len][Dh]
      for (int x = 0; x < len;) {
        const int r = (base + x) % R, m = std::min(len - x, R - r);
        std::memcpy(gk + (size_t)x * Dh, ring_k + (size_t)r * Dh, (size_t)m * Dh * 2);
        std::memcpy(gv + (size_t)x * Dh, ring_v + (size_t)r * Dh, (size_t)m * Dh * 2);
        x += m;
      }
      k = gk;
      v = gv;
    }
    mb::attention(q0 + qo, HD, k, v, out0 + qo, HD, it.n, G, Dh, p0 - base, a.scale, a.window, sinks, scratch);
  }

  ThreadPool* pool_;
  int Tm_;
  Chunk rows_;                              // the current rows (host arrays of the batch)
  std::deque<std::vector<float>> f32_;      // activations and placed vectors, stable addresses
  std::deque<std::vector<float>> vec_;
  std::deque<std::vector<int32_t>> i32_;
  std::deque<std::vector<uint16_t>> f16_;   // K/V buffers
  MatmulScratch mm_scratch_;                // quantized activations of the current matmul

  std::vector<Item> items_;                 // [<= Tm * Hk] this chunk's attention items
  size_t scratch_n_ = 0;                    // floats of attention scratch per thread (~Bq*G*(N + 16*Dh))
  std::vector<float> scratch_;              // [P][scratch_n_]
  size_t gather_n_ = 0;                     // f16 values per thread for a wrapped ring window's K and V
  std::vector<uint16_t> gather_;            // [P][2][R + kAttentionKeyAlign][Dh]

  // MoE only (empty for dense models): one expert's share of a chunk.
  std::vector<int> members_;                // [Tm] (t * Ek + k) routed to the current expert
  std::vector<float> xe_;                   // [Tm, D] their inputs, gathered
  std::vector<float> ye_;                   // [Tm, D] the expert's outputs
  std::vector<float> gate_, up_;            // [Tm, F]
};

}  // namespace

std::unique_ptr<Backend> cpu_backend(ThreadPool* pool, int max_rows) {
  return std::make_unique<CpuBackend>(pool, max_rows);
}

}  // namespace model_detail
}  // namespace mb
