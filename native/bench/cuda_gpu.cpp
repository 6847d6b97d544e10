// The CUDA harness's device half (built with -DMB_CUDA=ON): kernel parity against scalar
// references, a qwen3 forward pass on the CUDA kernels checked against the CPU backend over
// teacher-forced steps, and prefill / decode benchmarks. Prints one JSON line.
//
// Dimension legend: T rows in a step (<= Tm), D n_embd, H heads, Hk KV heads, Dh head dim, F n_ff,
// V n_vocab, L layers, S slots, C context per slot, K/N a matrix's reduction/output dims.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_harness.h"
#include "bench/cuda_model.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ref/ref.h"
#include "model/model.h"
#include "util/threadpool.h"

namespace mb {
namespace bench {
namespace {

constexpr double kH200Bandwidth = 4.8e12;  // bytes/s, the datasheet figure the goal is stated against

// A device buffer of n Ts.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  Dev() = default;
  explicit Dev(size_t count) : p((T*)cuda::dev_alloc(count * sizeof(T))), n(count) {}
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev(Dev&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  Dev& operator=(Dev&& o) noexcept { std::swap(p, o.p); std::swap(n, o.n); return *this; }
  ~Dev() { if (p) cudaFree(p); }
  void put(const std::vector<T>& h, cudaStream_t s) { cuda::upload(p, h.data(), h.size() * sizeof(T), s); }
  std::vector<T> get(size_t count, cudaStream_t s) const {
    std::vector<T> h(count);
    cuda::download(h.data(), p, count * sizeof(T), s);
    cuda::sync(s);
    return h;
  }
};

struct Checks {
  int failed = 0;
  std::string list = "[";
  void add(const std::string& name, bool ok, double err) {
    char b[64];
    std::snprintf(b, sizeof b, "%.3g", err);
    list += (list.size() > 1 ? "," : "") + std::string("{\"name\":") + json_quote(name) + ",\"ok\":" +
            (ok ? "true" : "false") + ",\"err\":" + (std::isfinite(err) ? b : "null") + "}";
    std::fprintf(stderr, "%s %-40s err %s\n", ok ? "ok  " : "FAIL", name.c_str(), b);
    if (!ok) failed++;
  }
};

std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t s = seed;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = ((float)(s >> 40) / 16777216.f * 2.f - 1.f) * scale;
  }
  return v;
}

// ---- kernel parity ----

void check_matmuls(Checks& c, cudaStream_t st) {
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                            GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
  for (GgmlType t : types) {
    const ModelShape s = shape_preset("qwen3-tiny", t);
    const auto img = make_random_gguf(s, 11, 0);
    std::unique_ptr<GgufFile> f(GgufFile::parse(img.data(), img.size()));
    const GgufTensor* w = f->tensor("blk.0.ffn_up.weight");  // K = D, N = F
    const int64_t K = w->ne[0], N = w->ne[1];
    Dev<uint8_t> dw(w->n_bytes);
    cuda::upload(dw.p, w->data, w->n_bytes, st);
    const QMatrix W{t, K, N, dw.p};
    std::vector<float> wf((size_t)K * N);
    for (int64_t n = 0; n < N; n++) kq::ref::dequantize(t, w->data + n * ggml_row_bytes(t, K), &wf[n * K], K);
    for (int T : {1, 2, 3, 8, 70}) {
      const auto x = random_floats((size_t)T * K, 5 + T, 1.f);
      Dev<float> dx(x.size()), dy((size_t)T * N);
      dx.put(x, st);
      if (T <= cuda::kMatvecMaxT) cuda::matvec(W, dx.p, dy.p, T, st);
      else cuda::gemm_f16(W, dx.p, dy.p, T, st);
      const auto y = dy.get((size_t)T * N, st);
      double worst = 0;
      for (int tt = 0; tt < T; tt++)
        for (int64_t n = 0; n < N; n++) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; k++) {
            ref += (double)wf[n * K + k] * x[tt * K + k];
            mag += std::fabs((double)wf[n * K + k] * x[tt * K + k]);
          }
          worst = std::max(worst, std::fabs(y[tt * N + n] - ref) / (mag + 1e-20));
        }
      // f32 sums: ~1e-6 of sum |w x|; the f16 GEMM rounds both operands: ~1e-3
      const double tol = T <= cuda::kMatvecMaxT ? 1e-5 : 2e-3;
      c.add(std::string(T <= cuda::kMatvecMaxT ? "matvec " : "gemm_f16 ") + ggml_type_name(t) + " T=" +
                std::to_string(T),
            worst <= tol, worst);
    }
    {
      // ffn_down (K = 512, N = 256): few output tiles, so gemm_f16 splits K and adds the parts
      const GgufTensor* wd = f->tensor("blk.0.ffn_down.weight");
      const int64_t Kd = wd->ne[0], Nd = wd->ne[1];
      Dev<uint8_t> dwd(wd->n_bytes);
      cuda::upload(dwd.p, wd->data, wd->n_bytes, st);
      std::vector<float> wdf((size_t)Kd * Nd);
      for (int64_t n = 0; n < Nd; n++) kq::ref::dequantize(t, wd->data + n * ggml_row_bytes(t, Kd), &wdf[n * Kd], Kd);
      const int T = 40;
      const auto x = random_floats((size_t)T * Kd, 41, 1.f);
      Dev<float> dx(x.size()), dy((size_t)T * Nd);
      dx.put(x, st);
      cuda::gemm_f16(QMatrix{t, Kd, Nd, dwd.p}, dx.p, dy.p, T, st);
      const auto y = dy.get((size_t)T * Nd, st);
      double worst = 0;
      for (int tt = 0; tt < T; tt++)
        for (int64_t n = 0; n < Nd; n++) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < Kd; k++) {
            ref += (double)wdf[n * Kd + k] * x[tt * Kd + k];
            mag += std::fabs((double)wdf[n * Kd + k] * x[tt * Kd + k]);
          }
          worst = std::max(worst, std::fabs(y[tt * Nd + n] - ref) / (mag + 1e-20));
        }
      c.add(std::string("gemm_f16 split-K ") + ggml_type_name(t) + " T=40", worst <= 2e-3, worst);
    }
    {
      // W as E = 4 experts of N / 4 rows; 3 tokens, 2 experts each
      const int E = 4, Ek = 2, Tt = 3, P = Tt * Ek;
      const int64_t Ne = N / E;
      const size_t eb = (size_t)Ne * ggml_row_bytes(t, K);
      std::vector<int32_t> sel{2, 0, 1, 3, 3, 2};
      const auto x = random_floats((size_t)Tt * K, 77, 1.f);
      Dev<float> dx(x.size()), dy((size_t)P * Ne);
      Dev<int32_t> dsel(sel.size());
      dx.put(x, st);
      dsel.put(sel, st);
      const QMatrix We{t, K, Ne, dw.p};
      cuda::matvec_experts(We, eb, dx.p, dsel.p, P, Ek, dy.p, st);
      const auto y = dy.get((size_t)P * Ne, st);
      double worst = 0;
      for (int p = 0; p < P; p++)
        for (int64_t n = 0; n < Ne; n++) {
          double ref = 0, mag = 0;
          const float* wr = &wf[((size_t)sel[p] * Ne + n) * K];
          for (int64_t k = 0; k < K; k++) {
            ref += (double)wr[k] * x[(p / Ek) * K + k];
            mag += std::fabs((double)wr[k] * x[(p / Ek) * K + k]);
          }
          worst = std::max(worst, std::fabs(y[p * Ne + n] - ref) / (mag + 1e-20));
        }
      c.add(std::string("matvec_experts ") + ggml_type_name(t), worst <= 1e-5, worst);
    }
    if (cuda::cublas_supported(t)) {
      const int T = 70;
      const auto x = random_floats((size_t)T * K, 99, 1.f);
      Dev<float> dx(x.size()), dy((size_t)T * N);
      Dev<uint16_t> x16(x.size());
      dx.put(x, st);
      cuda::CublasHandle h(st);
      cuda::gemm_cublas(h, W, dx.p, x16.p, dy.p, T, st);
      const auto y = dy.get((size_t)T * N, st);
      double worst = 0;
      for (int tt = 0; tt < T; tt++)
        for (int64_t n = 0; n < N; n++) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; k++) {
            ref += (double)wf[n * K + k] * x[tt * K + k];
            mag += std::fabs((double)wf[n * K + k] * x[tt * K + k]);
          }
          worst = std::max(worst, std::fabs(y[tt * N + n] - ref) / (mag + 1e-20));
        }
      c.add(std::string("gemm_cublas ") + ggml_type_name(t) + " T=70", worst <= 1e-2, worst);
    }
    // embedding rows
    std::vector<int32_t> rows{0, 7, (int32_t)N - 1};
    Dev<int32_t> dr(rows.size());
    dr.put(rows, st);
    Dev<float> dout(rows.size() * K);
    cuda::get_rows(W, dr.p, (int)rows.size(), dout.p, st);
    const auto got = dout.get(rows.size() * K, st);
    // relative to the row's largest value: the device may fuse d * q - m into one FMA, which
    // moves a value that cancels to near zero by an ulp of the terms, not of the result
    double worst = 0;
    for (size_t i = 0; i < rows.size(); i++) {
      double big = 1e-30, err = 0;
      for (int64_t k = 0; k < K; k++) {
        big = std::max(big, (double)std::fabs(wf[rows[i] * K + k]));
        err = std::max(err, (double)std::fabs(got[i * K + k] - wf[rows[i] * K + k]));
      }
      worst = std::max(worst, err / big);
    }
    c.add(std::string("get_rows ") + ggml_type_name(t), worst <= 1e-6, worst);
  }
}

