#include "certify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "kernels.h"
#include "ref/ref.h"

namespace mb {
namespace kq {
namespace {

// Weight-row samples: at most kRows rows of each matrix (the tile and 8-token GEMM take 4 rows at
// a time, so two groups); kTokens activations, more than one 8-token group so every path runs (the
// K-quants' token groups among them), kTokensFew, few enough for the K-quants' tiles with several
// tokens, and kTokens16, enough for the driver to take the 16-row GEMM.
constexpr int64_t kRows = 8;
constexpr int kTokensFew = 3;
constexpr int kTokens = 9;
constexpr int kTokens16 = 17;

struct Gate {
  Certification c;
  std::mt19937 rng{20251201};  // fixed: the gate's inputs are the same on every start
  void fail(const char* what) {
    if (!c.passed) c.failures += "; ";
    c.passed = false;
    c.failures += what;
  }
  std::vector<float> floats(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& f : v) f = d(rng);
    return v;
  }
};

// Each output of kt's GEMM against ref's, within a share of sum |w_i x_i| (the activations are
// quantized to the weight's partner type, so a last-bit difference in the quantizer moves a sum
// by about one quantization step of one element).
void certify_matmul(Gate& g, const KernelTable& kt, const QMatrix& sample) {
  if (type_slot(sample.type) < 0 || sample.K <= 0 || sample.N <= 0) return;
  const QMatrix W{sample.type, sample.K, std::min(sample.N, kRows), sample.data};
  const size_t rb = ggml_row_bytes(W.type, W.K);
  std::vector<float> wf(size_t(W.N * W.K));  // [N][K] dequantized weights
  for (int64_t r = 0; r < W.N; r++) ref::dequantize(W.type, W.data + r * rb, wf.data() + r * W.K, W.K);
  for (int T : {1, kTokensFew, kTokens, kTokens16}) {
    auto x = g.floats(size_t(T * W.K), -1.0f, 1.0f);  // [T][K]
    std::vector<float> want(size_t(T * W.N)), got(size_t(T * W.N));  // [T][N]
    try {
      matmul_with(ref_table(), W, x.data(), want.data(), T, nullptr);
      matmul_with(kt, W, x.data(), got.data(), T, nullptr);
    } catch (const std::exception& e) {
      char msg[256];
      std::snprintf(msg, sizeof msg, "%s matmul %s: %s", kt.name, ggml_type_name(W.type), e.what());
      g.fail(msg);
      return;
    }
    for (int t = 0; t < T; t++) {
      for (int64_t r = 0; r < W.N; r++) {
        double mag = 0;
        for (int64_t i = 0; i < W.K; i++) mag += std::fabs(double(wf[r * W.K + i]) * x[t * W.K + i]);
        const float a = got[t * W.N + r], b = want[t * W.N + r];
        if (!(std::fabs(double(a) - b) <= 1e-3 * mag + 1e-5)) {
          char msg[256];
          std::snprintf(msg, sizeof msg, "%s matmul %s (%d tokens, K=%lld): %.6g vs ref %.6g", kt.name,
                        ggml_type_name(W.type), T, (long long)W.K, a, b);
          g.fail(msg);
          return;
        }
      }
    }
  }
}

bool close_rel(const std::vector<float>& a, const std::vector<float>& b, double rel) {
  for (size_t i = 0; i < a.size(); i++)
    if (!(std::fabs(double(a[i]) - b[i]) <= rel * std::fabs(double(b[i])) + 1e-6)) return false;
  return true;
}

void certify_elementwise(Gate& g, const KernelTable& kt) {
  const KernelTable& rt = ref_table();
  const int n = 1000;  // not a multiple of any vector width: the tails run too
  char msg[128];
  {
    auto x = g.floats(n, -2, 2), w = g.floats(n, -1, 1);
    std::vector<float> a(n), b(n);
    kt.rmsnorm(a.data(), x.data(), w.data(), n, 1e-6f);
    rt.rmsnorm(b.data(), x.data(), w.data(), n, 1e-6f);
    if (!close_rel(a, b, 1e-4)) { std::snprintf(msg, sizeof msg, "%s rmsnorm", kt.name); g.fail(msg); }
  }
  {
    auto a = g.floats(n, -8, 8);
    auto b = a;
    kt.softmax(a.data(), n);
    rt.softmax(b.data(), n);
    if (!close_rel(a, b, 1e-4)) { std::snprintf(msg, sizeof msg, "%s softmax", kt.name); g.fail(msg); }
  }
  {
    auto a = g.floats(n, -6, 6), up = g.floats(n, -2, 2);
    auto b = a;
    kt.silu_mul(a.data(), up.data(), n);
    rt.silu_mul(b.data(), up.data(), n);
    if (!close_rel(a, b, 1e-4)) { std::snprintf(msg, sizeof msg, "%s silu_mul", kt.name); g.fail(msg); }
  }
  {
    auto a = g.floats(n, -12, 12), up = g.floats(n, -2, 2);  // both clamps and the f16 table
    auto b = a;
    kt.gelu_mul(a.data(), up.data(), n);
    rt.gelu_mul(b.data(), up.data(), n);
    if (a != b) { std::snprintf(msg, sizeof msg, "%s gelu_mul", kt.name); g.fail(msg); }
  }
  {
    auto x = g.floats(n, -70000, 70000);  // past f16's range: the overflow rounding too
    std::vector<uint16_t> a(n), b(n);
    kt.to_f16(x.data(), a.data(), n);
    rt.to_f16(x.data(), b.data(), n);
    if (a != b) { std::snprintf(msg, sizeof msg, "%s to_f16", kt.name); g.fail(msg); }
  }
}

// Attention of n positions (after p0 cached ones) of G heads against one KV head. ref rounds the
// probabilities to f16 and a flash kernel does not, so the bound is a few f16 steps of max |v|.
void certify_attention(Gate& g, const KernelTable& kt) {
  const int n = 3, G = 2, Dh = 64, p0 = 37, N = p0 + n, R = n * G;
  auto q = g.floats(size_t(R * Dh), -1, 1);
  auto kf = g.floats(size_t(N * Dh), -1, 1), vf = g.floats(size_t(N * Dh), -1, 1);
  std::vector<uint16_t> k(kf.size()), v(vf.size());
  ref_table().to_f16(kf.data(), k.data(), int64_t(kf.size()));
  ref_table().to_f16(vf.data(), v.data(), int64_t(vf.size()));
  const float scale = 1.0f / std::sqrt(float(Dh));
  std::vector<float> want(size_t(R * Dh)), got(size_t(R * Dh));
  std::vector<float> s1(ref_table().attention_scratch(R, Dh, N)), s2(kt.attention_scratch(R, Dh, N));
  ref_table().attention(q.data(), size_t(G * Dh), k.data(), v.data(), want.data(), size_t(G * Dh), n, G, Dh, p0,
                        scale, 0, nullptr, s1.data());
  kt.attention(q.data(), size_t(G * Dh), k.data(), v.data(), got.data(), size_t(G * Dh), n, G, Dh, p0, scale, 0,
               nullptr, s2.data());
  for (size_t i = 0; i < got.size(); i++) {
    if (!(std::fabs(got[i] - want[i]) <= 2e-3f)) {
      char msg[128];
      std::snprintf(msg, sizeof msg, "%s attention: %.6g vs ref %.6g", kt.name, got[i], want[i]);
      g.fail(msg);
      return;
    }
  }
}

}  // namespace

Certification certify(const KernelTable& kt, const std::vector<QMatrix>& samples) {
  Gate g;
  for (const QMatrix& s : samples) certify_matmul(g, kt, s);
  certify_elementwise(g, kt);
  certify_attention(g, kt);
  return g.c;
}

}  // namespace kq

std::string certify_kernels(const std::vector<QMatrix>& weight_samples) {
  return kq::certify(kq::active_table(), weight_samples).summary();
}

}  // namespace mb
