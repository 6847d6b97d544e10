// Kernel tests: reference dequantizers against gguf-py vectors (if generated), every reference dot
// against a double-precision dot of the dequantized operands, every fast kernel against its
// reference, and matmul (all tables, 1 and 2 threads, T in {1,3,8,33}) against a naive f32 GEMM.
//
// usage: test_kernels [VECTOR_DIR]   (VECTOR_DIR from tests/make_vectors.py; skipped if absent)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "certify.h"
#include "check_counted.h"
#include "dispatch.h"
#include "ref/ref.h"
#include "util/threadpool.h"

using namespace mb;
using namespace mb::kq;

static std::mt19937 rng(42);
static float urand(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }

static const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                                        GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                        GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4};

static const char* tname(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "F32"; case GgmlType::F16: return "F16"; case GgmlType::BF16: return "BF16";
    case GgmlType::Q4_0: return "Q4_0"; case GgmlType::Q4_1: return "Q4_1"; case GgmlType::Q5_0: return "Q5_0";
    case GgmlType::Q5_1: return "Q5_1"; case GgmlType::Q8_0: return "Q8_0"; case GgmlType::Q8_1: return "Q8_1";
    case GgmlType::Q4_K: return "Q4_K"; case GgmlType::Q5_K: return "Q5_K"; case GgmlType::Q6_K: return "Q6_K";
    case GgmlType::Q8_K: return "Q8_K"; case GgmlType::MXFP4: return "MXFP4"; default: return "?";
  }
}

// Random rows of a weight type: random payload bytes, sane scale fields (as a quantizer would
// write), so every bit of the layout is exercised.
static std::vector<uint8_t> random_rows(GgmlType t, int64_t rows, int64_t k) {
  const size_t rb = ggml_row_bytes(t, k);
  std::vector<uint8_t> v(rb * rows);
  for (auto& b : v) b = (uint8_t)(rng() & 0xff);
  const size_t bb = block_bytes(t);
  const size_t nb = v.size() / bb;
  auto put = [&](size_t off, float f) { half h = f2h(f); std::memcpy(&v[off], &h, 2); };
  for (size_t i = 0; i < nb; i++) {
    const size_t o = i * bb;
    switch (t) {
      case GgmlType::F32: { float f = urand(-1, 1); std::memcpy(&v[o], &f, 4); break; }
      case GgmlType::F16: put(o, urand(-1, 1)); break;
      case GgmlType::BF16: { bf16 h = f2bf(urand(-1, 1)); std::memcpy(&v[o], &h, 2); break; }
      case GgmlType::Q4_0: case GgmlType::Q5_0: put(o, urand(-0.05f, 0.05f)); break;
      case GgmlType::Q8_0: {
        put(o, urand(-0.01f, 0.01f));
        for (int j = 0; j < 32; j++) if (v[o + 2 + j] == 0x80) v[o + 2 + j] = 0x81;  // ggml never writes -128
        break;
      }
      case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K:
        put(o, urand(0.001f, 0.05f)); put(o + 2, urand(-0.3f, 0.3f)); break;
      case GgmlType::Q6_K: put(o + bb - 2, urand(-0.01f, 0.01f)); break;
      case GgmlType::MXFP4: v[o] = (uint8_t)(118 + rng() % 8); break;  // scales 2^-10 .. 2^-3
      default: break;
    }
  }
  return v;
}

static std::vector<float> random_floats(size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  std::normal_distribution<float> nd(0.0f, scale);
  for (auto& f : v) f = nd(rng);
  // a few outliers, as real activations have
  for (size_t i = 0; i < n / 97; i++) v[rng() % n] *= 20.0f;
  return v;
}

// ---------------------------------------------------------------------------------------------

static void test_half_conversions() {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    const float f = h2f((half)h);
    if (std::isnan(f)) continue;
    if (f2h(f) != h) bad++;
  }
  CHECK(bad == 0, "f16 round trip: %d values differ", bad);
  // rounding: the nearest half, ties to even
  CHECK(f2h(1.0f + 1.0f / 2048) == 0x3c00, "tie rounds to even (down)");
  CHECK(f2h(1.0f + 3.0f / 2048) == 0x3c02, "tie rounds to even (up)");
  CHECK(f2h(65520.0f) == 0x7c00 && f2h(65519.0f) == 0x7bff, "overflow boundary");
  CHECK(f2h(2.9802322e-8f) == 0x0000 && f2h(2.9802326e-8f) == 0x0001, "smallest subnormal rounding");
  CHECK(f2bf(1.0f + 1.0f / 256) == 0x3f80 && f2bf(1.0f + 3.0f / 256) == 0x3f82, "bf16 ties to even");
}