void check_elementwise(Checks& c, cudaStream_t st) {
  const int R = 37, n = 128;
  const auto x = random_floats((size_t)R * n, 1, 2.f), w = random_floats(n, 2, 1.f);
  Dev<float> dx(x.size()), dw(w.size()), dy(x.size());
  dx.put(x, st);
  dw.put(w, st);
  cuda::rmsnorm_rows(dy.p, dx.p, dw.p, R, n, 1e-6f, st);
  auto y = dy.get(x.size(), st);
  double worst = 0;
  std::vector<float> ref(n);
  for (int r = 0; r < R; r++) {
    mb::rmsnorm(ref.data(), &x[r * n], w.data(), n, 1e-6f);
    for (int i = 0; i < n; i++) worst = std::max(worst, (double)std::fabs(ref[i] - y[r * n + i]) / (std::fabs(ref[i]) + 1e-3));
  }
  c.add("rmsnorm_rows", worst <= 1e-5, worst);

  for (bool neox : {true, false}) {
    const int T = 5, Hh = 3, Dh = 64;
    const auto q = random_floats((size_t)T * Hh * Dh, 3, 1.f);
    std::vector<int32_t> pos{0, 1, 17, 255, 300};
    Dev<float> dq(q.size());
    Dev<int32_t> dp(pos.size());
    dq.put(q, st);
    dp.put(pos, st);
    cuda::rope(dq.p, dp.p, T, Hh, Dh, Dh, 1e6f, neox, st);
    const auto got = dq.get(q.size(), st);
    auto want = q;
    for (int t = 0; t < T; t++) mb::rope(&want[(size_t)t * Hh * Dh], Hh, Dh, Dh, pos[t], 1e6f, neox);
    worst = 0;
    for (size_t i = 0; i < q.size(); i++) worst = std::max(worst, (double)std::fabs(got[i] - want[i]));
    // the CPU builds the angles by repeated multiplication, the GPU with exp2f: at position 300
    // they part by ~1e-5 rad; a wrong pairing or frequency is off by O(1)
    c.add(neox ? "rope neox" : "rope adjacent", worst <= 1e-3, worst);
  }

  const auto g = random_floats(1000, 4, 6.f), u = random_floats(1000, 5, 2.f);
  Dev<float> dg(g.size()), du(u.size());
  dg.put(g, st);
  du.put(u, st);
  cuda::silu_mul(dg.p, du.p, (int64_t)g.size(), st);
  auto got = dg.get(g.size(), st);
  auto want = g;
  mb::silu_mul(want.data(), u.data(), (int)g.size());
  worst = 0;
  for (size_t i = 0; i < g.size(); i++) worst = std::max(worst, (double)std::fabs(got[i] - want[i]) / (std::fabs(want[i]) + 1e-3));
  c.add("silu_mul", worst <= 1e-5, worst);
}

