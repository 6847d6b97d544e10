// The CUDA harness's device half (built with -DMB_CUDA=ON): kernel parity against scalar
// references; the product's CUDA model (Model::load with Device::cuda, model/cuda/backend_cuda.cpp)
// checked against the CPU backend over teacher-forced steps on a qwen3 and a llama shape; and
// prefill / decode benchmarks through that model. Prints one JSON line.
//
// Dimension legend: T rows in a step (<= Tm), D n_embd, H heads, Hk KV heads, Dh head dim, F n_ff,
// V n_vocab, L layers, S slots, C context per slot, K/N a matrix's reduction/output dims.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
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
#include "engine/scheduler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
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

// ---- the product's CUDA model (model/cuda/backend_cuda.cpp) ----

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Weight bytes a decode step reads from a file: every matrix once, one row of the embedding (all
// of it when the file ties the head to it).
double step_bytes(const GgufFile& f) {
  double b = 0;
  const bool tied = f.tensor("output.weight") == nullptr;
  for (const auto& t : f.tensors()) {
    if (t.name == "token_embd.weight" && !tied) b += (double)t.n_bytes / (double)t.ne[1];
    else b += (double)t.n_bytes;
  }
  return b;
}

// Teacher-forced parity through Model::load's two devices: the same rows into the CPU backend
// and the CUDA model, per step the relative L2 distance of every wanted logits row and whether
// their argmaxes agree. Two slots with different tokens: a prefill of both prompts in one batch
// (the logits of each prompt's last row, gathered from the middle of the batch), then decode
// steps of one row per slot; from the third decode step on, the CUDA model replays its captured
// graph, so the check covers the graph path too.
void check_logits(Checks& c, const std::string& label, const std::vector<uint8_t>& img, int steps, JsonLine& j) {
  std::shared_ptr<GgufFile> f(GgufFile::parse(img.data(), img.size()));
  const int S = 2, prompt = 16, C = prompt + steps + 1;
  ThreadPool pool((int)std::max(1u, std::thread::hardware_concurrency()));
  auto cpu = Model::load(f, S, C, &pool, 64);
  auto gpu = Model::load(f, S, C, nullptr, 64, Device::cuda);
  const int V = cpu->config().n_vocab;
  std::vector<std::vector<int32_t>> toks(S, std::vector<int32_t>(prompt + steps));
  for (int s = 0; s < S; s++)
    for (size_t i = 0; i < toks[s].size(); i++) toks[s][i] = (int32_t)((i * 7919 + 13 + 101 * s) % (size_t)V);
  double worst = 0;
  int agree = 0, rows = 0;
  std::vector<float> cl((size_t)S * V), gl((size_t)S * V);
  for (int step = 0; step <= steps; step++) {
    const int p0 = step == 0 ? 0 : prompt + step - 1, n = step == 0 ? prompt : 1;
    Batch b;
    for (int s = 0; s < S; s++)
      for (int i = 0; i < n; i++) {
        b.token.push_back(toks[s][p0 + i]);
        b.pos.push_back(p0 + i);
        b.slot.push_back(s);
        b.logits.push_back(i == n - 1);
      }
    cpu->forward(b, cl.data());
    gpu->forward(b, gl.data());
    for (int r = 0; r < S; r++, rows++) {
      const float* cr = &cl[(size_t)r * V];
      const float* gr = &gl[(size_t)r * V];
      double num = 0, den = 0;
      int ca = 0, ga = 0;
      for (int i = 0; i < V; i++) {
        num += (double)(gr[i] - cr[i]) * (gr[i] - cr[i]);
        den += (double)cr[i] * cr[i];
        if (cr[i] > cr[ca]) ca = i;
        if (gr[i] > gr[ga]) ga = i;
      }
      worst = std::max(worst, std::sqrt(num / (den + 1e-30)));
      agree += ca == ga;
    }
  }
  const double agree_frac = (double)agree / rows;
  // The CPU rounds activations to q8/f16/bf16 before each matmul, the GPU keeps f32: a few
  // percent of logit distance over several layers is that rounding, not a bug (a layout or
  // indexing bug gives ~100%).
  c.add(label + " logits vs CPU backend, worst row rel L2", worst <= 0.05, worst);
  // Random logits sit close at the top (the top-two gap is ~0.2 rms), so a percent of rounding
  // noise flips some argmaxes; a layout bug agrees on next to none.
  c.add(label + " logits vs CPU backend, argmax agreement", agree_frac >= 0.75, agree_frac);
  // Decode steps of 2 rows: the first runs eagerly, the second is captured and replayed after.
  c.add(label + " decode step captured as a CUDA graph", gpu->graph_captures() == 1, (double)gpu->graph_captures());
  j.num(label + "_parity_steps", steps).num(label + "_parity_worst_rel_l2", worst).num(label + "_parity_argmax_agree", agree_frac);
}

// Per batch size B: prefill B sequences of a.prefill tokens (as many whole sequences per step as
// the model's max batch holds, as the scheduler batches them), then decode steps of one row per
// slot at that depth, all through Model::forward (logits of every row come back to the host
// each step, as the engine samples there). Prefill stops after 20 s so a slow kernel cannot eat
// the run's time; the slots it did not reach get slot 0's K/V (kv_copy) so decode still runs B.
std::string bench(Model& m, int Tm, double weight_bytes, const HarnessArgs& a) {
  const ModelConfig& cfg = m.config();
  const int V = cfg.n_vocab;
  std::string out = "[";
  std::vector<float> logits;
  for (int B : a.batches) {
    for (int i = 0; i < B; i++) m.kv_truncate(i, 0);
    const int seq_per_step = std::max(1, std::min(B, Tm / std::max(1, a.prefill)));
    const int chunk = std::min(Tm, a.prefill);
    int done_tokens = 0, filled = 0;
    const double p0 = now_s();
    for (int b0 = 0; b0 < B && now_s() - p0 < 20.0; b0 += seq_per_step) {
      const int nb = std::min(seq_per_step, B - b0);
      for (int c0 = 0; c0 < a.prefill; c0 += chunk) {
        const int n = std::min(chunk, a.prefill - c0);
        Batch b;
        for (int sb = 0; sb < nb; sb++)
          for (int i = 0; i < n; i++) {
            b.token.push_back((int32_t)((c0 + i + 31 * (b0 + sb)) * 17 % V));
            b.pos.push_back(c0 + i);
            b.slot.push_back(b0 + sb);
            b.logits.push_back(c0 + i == a.prefill - 1);
          }
        logits.resize((size_t)nb * V);
        m.forward(b, logits.data());
        done_tokens += nb * n;
      }
      filled = b0 + nb;
    }
    const double pt = now_s() - p0;
    for (int i = filled; i < B; i++) m.kv_copy(0, i, a.prefill);
    std::vector<int32_t> tok(B);
    for (int i = 0; i < B; i++) tok[i] = (int32_t)((i * 31 + 7) % V);
    logits.resize((size_t)B * V);
    auto one = [&](int it) {
      Batch b;
      for (int i = 0; i < B; i++) {
        b.token.push_back(tok[i]);
        b.pos.push_back(a.prefill + it);
        b.slot.push_back(i);
        b.logits.push_back(1);
      }
      m.forward(b, logits.data());
      for (int i = 0; i < B; i++) tok[i] = (int32_t)(std::max_element(&logits[(size_t)i * V], &logits[(size_t)(i + 1) * V]) - &logits[(size_t)i * V]);
    };
    one(0);  // eager
    one(1);  // captured (when B is decode-shaped)
    const double t0 = now_s();
    for (int it = 0; it < a.iters; it++) one(2 + it);
    const double dt = (now_s() - t0) / a.iters;
    const double kv_bytes = (double)B * cfg.n_layer * 2.0 * cfg.n_head_kv * cfg.head_dim * 2.0 * (a.prefill + 2 + a.iters / 2);
    const double bytes = weight_bytes + kv_bytes;
    char b[512];
    std::snprintf(b, sizeof b,
                  "{\"batch\":%d,\"decode_ms_per_step\":%.4g,\"decode_tok_s\":%.4g,\"bytes_per_step\":%.6g,"
                  "\"frac_of_4_8_tb_s\":%.4g,\"logits_bytes_per_step\":%.6g,\"prefill_tokens\":%d,\"prefill_s\":%.4g,"
                  "\"prefill_tok_s\":%.4g,\"graph_captures\":%lld}",
                  B, dt * 1e3, B / dt, bytes, bytes / dt / kH200Bandwidth, 4.0 * B * V, done_tokens, pt,
                  done_tokens / pt, (long long)m.graph_captures());
    std::fprintf(stderr, "%s\n", b);
    out += (out.size() > 1 ? "," : "") + std::string(b);
  }
  return out + "]";
}

// ---- the engine on the CUDA model: scheduler + Model(Device::cuda) on a real GGUF ----

struct EngineRun {
  std::map<uint64_t, std::vector<int32_t>> tokens;  // per request id, in order
  std::map<uint64_t, std::string> finish;           // "stop" | "length" | ... | "error: ..."
  int64_t graph_captures = 0, steps = 0, cache_saved = 0, cache_restored = 0;
  double seconds = 0;
};

// Requests through the product's Scheduler exactly as the addon drives it: more requests than
// slots (queueing, slots reused), the last two sharing a long prefix with the first two (prefix
// reuse: a slot's own K/V kept, or copied from another slot on the device), greedy decoding, and
// the host prompt cache on (a reused slot's K/V saved through kv_read, restored through kv_write).
EngineRun run_engine(const std::shared_ptr<GgufFile>& f, std::shared_ptr<const Tokenizer> tok, Device device) {
  constexpr int S = 2, C = 256, Tm = 64, kRequests = 6;
  ThreadPool pool((int)std::max(1u, std::thread::hardware_concurrency()));
  std::mutex mu;
  std::condition_variable cv;
  EngineRun r;
  int done = 0;
  SchedulerOptions o;
  o.n_slots = S;
  o.n_ctx = C;
  o.max_batch = Tm;
  o.cache_bytes = 64ull << 20;  // private memory
  o.cache_namespace = "cuda_harness";
  const double t0 = now_s();
  {
    Scheduler s(Model::load(f, S, C, &pool, Tm, device), tok, o, [&](std::vector<EngineEvent>&& evs) {
      std::lock_guard<std::mutex> lk(mu);
      for (const auto& e : evs) {
        if (e.kind == EngineEvent::Token) r.tokens[e.id].push_back(e.token);
        if (e.kind == EngineEvent::Done) r.finish[e.id] = e.finish;
        if (e.kind == EngineEvent::Error) r.finish[e.id] = "error: " + e.message;
        if (e.kind == EngineEvent::Done || e.kind == EngineEvent::Error) done++;
      }
      cv.notify_all();
    });
    const std::string shared = "Once upon a time, in a small village by the sea, there lived";
    for (int i = 0; i < kRequests; i++) {
      EngineRequest q;
      q.id = (uint64_t)i + 1;
      const std::string ending[] = {" a fisher", " an old baker", " a tailor", " two cats"};
      q.prompt = tok->encode(i % 4 < 2 ? shared + ending[i % 4 + (i >= 4 ? 2 : 0)] : "Request " + std::to_string(i) + ": count to ten.", true, false);
      q.max_tokens = 24;
      s.submit(std::move(q));
    }
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, std::chrono::seconds(60), [&] { return done == kRequests; });
    const SchedulerStats st = s.stats();
    r.graph_captures = st.graph_captures;
    r.steps = st.steps;
    r.cache_saved = st.host_cache.saved_tokens;
    r.cache_restored = st.host_cache.restored_tokens;
  }
  r.seconds = now_s() - t0;
  return r;
}