// Dequantizers and the q8_0 quantizer against gguf-py.
static void test_vectors(const std::string& dir) {
  static const GgmlType types[] = {GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                   GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                   GgmlType::MXFP4};
  int found = 0;
  for (GgmlType t : types) {
    std::string path = dir + "/" + tname(t) + ".bin";
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) continue;
    found++;
    uint32_t hdr[4];
    bool ok = std::fread(hdr, 4, 4, f) == 4;
    const uint32_t rows = hdr[1], k = hdr[2];
    CHECK(ok && hdr[0] == (uint32_t)t, "%s: bad header", path.c_str());
    std::vector<float> src(hdr[3] ? (size_t)rows * k : 0), deq((size_t)rows * k), mine((size_t)rows * k);
    std::vector<uint8_t> blocks(ggml_row_bytes(t, k) * rows);
    ok = ok && std::fread(src.data(), 4, src.size(), f) == src.size();
    ok = ok && std::fread(blocks.data(), 1, blocks.size(), f) == blocks.size();
    ok = ok && std::fread(deq.data(), 4, deq.size(), f) == deq.size();
    std::fclose(f);
    CHECK(ok, "%s: truncated", path.c_str());
    if (!ok) continue;
    for (uint32_t r = 0; r < rows; r++) {
      QMatrix W{t, (int64_t)k, (int64_t)rows, blocks.data()};
      dequantize_row(W, r, mine.data() + (size_t)r * k);
    }
    float amax = 0;
    for (float v : deq) amax = std::fmax(amax, std::fabs(v));
    int bad = 0;
    for (size_t i = 0; i < deq.size(); i++)
      if (!(std::fabs(mine[i] - deq[i]) <= 1e-6f * amax)) bad++;
    CHECK(bad == 0, "%s dequantize vs gguf-py: %d of %zu differ (tol 1e-6*max|x|)", tname(t), bad, deq.size());
    if (t == GgmlType::Q8_0 && !src.empty()) {
      // gguf-py's quantizer is ggml's reference one: our q8_0 activation quantizer must match bytes
      std::vector<uint8_t> q(blocks.size());
      for (uint32_t r = 0; r < rows; r++)
        ref::quantize_q8_0(src.data() + (size_t)r * k, q.data() + r * ggml_row_bytes(t, k), k);
      CHECK(q == blocks, "q8_0 quantizer bytes differ from gguf-py");
    }
  }
  if (found) std::printf("gguf-py vectors: %d types checked from %s\n", found, dir.c_str());
  else std::printf("SKIPPED: no gguf-py vectors in %s (run tests/make_vectors.py)\n", dir.c_str());
}

// exact value of the dot as the formula defines it, in double, from dequantized operands
static double exact_dot(GgmlType wt, const uint8_t* w, const uint8_t* x, int64_t k, double* mag) {
  const GgmlType vt = vec_dot_type(wt);
  std::vector<float> a(k), b(k);
  ref::dequantize(wt, w, a.data(), k);
  ref::dequantize(vt, x, b.data(), k);
  double s = 0, m = 0;
  for (int64_t i = 0; i < k; i++) { s += (double)a[i] * b[i]; m += std::fabs((double)a[i] * b[i]); }
  if (vt == GgmlType::Q8_1) {
    // q8_1 carries s = fp16(d*sum q); the dot uses it for the weight's min term, so use it here too
    auto xb = (const block_q8_1*)x;
    const size_t wbb = block_bytes(wt);
    for (int64_t i = 0; i < k / QK; i++) {
      half mh; std::memcpy(&mh, w + i * wbb + 2, 2);
      int sum = 0;
      for (int j = 0; j < QK; j++) sum += xb[i].qs[j];
      s += (double)h2f(mh) * ((double)h2f(xb[i].s) - (double)h2f(xb[i].d) * sum);
    }
  }
  *mag = m;
  return s;
}

static void test_ref_dots() {
  for (GgmlType t : kWeightTypes) {
    for (int64_t k : {256, 512, 1536}) {
      auto w = random_rows(t, 1, k);
      auto xf = random_floats(k);
      std::vector<uint8_t> xq(ggml_row_bytes(vec_dot_type(t), k));
      quantize_row_for(ref_table(), t, xf.data(), xq.data(), k);
      double mag;
      const double want = exact_dot(t, w.data(), xq.data(), k, &mag);
      const float got = ref_table().dot[type_slot(t)](k, w.data(), xq.data());
      CHECK(std::fabs(got - want) <= 1e-5 * mag + 1e-6, "ref dot %s k=%lld: %g vs exact %g (mag %g)", tname(t),
            (long long)k, got, want, mag);
    }
  }
}

static void test_ref_quantizers() {
  const int64_t k = 1024;
  auto x = random_floats(k, 0.7f);
  std::vector<float> back(k);
  {
    std::vector<block_q8_0> q(k / QK);
    ref::quantize_q8_0(x.data(), q.data(), k);
    ref::dequantize(GgmlType::Q8_0, q.data(), back.data(), k);
    int bad = 0;
    for (int64_t i = 0; i < k; i++) {
      const float step = h2f(q[i / QK].d);
      // half a step, plus 127 * the f16 rounding of d (2^-11 relative)
      if (!(std::fabs(back[i] - x[i]) <= 0.57f * step + 1e-7f)) bad++;
    }
    CHECK(bad == 0, "q8_0 round trip: %d beyond half a step", bad);
  }
  {
    std::vector<block_q8_1> q(k / QK);
    ref::quantize_q8_1(x.data(), q.data(), k);
    int bad = 0;
    for (auto& b : q) {
      int sum = 0;
      for (int j = 0; j < QK; j++) sum += b.qs[j];
      if (b.s != f2h(sum * h2f(b.d))) {
        // s is computed from the f32 d before rounding d to f16; allow that one rounding
        if (std::fabs(h2f(b.s) - sum * h2f(b.d)) > std::fabs(sum * h2f(b.d)) * 2e-3f + 1e-6f) bad++;
      }
    }
    CHECK(bad == 0, "q8_1 sum term wrong in %d blocks", bad);
  }
  {
    std::vector<block_q8_K> q(k / QK_K);
    ref::quantize_q8_K(x.data(), q.data(), k);
    ref::dequantize(GgmlType::Q8_K, q.data(), back.data(), k);
    int bad = 0;
    for (int64_t i = 0; i < k; i++)
      if (!(std::fabs(back[i] - x[i]) <= 0.5f * std::fabs(q[i / QK_K].d) * 1.001f + 1e-7f)) bad++;
    for (auto& b : q)
      for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += b.qs[g * 16 + l];
        if (s != b.bsums[g]) bad++;
      }
    CHECK(bad == 0, "q8_K round trip / bsums: %d bad", bad);
  }
}