void check_attention(Checks& c, cudaStream_t st) {
  for (int Dh : {64, 128}) {
    const int S = 2, Hk = 2, G = 4, H = Hk * G, C = 700;
    const float scale = 1.f / std::sqrt((float)Dh);
    // rows: a prefill run of slot 0 (positions 0..5) and decode rows deep into slot 1
    std::vector<int32_t> slot{0, 0, 0, 0, 0, 0, 1, 1}, pos{0, 1, 2, 3, 4, 5, 650, 699};
    const int T = (int)slot.size();
    std::vector<uint16_t> kc((size_t)S * Hk * C * Dh), vc(kc.size());
    const auto kf = random_floats(kc.size(), 7, 1.f), vf = random_floats(vc.size(), 8, 1.f);
    for (size_t i = 0; i < kc.size(); i++) {
      kc[i] = kq::f2h(kf[i]);
      vc[i] = kq::f2h(vf[i]);
    }
    const auto q = random_floats((size_t)T * H * Dh, 9, 3.f);
    Dev<uint16_t> dk(kc.size()), dv(vc.size());
    dk.put(kc, st);
    dv.put(vc, st);
    Dev<float> dq(q.size()), dout(q.size());
    Dev<int32_t> ds(slot.size()), dp(pos.size());
    dq.put(q, st);
    ds.put(slot, st);
    dp.put(pos, st);
    const cuda::KvLayer kv{dk.p, dv.p, S, Hk, C, Dh};
    // exact softmax in double over the f16 cache
    std::vector<double> want(q.size());
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++) {
        const int g = h / G, nk = pos[t] + 1;
        const size_t base = ((size_t)slot[t] * Hk + g) * C * Dh;
        std::vector<double> sc(nk);
        double mx = -1e300;
        for (int j = 0; j < nk; j++) {
          double d = 0;
          for (int e = 0; e < Dh; e++) d += (double)q[((size_t)t * H + h) * Dh + e] * kq::h2f(kc[base + (size_t)j * Dh + e]);
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int j = 0; j < nk; j++) sum += (sc[j] = std::exp(sc[j] - mx));
        for (int e = 0; e < Dh; e++) {
          double a = 0;
          for (int j = 0; j < nk; j++) a += sc[j] * kq::h2f(vc[base + (size_t)j * Dh + e]);
          want[((size_t)t * H + h) * Dh + e] = a / sum;
        }
      }
    for (int mode = 0; mode < 2; mode++) {
      Dev<float> part(cuda::attention_decode_scratch_floats(T, H, Dh, 700, 128));
      if (mode == 0) cuda::attention_prefill(kv, dq.p, dout.p, ds.p, dp.p, T, H, scale, st);
      else cuda::attention_decode(kv, dq.p, dout.p, ds.p, dp.p, T, H, scale, 700, 128, part.p, st);
      const auto got = dout.get(q.size(), st);
      double worst = 0;
      for (size_t i = 0; i < got.size(); i++) worst = std::max(worst, std::fabs(got[i] - want[i]));
      c.add(std::string(mode == 0 ? "attention_prefill" : "attention_decode") + " Dh=" + std::to_string(Dh),
            worst <= 1e-4, worst);
    }
  }
}