// The same requests on the CPU backend and on the CUDA model: every CUDA request must finish
// without an error, the decode steps must have been captured as graphs, and the first generated
// token (a function of the prompt alone) must agree with the CPU's; how far each greedy
// continuation agrees is reported (rounding may part two close candidates later on).
void check_engine(Checks& c, const std::string& path, JsonLine& j) {
  std::shared_ptr<GgufFile> f(GgufFile::open(path));
  std::shared_ptr<const Tokenizer> tok(Tokenizer::from_gguf(*f));
  const EngineRun cpu = run_engine(f, tok, Device::cpu);
  const EngineRun gpu = run_engine(f, tok, Device::cuda);
  int finished = 0, first_agree = 0, n = 0;
  double prefix = 0;
  std::string errors;
  for (const auto& [id, fin] : cpu.finish) {
    n++;
    const auto g = gpu.finish.find(id);
    if (g != gpu.finish.end() && g->second.rfind("error", 0) != 0) finished++;
    else errors += (errors.empty() ? "" : "; ") + std::to_string(id) + ": " + (g == gpu.finish.end() ? "no end" : g->second);
    // no Token event at all when the first token ends the request
    const std::vector<int32_t> none;
    const auto ia = cpu.tokens.find(id), ib = gpu.tokens.find(id);
    const auto& a = ia == cpu.tokens.end() ? none : ia->second;
    const auto& b = ib == gpu.tokens.end() ? none : ib->second;
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) k++;
    first_agree += k > 0 || (a.empty() && b.empty());
    prefix += (double)k / std::max<size_t>(1, a.size());
  }
  c.add("engine on cuda: every request finished (" + path + ")", n > 0 && finished == n, (double)finished);
  if (!errors.empty()) j.str("engine_errors", errors);
  c.add("engine on cuda: first token agrees with the CPU backend", n > 0 && first_agree * 5 >= n * 4, (double)first_agree / std::max(1, n));
  c.add("engine on cuda: decode steps captured as CUDA graphs", gpu.graph_captures >= 1, (double)gpu.graph_captures);
  j.num("engine_requests", n).num("engine_first_token_agree", (double)first_agree / std::max(1, n))
      .num("engine_greedy_prefix_agree", prefix / std::max(1, n)).num("engine_graph_captures", (double)gpu.graph_captures)
      .num("engine_steps", (double)gpu.steps).num("engine_cuda_s", gpu.seconds).num("engine_cpu_s", cpu.seconds)
      .num("engine_cache_saved_tokens", (double)gpu.cache_saved).num("engine_cache_restored_tokens", (double)gpu.cache_restored)
      .num("engine_cpu_cache_restored_tokens", (double)cpu.cache_restored);
}