// fast table vs ref table on the same inputs
static void test_fast_vs_ref(const KernelTable& ft) {
  const KernelTable& rt = ref_table();
  // quantizers: the AVX2 ones round like ggml's x86 code (ties to even, scale 127/amax), the
  // reference like ggml's scalar code (ties away, 1/d): at most one step apart per element
  for (int64_t k : {256, 2048}) {
    auto x = random_floats(k, 0.5f);
    for (GgmlType vt : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K}) {
      const size_t n = ggml_row_bytes(vt, k);
      std::vector<uint8_t> a(n), b(n);
      QuantizeFn qa = vt == GgmlType::Q8_0 ? ft.quantize_q8_0 : vt == GgmlType::Q8_1 ? ft.quantize_q8_1 : ft.quantize_q8_K;
      QuantizeFn qb = vt == GgmlType::Q8_0 ? rt.quantize_q8_0 : vt == GgmlType::Q8_1 ? rt.quantize_q8_1 : rt.quantize_q8_K;
      qa(x.data(), a.data(), k);
      qb(x.data(), b.data(), k);
      if (vt == GgmlType::Q8_K) {
        CHECK(a == b, "%s quantize_q8_K differs from ref (must be bit-identical)", ft.name);
        continue;
      }
      std::vector<float> da(k), db(k);
      ref::dequantize(vt, a.data(), da.data(), k);
      ref::dequantize(vt, b.data(), db.data(), k);
      int bad = 0;
      for (int64_t i = 0; i < k; i++) {
        half hd;
        std::memcpy(&hd, b.data() + (i / QK) * block_bytes(vt), 2);
        const float step = h2f(hd);
        if (!(std::fabs(da[i] - db[i]) <= step * 1.01f)) bad++;
      }
      CHECK(bad == 0, "%s quantize %s: %d elements more than one step from ref", ft.name, tname(vt), bad);
      if (vt == GgmlType::Q8_1) {
        int sbad = 0;
        for (int64_t i = 0; i < k / QK; i++) {
          auto& blk = ((const block_q8_1*)a.data())[i];
          int sum = 0;
          for (int j = 0; j < QK; j++) sum += blk.qs[j];
          if (std::fabs(h2f(blk.s) - sum * h2f(blk.d)) > std::fabs(sum * h2f(blk.d)) * 2e-3f + 1e-6f) sbad++;
        }
        CHECK(sbad == 0, "%s q8_1 sum term wrong in %d blocks", ft.name, sbad);
      }
    }
    // f16/bf16 conversion must be exact
    std::vector<uint16_t> a(k), b(k);
    ft.to_f16(x.data(), a.data(), k); rt.to_f16(x.data(), b.data(), k);
    CHECK(a == b, "%s to_f16 differs", ft.name);
    ft.to_bf16(x.data(), a.data(), k); rt.to_bf16(x.data(), b.data(), k);
    CHECK(a == b, "%s to_bf16 differs", ft.name);
  }
  // dots: same quantized operands; only the float summation order may differ
  for (GgmlType t : kWeightTypes) {
    for (int64_t k : {256, 768, 1536}) {
      for (int rep = 0; rep < 4; rep++) {
        auto w = random_rows(t, 1, k);
        auto xf = random_floats(k);
        std::vector<uint8_t> xq(ggml_row_bytes(vec_dot_type(t), k));
        quantize_row_for(rt, t, xf.data(), xq.data(), k);
        double mag;
        exact_dot(t, w.data(), xq.data(), k, &mag);
        const float want = rt.dot[type_slot(t)](k, w.data(), xq.data());
        const float got = ft.dot[type_slot(t)](k, w.data(), xq.data());
        CHECK(std::fabs(got - want) <= 1e-5 * mag + 1e-6, "%s dot %s k=%lld: %.9g vs ref %.9g (mag %g)", ft.name,
              tname(t), (long long)k, got, want, mag);
      }
    }
  }
  // tiles must agree bit for bit with the row dot, so a token's result never depends on batch shape
  for (GgmlType t : kWeightTypes) {
    const int s = type_slot(t);
    if (!ft.tile[s]) continue;
    const int64_t k = 512;
    auto w = random_rows(t, 4, k);
    const size_t wrb = ggml_row_bytes(t, k), xrb = ggml_row_bytes(vec_dot_type(t), k);
    std::vector<uint8_t> xq(4 * xrb);
    auto xf = random_floats(4 * k);
    for (int i = 0; i < 4; i++) quantize_row_for(ft, t, xf.data() + i * k, xq.data() + i * xrb, k);
    for (int nr = 1; nr <= 4; nr++)
      for (int nt = 1; nt <= 4; nt++) {
        float y[16];
        for (float& v : y) v = NAN;
        ft.tile[s](k, w.data(), wrb, nr, xq.data(), xrb, nt, y, 4);
        int bad = 0;
        for (int t2 = 0; t2 < nt; t2++)
          for (int r = 0; r < nr; r++) {
            const float d = ft.dot[s](k, w.data() + r * wrb, xq.data() + t2 * xrb);
            if (!(y[t2 * 4 + r] == d)) bad++;
          }
        CHECK(bad == 0, "%s tile %s %dx%d: %d results differ from the row dot", ft.name, tname(t), nr, nt, bad);
      }
  }
  // elementwise ops
  for (int n : {7, 64, 576, 1537}) {
    auto x = random_floats(n), w = random_floats(n), u = random_floats(n);
    std::vector<float> a(n), b(n);
    ft.rmsnorm(a.data(), x.data(), w.data(), n, 1e-5f);
    rt.rmsnorm(b.data(), x.data(), w.data(), n, 1e-5f);
    int bad = 0;
    for (int i = 0; i < n; i++) if (!(std::fabs(a[i] - b[i]) <= 1e-5f * std::fabs(b[i]) + 1e-7f)) bad++;
    CHECK(bad == 0, "%s rmsnorm n=%d: %d differ (tol 1e-5 rel)", ft.name, n, bad);
    a = x; b = x;
    ft.softmax(a.data(), n);
    rt.softmax(b.data(), n);
    bad = 0;
    for (int i = 0; i < n; i++) if (!(std::fabs(a[i] - b[i]) <= 1e-5f * b[i] + 1e-9f)) bad++;
    CHECK(bad == 0, "%s softmax n=%d: %d differ (tol 1e-5 rel)", ft.name, n, bad);
    a = x; b = x;
    ft.silu_mul(a.data(), u.data(), n);
    rt.silu_mul(b.data(), u.data(), n);
    bad = 0;
    for (int i = 0; i < n; i++) if (!(std::fabs(a[i] - b[i]) <= 1e-5f * std::fabs(b[i]) + 1e-7f)) bad++;
    CHECK(bad == 0, "%s silu_mul n=%d: %d differ (tol 1e-5 rel)", ft.name, n, bad);
  }
}