void check_routing_and_sampling(Checks& c, cudaStream_t st) {
  const int T = 9, E = 64, Ek = 8;
  auto l = random_floats((size_t)T * E, 12, 4.f);
  l[3] = l[5];  // a tie
  Dev<float> dl(l.size()), dw((size_t)T * Ek);
  Dev<int32_t> dsel((size_t)T * Ek);
  dl.put(l, st);
  cuda::moe_route(dl.p, T, E, Ek, dsel.p, dw.p, st);
  const auto sel = dsel.get((size_t)T * Ek, st);
  const auto w = dw.get((size_t)T * Ek, st);
  bool same = true;
  double worst = 0;
  for (int t = 0; t < T; t++) {
    std::vector<float> p(l.begin() + t * E, l.begin() + (t + 1) * E);
    mb::softmax(p.data(), E);
    std::vector<int> taken;
    float sum = 0;
    std::vector<float> ww;
    for (int k = 0; k < Ek; k++) {  // Transformer::route_top_k's selection
      int best = -1;
      for (int e = 0; e < E; e++)
        if (std::find(taken.begin(), taken.end(), e) == taken.end() && (best < 0 || p[e] > p[best])) best = e;
      taken.push_back(best);
      ww.push_back(p[best]);
      sum += p[best];
    }
    for (int k = 0; k < Ek; k++) {
      same &= sel[t * Ek + k] == taken[k];
      worst = std::max(worst, (double)std::fabs(w[t * Ek + k] - ww[k] / sum));
    }
  }
  c.add("moe_route", same && worst <= 1e-5, worst);

  const int R = 16, V = 151936;
  const auto logits = random_floats((size_t)R * V, 13, 8.f);
  std::vector<float> u(R);
  for (int r = 0; r < R; r++) u[r] = (float)r / R + 0.01f;
  Dev<float> dlog(logits.size()), du(u.size());
  Dev<int32_t> dtok(R);
  dlog.put(logits, st);
  du.put(u, st);
  for (float temp : {0.f, 0.8f}) {
    cuda::sample(dlog.p, R, V, 40, 0.95f, temp, du.p, dtok.p, st);
    const auto tok = dtok.get(R, st);
    int mismatches = 0;
    for (int r = 0; r < R; r++) mismatches += tok[r] != sample_ref(&logits[(size_t)r * V], V, 40, 0.95f, temp, u[r]);
    c.add(temp == 0.f ? "sample greedy" : "sample top-k/top-p", mismatches == 0, mismatches);
  }
}

// ---- the model on the GPU ----

struct GpuQwen3 {
  ModelConfig cfg;
  int L, D, H, Hk, Dh, F, V, S, C, Tm;
  Dev<uint8_t> image;  // the GGUF's bytes, weights used in place
  struct Layer { QMatrix wq, wk, wv, wo, wg, wu, wd; const float *attn_norm, *q_norm, *k_norm, *ffn_norm; };
  std::vector<Layer> layers;
  QMatrix tok_embd, output;
  const float* out_norm;
  std::vector<Dev<uint16_t>> kc, vc;  // [L] of [S][Hk][C][Dh] f16
  Dev<float> x;        // [Tm, D] residual stream
  Dev<float> xn;       // [Tm, D] normed input of a sublayer
  Dev<float> q;        // [Tm, H*Dh]
  Dev<float> k, v;     // [Tm, Hk*Dh]
  Dev<float> att;      // [Tm, H*Dh] attention output before wo
  Dev<float> y;        // [Tm, D] sublayer output before the residual add
  Dev<float> gate, up; // [Tm, F]
  Dev<float> last;     // [<= S, D] normed rows whose logits are wanted
  Dev<float> logits;   // [S, V]
  Dev<float> part;     // split-K attention partials, attention_decode_scratch_floats(S, H, Dh, C)
  Dev<int32_t> tok, pos, slot;  // [Tm] this step's rows
  Dev<int32_t> ids;    // [Tm] sampled tokens
  Dev<float> u;        // [Tm] uniform draws for sampling
  cudaStream_t st;
  size_t weight_bytes = 0;
  std::unique_ptr<cuda::CublasHandle> blas;  // F16/BF16 weights, batched rows
  Dev<uint16_t> x16;                         // [Tm, max K] activations rounded for cuBLAS

  // y[T, N] = x[T, K] · W^T: matvec for few rows, cuBLAS for F16/BF16 weights, else the WMMA GEMM.
  void mm(const QMatrix& W, const float* xin, float* yout, int T) {
    if (T > cuda::kMatvecMaxT && blas && cuda::cublas_supported(W.type)) cuda::gemm_cublas(*blas, W, xin, x16.p, yout, T, st);
    else cuda::matmul(W, xin, yout, T, st);
  }