// One [K=D, N=F] matmul at T = 512 through each GEMM that can take it (the evidence for the cuBLAS
// choice on F16/BF16, and the WMMA kernel's own TFLOP/s), and the output matrix at T = 1 (hundreds
// of MB, past the L2: the decode kernel's bandwidth).
std::string gemm_timing(const GgufFile& f, cudaStream_t st) {
  const GgufTensor* tw = f.tensor("blk.0.ffn_gate.weight");
  const GgufTensor* to = f.tensor("output.weight") ? f.tensor("output.weight") : f.tensor("token_embd.weight");
  Dev<uint8_t> dw(tw->n_bytes), dout(to->n_bytes);
  cuda::upload(dw.p, tw->data, tw->n_bytes, st);
  cuda::upload(dout.p, to->data, to->n_bytes, st);
  const QMatrix W{tw->type, tw->ne[0], tw->ne[1], dw.p}, O{to->type, to->ne[0], to->ne[1], dout.p};
  const int T = 512;
  Dev<float> x((size_t)T * W.K), y((size_t)T * W.N), yo((size_t)O.N);
  Dev<uint16_t> x16((size_t)T * W.K);
  x.put(random_floats(x.n, 3, 1.f), st);
  auto time_it = [&](auto&& fn) {
    fn();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, st);
    for (int i = 0; i < 10; i++) fn();
    cudaEventRecord(e1, st);
    cuda::check((int)cudaEventSynchronize(e1), "gemm timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms / 10;
  };
  const double flop = 2.0 * T * W.K * W.N;
  const float mv = time_it([&] { cuda::matvec(O, x.p, yo.p, 1, st); });
  const double wbytes = (double)ggml_row_bytes(O.type, O.K) * O.N;
  const float wmma = time_it([&] { cuda::gemm_f16(W, x.p, y.p, T, st); });
  char b[512];
  int n = std::snprintf(b, sizeof b,
                        "{\"output_matvec_T1_ms\":%.4g,\"output_matvec_T1_gb_s\":%.4g,\"K\":%lld,\"N\":%lld,"
                        "\"T\":%d,\"wmma_ms\":%.4g,\"wmma_tflops\":%.4g",
                        mv, wbytes / mv * 1e-6, (long long)W.K, (long long)W.N, T, wmma, flop / wmma * 1e-9);
  if (cuda::cublas_supported(W.type)) {
    cuda::CublasHandle h(st);
    const float cb = time_it([&] { cuda::gemm_cublas(h, W, x.p, x16.p, y.p, T, st); });
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
    // The asked shape (first parity_layers layers) and a small llama with a tied head (the
    // default model's architecture), so one run checks both architectures the CUDA model runs.
    ModelShape llama = shape_preset("llama-tiny", GgmlType::Q4_1);
    ModelShape ps = s;
    ps.L = std::min(a.parity_layers, s.L);
    for (const ModelShape* m : {&ps, &llama}) {
      try {
        check_logits(c, m->arch, make_random_gguf(*m, a.seed, 0), a.steps, j);
      } catch (const std::exception& e) {
        c.add(m->arch + " logit parity raised: " + e.what(), false, NAN);
      }
    }
    if (!a.engine_gguf.empty()) {
      try {
        check_engine(c, a.engine_gguf, j);
      } catch (const std::exception& e) {
        c.add(std::string("engine check raised: ") + e.what(), false, NAN);
      }
    }
    j.raw("checks", c.list + "]").num("checks_failed", c.failed).num("checks_s", now_s() - t0);
  }
  if (a.only.empty() || a.only == "bench") {
    std::string results = "[]";
    try {
      const double g0 = now_s();
      std::vector<uint8_t> img;
      std::shared_ptr<GgufFile> f;
      if (!a.gguf.empty()) {
        f = GgufFile::open(a.gguf);
      } else {
        img = make_random_gguf(s, a.seed, 0);
        f = GgufFile::parse(img.data(), img.size());
      }
      j.raw("gemm", gemm_timing(*f, st));
      const int maxB = *std::max_element(a.batches.begin(), a.batches.end());
      const int Tm = 2048;
      auto m = Model::load(f, maxB, a.prefill + a.iters + 4, nullptr, Tm, Device::cuda);
      const double wb = step_bytes(*f);
      j.num("load_s", now_s() - g0).num("weight_bytes_per_step", wb).num("bound_ms_per_step_at_4_8_tb_s", wb / kH200Bandwidth * 1e3);
      results = bench(*m, Tm, wb, a);
      j.num("graph_captures", (double)m->graph_captures());
    } catch (const std::exception& e) {
      errors += std::string("bench: ") + e.what();
    }
    j.raw("bench", results);
  }
  if (!errors.empty()) j.str("error", errors);
  j.str("status", c.failed ? "checks_failed" : !errors.empty() ? "error" : "ok");
  std::printf("%s\n", j.done().c_str());
  cudaStreamDestroy(st);
  return c.failed || !errors.empty() ? 1 : 0;
}

}  // namespace bench
}  // namespace mb