// matmul against a naive f32 GEMM of the dequantized weights with the unquantized activations.
// Tolerance: the activation quantization error bound, sum_k |w_k| * step_k / 2, plus float slack.
static void test_matmul(const KernelTable& kt, ThreadPool* pool1, ThreadPool* pool2) {
  const int64_t K = 512, N = 37;  // N not a multiple of the 4-row strip
  for (GgmlType t : kWeightTypes) {
    auto w = random_rows(t, N, K);
    QMatrix W{t, K, N, w.data()};
    std::vector<float> wf(N * K);
    for (int64_t r = 0; r < N; r++) dequantize_row(W, r, wf.data() + r * K);
    for (int T : {1, 3, 5, 8, 12, 16, 33}) {
      auto x = random_floats((size_t)T * K);
      std::vector<float> y1((size_t)T * N, NAN), y2((size_t)T * N, NAN);
      matmul_with(kt, W, x.data(), y1.data(), T, pool1);
      matmul_with(kt, W, x.data(), y2.data(), T, pool2);
      CHECK(y1 == y2, "%s matmul %s T=%d: 1 and 2 threads differ", kt.name, tname(t), T);
      int bad = 0;
      double worst = 0;
      for (int tt = 0; tt < T; tt++) {
        const float* xr = x.data() + (size_t)tt * K;
        // per-element quantization step of this activation row for W's partner type
        std::vector<float> step(K);
        const GgmlType vt = vec_dot_type(t);
        const int be = vt == GgmlType::Q8_K ? QK_K : QK;
        for (int64_t i = 0; i < K; i++) {
          if (vt == GgmlType::F32) step[i] = 0;
          else if (vt == GgmlType::F16) step[i] = std::fabs(xr[i]) * (1.0f / 1024);
          else if (vt == GgmlType::BF16) step[i] = std::fabs(xr[i]) * (1.0f / 128);
          else {
            if (i % be == 0) {
              float amax = 0;
              for (int j = 0; j < be; j++) amax = std::fmax(amax, std::fabs(xr[i + j]));
              for (int j = 0; j < be; j++) step[i + j] = amax / 127.0f * 1.01f;
            }
          }
        }
        for (int64_t r = 0; r < N; r++) {
          double want = 0, bound = 0, mag = 0;
          for (int64_t i = 0; i < K; i++) {
            want += (double)wf[r * K + i] * xr[i];
            bound += std::fabs(wf[r * K + i]) * step[i] * 0.5;
            mag += std::fabs((double)wf[r * K + i] * xr[i]);
          }
          // q8_1's s is rounded to f16: the min term adds |m| * |s| * 2^-11 per block
          if (vec_dot_type(t) == GgmlType::Q8_1) bound += mag * 1e-3;
          const double err = std::fabs(y1[(size_t)tt * N + r] - want);
          if (!(err <= bound + 1e-5 * mag + 1e-6)) bad++;
          if (bound > 0) worst = std::fmax(worst, err / bound);
        }
      }
      CHECK(bad == 0, "%s matmul %s T=%d: %d of %d outputs outside the quantization bound", kt.name, tname(t), T, bad,
            (int)(T * N));
      // rows of a batch must equal the same token computed alone (batch-shape independence)
      if (T > 1) {
        std::vector<float> y_one(N);
        const int tt = T - 1;
        matmul_with(kt, W, x.data() + (size_t)tt * K, y_one.data(), 1, pool2);
        CHECK(std::memcmp(y_one.data(), y1.data() + (size_t)tt * N, N * 4) == 0,
              "%s matmul %s: token %d of T=%d differs from T=1", kt.name, tname(t), tt, T);
      }
    }
  }
}