  GpuQwen3(const GgufFile& f, const uint8_t* img, size_t img_size, int S_, int C_, int Tm_, cudaStream_t s)
      : S(S_), C(C_), Tm(Tm_), st(s) {
    auto gi = [&](const std::string& key) { return (int)f.get_int("qwen3." + key); };
    L = gi("block_count");
    D = gi("embedding_length");
    H = gi("attention.head_count");
    Hk = gi("attention.head_count_kv");
    Dh = gi("attention.key_length");
    F = gi("feed_forward_length");
    cfg.rms_eps = (float)f.get_float("qwen3.attention.layer_norm_rms_epsilon", 1e-6);
    cfg.rope_freq_base = (float)f.get_float("qwen3.rope.freq_base", 10000.0);
    image = Dev<uint8_t>(img_size);
    cuda::upload(image.p, img, img_size, st);
    auto dev = [&](const GgufTensor* t) { return image.p + (t->data - img); };
    auto mat = [&](const std::string& n) {
      const GgufTensor* t = f.tensor(n);
      if (!t) throw std::runtime_error("missing tensor " + n);
      weight_bytes += t->n_bytes;
      return QMatrix{t->type, t->ne[0], t->ne[1], dev(t)};
    };
    auto vec = [&](const std::string& n) { return (const float*)dev(f.tensor(n)); };
    tok_embd = mat("token_embd.weight");
    V = (int)tok_embd.N;
    weight_bytes -= f.tensor("token_embd.weight")->n_bytes;  // a step reads one row of it
    output = f.tensor("output.weight") ? mat("output.weight") : tok_embd;
    out_norm = vec("output_norm.weight");
    for (int il = 0; il < L; il++) {
      const std::string p = "blk." + std::to_string(il) + ".";
      layers.push_back({mat(p + "attn_q.weight"), mat(p + "attn_k.weight"), mat(p + "attn_v.weight"),
                        mat(p + "attn_output.weight"), mat(p + "ffn_gate.weight"), mat(p + "ffn_up.weight"),
                        mat(p + "ffn_down.weight"), vec(p + "attn_norm.weight"), vec(p + "attn_q_norm.weight"),
                        vec(p + "attn_k_norm.weight"), vec(p + "ffn_norm.weight")});
    }
    for (int il = 0; il < L; il++) {
      kc.emplace_back((size_t)S * Hk * C * Dh);
      vc.emplace_back((size_t)S * Hk * C * Dh);
      cuda::check((int)cudaMemsetAsync(kc.back().p, 0, kc.back().n * 2, st), "cudaMemsetAsync");
      cuda::check((int)cudaMemsetAsync(vc.back().p, 0, vc.back().n * 2, st), "cudaMemsetAsync");
    }
    const size_t T = (size_t)Tm;
    x = Dev<float>(T * D); xn = Dev<float>(T * D); y = Dev<float>(T * D); last = Dev<float>(T * D);
    q = Dev<float>(T * H * Dh); att = Dev<float>(T * H * Dh);
    k = Dev<float>(T * Hk * Dh); v = Dev<float>(T * Hk * Dh);
    gate = Dev<float>(T * F); up = Dev<float>(T * F);
    logits = Dev<float>((size_t)std::max(S, 1) * V);
    part = Dev<float>(cuda::attention_decode_scratch_floats(S, H, Dh, C, kKvChunk));
    tok = Dev<int32_t>(T); pos = Dev<int32_t>(T); slot = Dev<int32_t>(T); ids = Dev<int32_t>(T);
    u = Dev<float>(T);
    blas = std::make_unique<cuda::CublasHandle>(st);
    x16 = Dev<uint16_t>(T * (size_t)std::max(D, std::max(F, H * Dh)));
  }
  static constexpr int kKvChunk = 256;

  // One step of T rows (tokens, positions, slots already on the device). Decode steps (one row per
  // slot) take the split-K attention; logits of the last `n_out` rows go to logits[n_out, V].
  void step(int T, int max_keys, bool decode, int n_out) {
    cuda::get_rows(tok_embd, tok.p, T, x.p, st);
    const float scale = 1.f / std::sqrt((float)Dh);
    for (int il = 0; il < L; il++) {
      const Layer& l = layers[il];
      cuda::rmsnorm_rows(xn.p, x.p, l.attn_norm, T, D, cfg.rms_eps, st);
      mm(l.wq, xn.p, q.p, T);
      mm(l.wk, xn.p, k.p, T);
      mm(l.wv, xn.p, v.p, T);
      cuda::rmsnorm_rows(q.p, q.p, l.q_norm, T * H, Dh, cfg.rms_eps, st);
      cuda::rmsnorm_rows(k.p, k.p, l.k_norm, T * Hk, Dh, cfg.rms_eps, st);
      cuda::rope(q.p, pos.p, T, H, Dh, Dh, cfg.rope_freq_base, true, st);
      cuda::rope(k.p, pos.p, T, Hk, Dh, Dh, cfg.rope_freq_base, true, st);
      const cuda::KvLayer kv{kc[il].p, vc[il].p, S, Hk, C, Dh};
      cuda::store_kv(kv, k.p, v.p, slot.p, pos.p, T, st);
      if (decode) cuda::attention_decode(kv, q.p, att.p, slot.p, pos.p, T, H, scale, max_keys, kKvChunk, part.p, st);
      else cuda::attention_prefill(kv, q.p, att.p, slot.p, pos.p, T, H, scale, st);
      mm(l.wo, att.p, y.p, T);
      cuda::add(x.p, y.p, (int64_t)T * D, st);
      cuda::rmsnorm_rows(xn.p, x.p, l.ffn_norm, T, D, cfg.rms_eps, st);
      mm(l.wg, xn.p, gate.p, T);
      mm(l.wu, xn.p, up.p, T);
      cuda::silu_mul(gate.p, up.p, (int64_t)T * F, st);
      mm(l.wd, gate.p, y.p, T);
      cuda::add(x.p, y.p, (int64_t)T * D, st);
    }
    cuda::rmsnorm_rows(last.p, x.p + (size_t)(T - n_out) * D, out_norm, n_out, D, cfg.rms_eps, st);
    mm(output, last.p, logits.p, n_out);
  }
};