// A weight too big for the driver's L2 token blocking (> 1 MB per thread): that path must give
// the same bits as computing each token alone.
static void test_matmul_big(const KernelTable& kt) {
  const int64_t K = 512, N = 2200;  // Q8_0: 1.2 MB
  auto w = random_rows(GgmlType::Q8_0, N, K);
  QMatrix W{GgmlType::Q8_0, K, N, w.data()};
  const int T = 11;
  auto x = random_floats((size_t)T * K);
  std::vector<float> y((size_t)T * N), y1(N);
  matmul_with(kt, W, x.data(), y.data(), T, nullptr);
  int bad = 0;
  for (int t = 0; t < T; t++) {
    matmul_with(kt, W, x.data() + (size_t)t * K, y1.data(), 1, nullptr);
    if (std::memcmp(y1.data(), y.data() + (size_t)t * N, N * 4) != 0) bad++;
  }
  CHECK(bad == 0, "%s big matmul: %d of %d tokens differ from T=1", kt.name, bad, T);
}

static void test_rope() {
  // rope must rotate pairs: norms of each pair are preserved, position 0 is the identity, and
  // neox pairs i with i + rope_dim/2 while normal pairs 2i with 2i+1
  const int H = 3, Dh = 64;
  auto x = random_floats(H * Dh);
  for (bool neox : {false, true}) {
    auto y = x;
    rope(y.data(), H, Dh, Dh, 0, 10000.f, neox);
    CHECK(y == x, "rope at pos 0 must be the identity (neox=%d)", neox);
    y = x;
    rope(y.data(), H, Dh, 32, 17, 100000.f, neox);
    int bad = 0;
    for (int h = 0; h < H; h++)
      for (int i = 0; i < 16; i++) {
        const int a = h * Dh + (neox ? i : 2 * i), b = h * Dh + (neox ? i + 16 : 2 * i + 1);
        const float n0 = x[a] * x[a] + x[b] * x[b], n1 = y[a] * y[a] + y[b] * y[b];
        if (std::fabs(n0 - n1) > 1e-4f * n0 + 1e-6f) bad++;
        // first pair angle is exactly pos
        if (i == 0) {
          const float c = std::cos(17.f), s = std::sin(17.f);
          if (std::fabs(y[a] - (x[a] * c - x[b] * s)) > 1e-5f || std::fabs(y[b] - (x[a] * s + x[b] * c)) > 1e-5f) bad++;
        }
      }
    for (int h = 0; h < H; h++)
      for (int i = 32; i < Dh; i++) if (y[h * Dh + i] != x[h * Dh + i]) bad++;  // beyond rope_dim untouched
    CHECK(bad == 0, "rope neox=%d: %d bad", neox, bad);
  }
  // LongRoPE factors divide each pair's angle: factor 2 everywhere at position 34 is position 17
  // (halving and doubling are exact), factors of 1 change nothing, and attn_factor scales the
  // rotated dims only
  for (bool neox : {false, true}) {
    const std::vector<float> two(16, 2.f), one(16, 1.f);
    auto y = x, z = x, w = x;
    rope(y.data(), H, Dh, 32, 34, 10000.f, neox, two.data());
    rope(z.data(), H, Dh, 32, 17, 10000.f, neox);
    CHECK(y == z, "rope with factors of 2 at pos 34 must equal pos 17 (neox=%d)", neox);
    y = x;
    rope(y.data(), H, Dh, 32, 17, 10000.f, neox, one.data());
    CHECK(y == z, "rope with factors of 1 must equal no factors (neox=%d)", neox);
    rope(w.data(), H, Dh, 32, 0, 10000.f, neox, nullptr, 1.5f);
    int bad = 0;
    for (int h = 0; h < H; h++)
      for (int i = 0; i < Dh; i++) {
        const bool rotated = i < 32;  // both layouts rotate dims [0, 32)
        if (w[h * Dh + i] != (rotated ? x[h * Dh + i] * 1.5f : x[h * Dh + i])) bad++;
      }
    CHECK(bad == 0, "rope attn_factor must scale the rotated dims only (neox=%d): %d bad", neox, bad);
  }
}

// A token gives the same bits in a batch of any size as computed alone, for every type of the
// table: through the 4-token groups (2 to 159 tokens: full groups, a short last group, steps of one
// to kGemm8MaxGroups groups), the K-quants' tiles (a few tokens) and groups of up to 16, Gemm16
// past them, odd row counts, any thread count.
static void test_batch_bits(const KernelTable& vt, ThreadPool* pool) {
  int with_gemm8 = 0, with_gemm4 = 0;
  for (GgmlType t : kWeightTypes) {
    if (!vt.dot[type_slot(t)]) continue;
    if (vt.gemm8[type_slot(t)].run) with_gemm8++;
    if (vt.gemm4[type_slot(t)].run) with_gemm4++;
    const bool kquant = vec_dot_type(t) == GgmlType::Q8_K;
    for (int64_t K : {kquant ? 256 : 64, kquant ? 1536 : 576}) {
      const int64_t N = 45;
      auto w = random_rows(t, N, K);
      QMatrix W{t, K, N, w.data()};
      for (int T : {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 19, 24, 28, 36, 64, 67, 159, 160, 171}) {
        auto x = random_floats((size_t)T * K, 3.0f);
        std::vector<float> yv((size_t)T * N, NAN), ya((size_t)T * N, NAN);
        MatmulScratch sc;
        matmul_with(vt, W, x.data(), yv.data(), T, pool, &sc);
        for (int i = 0; i < T; i++) matmul_with(vt, W, x.data() + (size_t)i * K, ya.data() + (size_t)i * N, 1, pool);
        CHECK(std::memcmp(yv.data(), ya.data(), yv.size() * 4) == 0, "%s %s K=%d T=%d: bits differ from one token at a time",
              vt.name, tname(t), (int)K, T);
      }
    }
  }
  CHECK(with_gemm8 == 6, "%s: expected Gemm8 kernels for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, found %d", vt.name,
        with_gemm8);
  CHECK(with_gemm4 == 8, "%s: expected token group kernels for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, Q4_K, Q6_K, found %d",
        vt.name, with_gemm4);
}

// The K-quants' token groups, called directly: every row count of a strip (1 .. 4) and every token
// count a group takes (1 .. group: the driver's from .. below - 1 and the rest, so a change of the
// range stays covered), the bits of the table's dot for every pair and nothing stored past nr rows
// or nt tokens. The dot is held to ref/ by
// test_fast_vs_ref, so this is also the groups' parity with the scalar reference.
static void test_gemm4_bits(const KernelTable& vt) {
  int tested = 0;
  for (GgmlType t : kWeightTypes) {
    const int slot = type_slot(t);
    const Gemm8& g = vt.gemm4[slot];
    if (!g.run || !g.group) continue;  // the legacy types' groups of 4: test_batch_bits
    tested++;
    for (int64_t K : {256, 1280}) {
      const int nrows = 4;
      auto w = random_rows(t, nrows, K);
      const size_t wrb = ggml_row_bytes(t, K), xrb = ggml_row_bytes(vec_dot_type(t), K);
      CHECK(g.below - 1 <= g.group, "%s %s: the driver would give a group %d tokens, it takes %d", vt.name, tname(t),
            g.below - 1, g.group);
      const int T = g.group;
      auto xf = random_floats((size_t)T * K, 2.0f);
      std::vector<uint8_t> xq((size_t)T * xrb), packed(g.packed_bytes(K));
      for (int i = 0; i < T; i++) quantize_row_for(vt, t, xf.data() + (size_t)i * K, xq.data() + i * xrb, K);
      for (int nt = 1; nt <= g.group; nt++) {
        g.pack(xq.data(), xrb, nt, K, packed.data());
        for (int nr = 1; nr <= nrows; nr++) {
          const size_t ldy = nrows + 1;
          std::vector<float> y((size_t)(g.group + 1) * ldy, NAN);
          g.run(K, w.data(), wrb, nr, packed.data(), nt, y.data(), ldy);
          int bad = 0, stray = 0;
          for (int i = 0; i <= g.group; i++)
            for (int r = 0; r < (int)ldy; r++) {
              const float v = y[(size_t)i * ldy + r];
              if (r >= nr || i >= nt) {
                if (!std::isnan(v)) stray++;
                continue;
              }
              if (!(v == vt.dot[slot](K, w.data() + r * wrb, xq.data() + i * xrb))) bad++;
            }
          CHECK(bad == 0 && stray == 0, "%s groups %s K=%d nr=%d nt=%d: %d differ from the dot, %d stores past nr/nt",
                vt.name, tname(t), (int)K, nr, nt, bad, stray);
        }
      }
    }
  }
  CHECK(tested == 2, "%s: expected token group kernels for Q4_K and Q6_K, found %d", vt.name, tested);
}