void put_rows(GpuQwen3& g, const std::vector<int32_t>& tok, const std::vector<int32_t>& pos,
              const std::vector<int32_t>& slot) {
  g.tok.put(tok, g.st);
  g.pos.put(pos, g.st);
  g.slot.put(slot, g.st);
}

// Teacher-forced parity: the same prompt and the same forced tokens through the CPU backend and
// the GPU; per step the relative L2 distance of the logits and whether the argmax agrees.
void check_logits(Checks& c, const std::vector<uint8_t>& img, int steps, cudaStream_t st, JsonLine& j) {
  std::shared_ptr<GgufFile> f(GgufFile::parse(img.data(), img.size()));
  const int prompt = 16, C = prompt + steps + 1;
  ThreadPool pool((int)std::max(1u, std::thread::hardware_concurrency()));
  auto cpu = Model::load(f, 1, C, &pool, 64);
  GpuQwen3 g(*f, img.data(), img.size(), 1, C, 64, st);
  const int V = g.V;
  std::vector<int32_t> toks(prompt + steps);
  for (size_t i = 0; i < toks.size(); i++) toks[i] = (int32_t)((i * 7919 + 13) % (size_t)V);
  double worst = 0;
  int agree = 0;
  std::vector<float> cl(V);
  for (int s = 0; s <= steps; s++) {
    const int p0 = s == 0 ? 0 : prompt + s - 1, n = s == 0 ? prompt : 1;
    Batch b;
    for (int i = 0; i < n; i++) {
      b.token.push_back(toks[p0 + i]);
      b.pos.push_back(p0 + i);
      b.slot.push_back(0);
      b.logits.push_back(i == n - 1);
    }
    cpu->forward(b, cl.data());
    put_rows(g, b.token, b.pos, b.slot);
    g.step(n, p0 + n, s > 0, 1);
    const auto gl = g.logits.get(V, st);
    double num = 0, den = 0;
    int ca = 0, ga = 0;
    for (int i = 0; i < V; i++) {
      num += (double)(gl[i] - cl[i]) * (gl[i] - cl[i]);
      den += (double)cl[i] * cl[i];
      if (cl[i] > cl[ca]) ca = i;
      if (gl[i] > gl[ga]) ga = i;
    }
    worst = std::max(worst, std::sqrt(num / (den + 1e-30)));
    agree += ca == ga;
  }
  const double agree_frac = (double)agree / (steps + 1);
  // The CPU rounds activations to q8/f16/bf16 before each matmul, the GPU keeps f32: a few
  // percent of logit distance over several layers is that rounding, not a bug (a layout or
  // indexing bug gives ~100%).
  c.add("logits vs CPU backend, worst step rel L2", worst <= 0.05, worst);
  // Random logits over ~150k entries sit close at the top (the top-two gap is ~0.2 rms), so a
  // percent of rounding noise flips some argmaxes; a layout bug agrees on next to none.
  c.add("logits vs CPU backend, argmax agreement", agree_frac >= 0.75, agree_frac);
  j.num("parity_steps", steps).num("parity_worst_rel_l2", worst).num("parity_argmax_agree", agree_frac);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Decode at batch B (one row per slot at depth `depth`) and prefill of `prefill` tokens per
// sequence for B sequences; KV contents are whatever the cache holds (speed only).
std::string bench(GpuQwen3& g, const ModelShape& s, const HarnessArgs& a, int depth, int& graph_captures,
                  std::string& graph_errors) {
  std::string out = "[";
  for (int B : a.batches) {
    if (B > g.S) continue;
    std::vector<int32_t> tok(B), pos(B, depth), slot(B);
    for (int i = 0; i < B; i++) {
      slot[i] = i;
      tok[i] = (int32_t)((i * 31 + 7) % g.V);
    }
    std::vector<float> u(B, 0.5f);
    g.u.put(u, g.st);
    auto one = [&](int it) {
      for (auto& p : pos) p = depth + it;
      put_rows(g, tok, pos, slot);
      g.step(B, depth + it + 1, true, B);
      cuda::sample(g.logits.p, B, g.V, 40, 0.95f, 0.f, g.u.p, g.ids.p, g.st);
      cuda::download(tok.data(), g.ids.p, B * sizeof(int32_t), g.st);
      cuda::sync(g.st);  // the ids come back every step, as a server loop needs them
    };
    one(0);
    one(1);
    double t0 = now_s();
    for (int it = 0; it < a.iters; it++) one(2 + it);
    const double dt_eager = (now_s() - t0) / a.iters;
    // The same step as one CUDA graph: attention gets the cache's whole length as max_keys so the
    // launch shapes stay fixed while positions (device memory) move; only tokens/positions go up
    // and ids come down around each replay.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::string graph_error;
    cuda::check((int)cudaStreamBeginCapture(g.st, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      g.step(B, g.C, true, B);
      cuda::sample(g.logits.p, B, g.V, 40, 0.95f, 0.f, g.u.p, g.ids.p, g.st);
    } catch (const std::exception& e) {
      graph_error = e.what();
    }
    const cudaError_t ec = cudaStreamEndCapture(g.st, &graph);  // always leave capture mode
    if (graph_error.empty() && ec != cudaSuccess) graph_error = cudaGetErrorString(ec);
    if (graph_error.empty()) {
      const cudaError_t ei = cudaGraphInstantiate(&exec, graph, 0);
      if (ei != cudaSuccess) graph_error = cudaGetErrorString(ei);
    }
    if (!graph_error.empty()) {
      (void)cudaGetLastError();
      if (graph) cudaGraphDestroy(graph);
      std::fprintf(stderr, "graph capture failed at batch %d: %s\n", B, graph_error.c_str());
      graph_errors += (graph_errors.empty() ? "" : "; ") + graph_error;
    } else {
      graph_captures++;
    }
    auto replay = [&](int it) {
      for (auto& p : pos) p = depth + it;
      put_rows(g, tok, pos, slot);
      cuda::check((int)cudaGraphLaunch(exec, g.st), "cudaGraphLaunch");
      cuda::download(tok.data(), g.ids.p, B * sizeof(int32_t), g.st);
      cuda::sync(g.st);
    };
    double dt = dt_eager;
    if (exec) {
      replay(0);
      t0 = now_s();
      for (int it = 0; it < a.iters; it++) replay(2 + it);
      dt = (now_s() - t0) / a.iters;
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    const double kv_bytes = (double)B * s.L * 2.0 * s.Hk * s.Dh * 2.0 * (depth + 2 + a.iters / 2);
    const double bytes = (double)g.weight_bytes + kv_bytes;
    // prefill: B sequences of a.prefill tokens, as many whole sequences per step as Tm rows hold
    // (rows of several slots in one step, as the scheduler batches them); stops after 20 s so a
    // slow kernel cannot eat the run's time, and reports the tokens it did
    const int seq_per_step = std::max(1, std::min(B, g.Tm / std::max(1, a.prefill)));
    const int chunk = std::min(g.Tm, a.prefill);
    double pt = 0;
    int done_tokens = 0;
    {
      cuda::sync(g.st);
      const double p0 = now_s();
      for (int b0 = 0; b0 < B && now_s() - p0 < 20.0; b0 += seq_per_step) {
        const int nb = std::min(seq_per_step, B - b0);
        for (int c0 = 0; c0 < a.prefill; c0 += chunk) {
          const int n = std::min(chunk, a.prefill - c0);
          std::vector<int32_t> pt_tok, pt_pos, pt_slot;
          for (int sb = 0; sb < nb; sb++)
            for (int i = 0; i < n; i++) {
              pt_tok.push_back((int32_t)((c0 + i + 31 * sb) * 17 % g.V));
              pt_pos.push_back(c0 + i);
              pt_slot.push_back(b0 + sb);
            }
          put_rows(g, pt_tok, pt_pos, pt_slot);
          g.step(nb * n, c0 + n, false, 1);
          done_tokens += nb * n;
        }
        cuda::sync(g.st);
      }
      pt = now_s() - p0;
    }
    char b[512];
    std::snprintf(b, sizeof b,
                  "{\"batch\":%d,\"decode_ms_per_step\":%.4g,\"decode_ms_per_step_eager\":%.4g,\"decode_tok_s\":%.4g,"
                  "\"bytes_per_step\":%.6g,\"frac_of_4_8_tb_s\":%.4g,\"prefill_tokens\":%d,\"prefill_s\":%.4g,"
                  "\"prefill_tok_s\":%.4g}",
                  B, dt * 1e3, dt_eager * 1e3, B / dt, bytes, bytes / dt / kH200Bandwidth, done_tokens, pt,
                  done_tokens / pt);
    std::fprintf(stderr, "%s\n", b);
    out += (out.size() > 1 ? "," : "") + std::string(b);
  }
  return out + "]";
}

// One [K=D, N=F] matmul at T = 512 through each GEMM that can take it: the evidence for the
// cuBLAS choice on F16/BF16 (and the WMMA kernel's own TFLOP/s).
std::string gemm_timing(GpuQwen3& g) {
  const QMatrix& W = g.layers[0].wg;
  const int T = 512;
  auto time_it = [&](auto&& fn) {
    fn();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, g.st);
    for (int i = 0; i < 10; i++) fn();
    cudaEventRecord(e1, g.st);
    cuda::check((int)cudaEventSynchronize(e1), "gemm timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms / 10;
  };
  const double flop = 2.0 * T * W.K * W.N;
  // the decode kernel alone, one token through the output matrix (hundreds of MB, past the L2)
  const QMatrix& O = g.output;
  const float mv = time_it([&] { cuda::matvec(O, g.xn.p, g.logits.p, 1, g.st); });
  const double wbytes = (double)ggml_row_bytes(O.type, O.K) * O.N;
  const float wmma = time_it([&] { cuda::gemm_f16(W, g.xn.p, g.gate.p, T, g.st); });
  char b[512];
  int n = std::snprintf(b, sizeof b,
                        "{\"output_matvec_T1_ms\":%.4g,\"output_matvec_T1_gb_s\":%.4g,\"K\":%lld,\"N\":%lld,"
                        "\"T\":%d,\"wmma_ms\":%.4g,\"wmma_tflops\":%.4g",
                        mv, wbytes / mv * 1e-6, (long long)W.K, (long long)W.N, T, wmma, flop / wmma * 1e-9);
  if (cuda::cublas_supported(W.type)) {
    const float cb = time_it([&] { cuda::gemm_cublas(*g.blas, W, g.xn.p, g.x16.p, g.gate.p, T, g.st); });
    n += std::snprintf(b + n, sizeof b - n, ",\"cublas_ms\":%.4g,\"cublas_tflops\":%.4g", cb, flop / cb * 1e-9);
  }
  std::snprintf(b + n, sizeof b - n, "}");
  return b;
}

GgmlType parse_type(const std::string& n) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    std::string tn = ggml_type_name(t);
    std::transform(tn.begin(), tn.end(), tn.begin(), ::tolower);
    if (tn == n) return t;
  }
  throw std::invalid_argument("unknown --wtype " + n);
}

}  // namespace