// The 16-row GEMM, called directly: every row count of a block (1 .. 16) and token count (1 .. 19,
// so every split of the 8-token passes), the bits of the table's dot for every pair; and the
// driver reaches it (T >= 16) with the same bits as one token at a time (test_batch_bits covers
// the driver for T up to 67).
static void test_gemm16_bits(const KernelTable& vt) {
  int tested = 0;
  for (GgmlType t : kWeightTypes) {
    const int slot = type_slot(t);
    const Gemm16& g = vt.gemm16[slot];
    if (!g.run) continue;
    tested++;
    for (int64_t K : {256, 1280, 96}) {
      if (K % block_elems(t)) continue;
      auto w = random_rows(t, kGemm16Rows, K);
      const size_t wrb = ggml_row_bytes(t, K), xrb = ggml_row_bytes(vec_dot_type(t), K);
      const int T = 19;
      auto xf = random_floats((size_t)T * K, 2.0f);
      std::vector<uint8_t> xq((size_t)T * xrb);
      for (int i = 0; i < T; i++) quantize_row_for(vt, t, xf.data() + (size_t)i * K, xq.data() + i * xrb, K);
      const size_t auxb = g.prepare ? g.aux_bytes(K) : 0;
      std::vector<uint8_t> aux((size_t)T * auxb + 1);
      if (g.prepare)
        for (int i = 0; i < T; i++) g.prepare(xq.data() + i * xrb, K, aux.data() + i * auxb);
      std::vector<uint8_t> room(g.unpacked_bytes(K) + 64);
      uint8_t* u = room.data() + ((64 - ((uintptr_t)room.data() & 63)) & 63);
      for (int nr : {1, 5, 15, 16}) {
        g.unpack(K, w.data(), wrb, nr, u);
        for (int nt = 1; nt <= T; nt++) {
          std::vector<float> y((size_t)nt * kGemm16Rows, NAN);
          g.run(K, u, nr, xq.data(), xrb, aux.data(), auxb, nt, y.data(), kGemm16Rows);
          int bad = 0, stray = 0;
          for (int i = 0; i < nt; i++)
            for (int r = 0; r < kGemm16Rows; r++) {
              const float v = y[(size_t)i * kGemm16Rows + r];
              if (r >= nr) {
                if (!std::isnan(v)) stray++;
                continue;
              }
              if (!(v == vt.dot[slot](K, w.data() + r * wrb, xq.data() + i * xrb))) bad++;
            }
          CHECK(bad == 0 && stray == 0, "%s gemm16 %s K=%d nr=%d nt=%d: %d differ from the dot, %d stores past nr",
                vt.name, tname(t), (int)K, nr, nt, bad, stray);
        }
      }
    }
  }
  CHECK(tested == 5, "%s: expected Gemm16 kernels for Q4_0, Q5_0, Q8_0, Q4_K and Q6_K, found %d", vt.name, tested);
}

// The K-quants the Q4_K_M files hold have tiled kernels (decode streams 4 rows at once).
static void test_kquant_tiles(const KernelTable& ft) {
  CHECK(ft.tile[S_Q4_K] && ft.tile[S_Q5_K] && ft.tile[S_Q6_K], "%s: Q4_K, Q5_K and Q6_K need tile kernels", ft.name);
}

// The start-up gate passes every set this CPU runs, and fails a table with one wrong kernel,
// naming it (the production gate and this test share certify(); no hook in the server).
static float q4_0_dot_off_by_one_percent(int64_t k, const void* w, const void* x) {
  return 1.01f * ref::dot_q4_0(k, w, x);
}
static void scale_twice(float* out, const float* x, const float* w, int n, float eps) {
  ref::rmsnorm(out, x, w, n, eps);
  for (int i = 0; i < n; i++) out[i] *= 2;
}
static void test_certify() {
  std::vector<std::vector<uint8_t>> rows;
  std::vector<QMatrix> samples;
  for (GgmlType t : kWeightTypes) {
    rows.push_back(random_rows(t, 8, 512));
    samples.push_back({t, 512, 8, rows.back().data()});
  }
  std::vector<const KernelTable*> sets = {&ref_table(), &active_table()};
  if (avx2_table()) sets.push_back(avx2_table());
  if (avx512_table()) sets.push_back(avx512_table());
  for (const KernelTable* kt : sets) {
    const Certification c = certify(*kt, samples);
    CHECK(c.passed && c.summary() == "passed", "certify %s: %s", kt->name, c.summary().c_str());
  }
  KernelTable wrong = active_table();
  wrong.dot[S_Q4_0] = q4_0_dot_off_by_one_percent;
  wrong.tile[S_Q4_0] = nullptr;  // so the driver reaches the wrong dot for every token count
  wrong.gemm8[S_Q4_0] = {};
  wrong.gemm16[S_Q4_0] = {};
  const Certification c = certify(wrong, samples);
  CHECK(!c.passed && c.summary().rfind("failed: ", 0) == 0 && c.failures.find("Q4_0") != std::string::npos,
        "certify with a wrong q4_0 dot: %s", c.summary().c_str());
  // a model without q4_0 weights never runs that dot: the gate is per tensor type
  std::vector<QMatrix> no_q4_0;
  for (const QMatrix& m : samples) if (m.type != GgmlType::Q4_0) no_q4_0.push_back(m);
  CHECK(certify(wrong, no_q4_0).passed, "certify without q4_0 samples: %s", certify(wrong, no_q4_0).summary().c_str());
  KernelTable wrong_norm = active_table();
  wrong_norm.rmsnorm = scale_twice;
  const Certification cn = certify(wrong_norm, {});
  CHECK(!cn.passed && cn.failures.find("rmsnorm") != std::string::npos, "certify with a wrong rmsnorm: %s",
        cn.summary().c_str());
}