int run_on_device(const HarnessArgs& a) {
  JsonLine j;
  j.str("harness", "cuda_harness").str("shape", a.shape).str("wtype", a.wtype);
  const cuda::DeviceInfo dev = cuda::probe_device();
  if (dev.count == 0) {
    std::printf("%s\n", j.str("status", "no_cuda_device")
                            .str("asked", "a CUDA device (device 0)")
                            .str("found", dev.error.empty() ? "no device" : dev.error)
                            .done()
                            .c_str());
    return 3;
  }
  j.str("device", dev.name).num("cc", dev.cc_major * 10 + dev.cc_minor).num("device_gib", dev.total_bytes / 1073741824.0);
  cudaStream_t st;
  try {
    cuda::check((int)cudaStreamCreate(&st), "cudaStreamCreate");
  } catch (const std::exception& e) {
    std::printf("%s\n", j.str("status", "error").str("error", e.what()).done().c_str());
    return 1;
  }
  Checks c;
  std::string errors;
  ModelShape s;
  try {
    s = shape_preset(a.shape, parse_type(a.wtype));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_harness: %s\n", e.what());
    return 2;
  }
  // Each phase runs even when an earlier one threw (a bug in one kernel should not hide the
  // others' results); a CUDA fault that poisons the context shows up in every later phase.
  if (a.only.empty() || a.only == "checks") {
    const double t0 = now_s();
    try {
      check_matmuls(c, st);
      check_elementwise(c, st);
      check_attention(c, st);
      check_routing_and_sampling(c, st);
    } catch (const std::exception& e) {
      c.add(std::string("kernel checks raised: ") + e.what(), false, NAN);
    }
    try {
      ModelShape ps = s;
      ps.L = std::min(a.parity_layers, s.L);
      const auto img = make_random_gguf(ps, a.seed, 0);
      check_logits(c, img, a.steps, st, j);
    } catch (const std::exception& e) {
      c.add(std::string("logit parity raised: ") + e.what(), false, NAN);
    }
    j.raw("checks", c.list + "]").num("checks_failed", c.failed).num("checks_s", now_s() - t0);
  }
  if (a.only.empty() || a.only == "bench") {
    std::string results = "[]", graph_errors;
    int graph_captures = 0;
    try {
      const double g0 = now_s();
      std::vector<uint8_t> img;
      std::unique_ptr<GgufFile> f, mapped;
      const uint8_t* base = nullptr;
      size_t size = 0;
      if (!a.gguf.empty()) {
        mapped = GgufFile::open(a.gguf);
        // the tensors of a mapped file lie after the first one's data, 32-byte aligned
        base = mapped->tensors().front().data;
        for (const auto& t : mapped->tensors()) {
          base = std::min(base, t.data);
        }
        for (const auto& t : mapped->tensors()) size = std::max(size, (size_t)(t.data + t.n_bytes - base));
      } else {
        img = make_random_gguf(s, a.seed, 0);
        f = GgufFile::parse(img.data(), img.size());
        base = img.data();
        size = img.size();
      }
      const GgufFile& ff = mapped ? *mapped : *f;
      const int maxB = *std::max_element(a.batches.begin(), a.batches.end());
      const int depth = 512;
      GpuQwen3 g(ff, base, size, maxB, depth + a.iters + 4 + a.prefill, 2048, st);
      j.num("load_s", now_s() - g0).num("weight_bytes_per_step", (double)g.weight_bytes)
          .num("bound_ms_per_step_at_4_8_tb_s", g.weight_bytes / kH200Bandwidth * 1e3);
      j.raw("gemm", gemm_timing(g));
      results = bench(g, s, a, depth, graph_captures, graph_errors);
    } catch (const std::exception& e) {
      errors += std::string("bench: ") + e.what();
    }
    j.raw("bench", results).num("graph_captures", graph_captures);
    if (!graph_errors.empty()) j.str("graph_errors", graph_errors);
  }
  if (!errors.empty()) j.str("error", errors);
  j.str("status", c.failed ? "checks_failed" : !errors.empty() ? "error" : "ok");
  std::printf("%s\n", j.done().c_str());
  cudaStreamDestroy(st);
  return c.failed || !errors.empty() ? 1 : 0;
}

}  // namespace bench
}  // namespace mb