// matmul_n: the same bits as one matmul per matrix, fused (one token, one partner type: Q5_0 and
// Q8_0 both take q8_0) or not (several tokens; partner types that differ: Q4_K takes q8_K), on 1
// and 2 threads, with row counts not a multiple of the 4-row strip.
static void test_matmul_n(const KernelTable& kt, ThreadPool* pool) {
  const int64_t K = 512;
  const GgmlType sets[][3] = {{GgmlType::Q5_0, GgmlType::Q5_0, GgmlType::Q8_0},
                              {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_K},
                              {GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q8_0}};
  const int64_t rows[3] = {61, 6, 130};
  for (const auto& types : sets)
    for (int T : {1, 3}) {
      std::vector<std::vector<uint8_t>> w(3);
      QMatrix W[3];
      const QMatrix* Wp[3];
      std::vector<float> want[3], got[3];
      float* y[3];
      auto x = random_floats((size_t)T * K);
      for (int m = 0; m < 3; m++) {
        w[m] = random_rows(types[m], rows[m], K);
        W[m] = QMatrix{types[m], K, rows[m], w[m].data()};
        Wp[m] = &W[m];
        want[m].assign((size_t)T * rows[m], NAN);
        got[m].assign((size_t)T * rows[m], NAN);
        y[m] = got[m].data();
        matmul_with(kt, W[m], x.data(), want[m].data(), T, nullptr);
      }
      matmul_n_with(kt, Wp, 3, x.data(), y, T, pool);
      for (int m = 0; m < 3; m++)
        CHECK(std::memcmp(want[m].data(), got[m].data(), want[m].size() * 4) == 0,
              "%s matmul_n %s/%s/%s T=%d threads %d: matrix %d differs from matmul", kt.name, tname(types[0]),
              tname(types[1]), tname(types[2]), T, pool->size(), m);
    }
}
int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "kernel_vectors";
  std::printf("active kernel table: %s\n", active_table().name);
  test_half_conversions();
  test_vectors(dir);
  test_ref_quantizers();
  test_ref_dots();
  test_rope();
  test_certify();
  ThreadPool p1(1), p2(2);
  test_matmul(ref_table(), &p1, &p2);
  test_matmul_n(ref_table(), &p2);
  // avx2_table() is null unless compiled in and supported by this CPU
  if (const KernelTable* a = avx2_table()) {
    test_fast_vs_ref(*a);
    test_kquant_tiles(*a);
    test_matmul(*a, &p1, &p2);
    test_matmul_big(*a);
    test_matmul_n(*a, &p1);
    test_matmul_n(*a, &p2);
  } else {
    std::printf("SKIPPED: no AVX2/FMA/F16C kernels on this build or CPU\n");
  }
  if (const KernelTable* v = avx512_table()) {
    test_fast_vs_ref(*v);
    test_matmul(*v, &p1, &p2);
    test_matmul_big(*v);
    test_matmul_n(*v, &p1);
    test_matmul_n(*v, &p2);
    test_batch_bits(*v, &p2);
    test_batch_bits(*v, &p1);
    test_gemm16_bits(*v);
    test_gemm4_bits(*v);
  } else {
    std::printf("SKIPPED: no AVX-512 VNNI kernels on this build or CPU\n");
  }
  // the public entry points route to the picked table
  {
    CHECK(std::string(kernels_backend()) == active_table().name, "kernels_backend() says %s", kernels_backend());
    const int64_t K = 256, N = 9;
    auto w = random_rows(GgmlType::Q4_1, N, K);
    QMatrix W{GgmlType::Q4_1, K, N, w.data()};
    auto x = random_floats(3 * K);
    std::vector<float> a(3 * N), b(3 * N);
    ThreadPool p2(2);
    matmul(W, x.data(), a.data(), 3, &p2);
    matmul_with(active_table(), W, x.data(), b.data(), 3, nullptr);
    CHECK(a == b, "mb::matmul differs from the active table's matmul");
    auto g = random_floats(100), u = random_floats(100), g2 = g;
    silu_mul(g.data(), u.data(), 100);
    active_table().silu_mul(g2.data(), u.data(), 100);
    CHECK(g == g2, "mb::silu_mul routes elsewhere");
    bool threw = false;
    try {
      QMatrix bad{GgmlType::Q4_1, 100, 1, w.data()};  // K not a multiple of 32
      matmul(bad, x.data(), a.data(), 1, nullptr);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    CHECK(threw, "matmul must reject K that is not a block multiple");
  }
  // the pool: many tiny jobs, every thread runs each exactly once
  {
    ThreadPool p(2);
    std::vector<int> hits(2, 0);
    for (int i = 0; i < 2000; i++) p.run([&](int ith, int nth) { if (nth == 2) hits[ith]++; });
    CHECK(hits[0] == 2000 && hits[1] == 2000, "thread pool ran %d/%d", hits[0], hits[1]);
  }
  std::printf("%d checks, %d failed\n", g_checks, g_fail);
  return g_fail ? 1 : 0;
}
