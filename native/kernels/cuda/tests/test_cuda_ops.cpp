// test_cuda_ops: every kernel of the CUDA set (kernels/cuda/cuda_ops.h) against its scalar
// reference on the same inputs, with the one error metric of kernels/tests/parity.h: the matrix
// kernels (matvec, the f16 WMMA GEMM and its split-K, the expert matvec, cuBLAS) for every weight
// type, get_rows, rmsnorm_rows, RoPE, silu_mul, prefill and decode attention, MoE routing and
// sampling. Built with -DMB_CUDA=ON (npm run build:cuda).
//   test_cuda_ops [--perf]
// --perf also times the GEMMs at T = 512 and the matvec at T = 1 on the largest matrix.
// Exit: 0 every check passed; 1 a check failed; 2 bad arguments; 3 no usable CUDA device.
//
// Dimension legend: T rows, K/N a matrix's input/output width, P matvec_experts' (token, expert)
// pairs, E experts, Ek per token, H heads, Hk KV heads, G = H / Hk, Dh head dim, S slots, C context.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ref/ref.h"
#include "kernels/tests/parity.h"
#include "model/tests/harness.h"

namespace mb {
namespace {

using parity::compare;
using parity::Error;
using parity::random_floats;
const char* const kBackend = "cuda";

// A device buffer of n Ts.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  Dev() = default;
  explicit Dev(size_t count) : p((T*)cuda::dev_alloc(count * sizeof(T))), n(count) {}
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { if (p) cudaFree(p); }
  void put(const std::vector<T>& h, cudaStream_t s) { cuda::upload(p, h.data(), h.size() * sizeof(T), s); }
  std::vector<T> get(size_t count, cudaStream_t s) const {
    std::vector<T> h(count);
    cuda::download(h.data(), p, count * sizeof(T), s);
    cuda::sync(s);
    return h;
  }
};

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// A random [K -> N] matrix on the host, on the device, and dequantized by ref/.
struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> wf;  // [N][K]
  Dev<uint8_t> dev;
  QMatrix W;
  Matrix(GgmlType t, int64_t K, int64_t N, uint64_t seed, cudaStream_t st)
      : bytes(harness::random_matrix(t, K, N, 1.f / std::sqrt((float)K), seed)), wf((size_t)K * N), dev(bytes.size()) {
    cuda::upload(dev.p, bytes.data(), bytes.size(), st);
    W = QMatrix{t, K, N, dev.p};
    const size_t rb = ggml_row_bytes(t, K);
    for (int64_t n = 0; n < N; n++) kq::ref::dequantize(t, bytes.data() + n * rb, &wf[n * K], K);
  }
};

// y [P, Nout] against the product in double: output (p, n) is row w_row(p) + n of wf times row
// x_row(p) of x; max_norm in units of sum |w x| of that output. The one matrix check of every
// matrix kernel below.
Error matmul_error(const std::vector<float>& y, const std::vector<float>& wf, int64_t K, int64_t Nout,
                   const std::vector<float>& x, int P, const std::function<int64_t(int)>& w_row,
                   const std::function<int64_t(int)>& x_row) {
  std::vector<double> want((size_t)P * Nout), mag(want.size());
  for (int p = 0; p < P; p++)
    for (int64_t n = 0; n < Nout; n++) {
      const float* wr = &wf[(size_t)(w_row(p) + n) * K];
      const float* xr = &x[(size_t)x_row(p) * K];
      double ref = 0, m = 0;
      for (int64_t k = 0; k < K; k++) {
        ref += (double)wr[k] * xr[k];
        m += std::fabs((double)wr[k] * xr[k]);
      }
      want[p * Nout + n] = ref;
      mag[p * Nout + n] = m + 1e-20;
    }
  return compare(y.data(), want.data(), want.size(), [&](size_t i) { return mag[i]; });
}
Error matmul_error(const std::vector<float>& y, const Matrix& m, const std::vector<float>& x, int T) {
  return matmul_error(y, m.wf, m.W.K, m.W.N, x, T, [](int) { return (int64_t)0; }, [](int t) { return (int64_t)t; });
}

void check_matmuls(parity::Report& rep, cudaStream_t st) {
  for (GgmlType t : kTypes) {
    const std::string tn = ggml_type_name(t);
    const Matrix up(t, 256, 512, 11 + (int)t, st);  // K = D, N = F of a small model's ffn_up
    const int64_t K = up.W.K, N = up.W.N;
    for (int T : {1, 2, 3, 8, 70}) {
      const auto x = random_floats((size_t)T * K, 5 + T, 1.f);
      Dev<float> dx(x.size()), dy((size_t)T * N);
      dx.put(x, st);
      const bool mv = T <= cuda::kMatvecMaxT;
      if (mv) cuda::matvec(up.W, dx.p, dy.p, T, st);
      else cuda::gemm_f16(up.W, dx.p, dy.p, T, st);
      rep.add(kBackend, mv ? "matvec" : "gemm_f16", tn + " T=" + std::to_string(T),
              matmul_error(dy.get((size_t)T * N, st), up, x, T));
    }
    {
      // ffn_down (K = 512, N = 256): few output tiles, so gemm_f16 splits K and adds the parts
      const Matrix down(t, 512, 256, 21 + (int)t, st);
      const int T = 40;
      const auto x = random_floats((size_t)T * down.W.K, 41, 1.f);
      Dev<float> dx(x.size()), dy((size_t)T * down.W.N);
      dx.put(x, st);
      cuda::gemm_f16(down.W, dx.p, dy.p, T, st);
      rep.add(kBackend, "gemm_f16", "split-K " + tn + " T=40", matmul_error(dy.get((size_t)T * down.W.N, st), down, x, T));
    }
    {
      // W as E = 4 experts of N / 4 rows; 3 tokens, 2 experts each
      const int E = 4, Ek = 2, Tt = 3, P = Tt * Ek;
      const int64_t Ne = N / E;
      const size_t eb = (size_t)Ne * ggml_row_bytes(t, K);
      const std::vector<int32_t> sel{2, 0, 1, 3, 3, 2};
      const auto x = random_floats((size_t)Tt * K, 77, 1.f);
      Dev<float> dx(x.size()), dy((size_t)P * Ne);
      Dev<int32_t> dsel(sel.size());
      dx.put(x, st);
      dsel.put(sel, st);
      cuda::matvec_experts(QMatrix{t, K, Ne, up.dev.p}, eb, dx.p, dsel.p, P, Ek, dy.p, st);
      rep.add(kBackend, "matvec_experts", tn,
              matmul_error(dy.get((size_t)P * Ne, st), up.wf, K, Ne, x, P, [&](int p) { return (int64_t)sel[p] * Ne; },
                           [&](int p) { return (int64_t)(p / Ek); }));
    }
    if (cuda::cublas_supported(t)) {
      const int T = 70;
      const auto x = random_floats((size_t)T * K, 99, 1.f);
      Dev<float> dx(x.size()), dy((size_t)T * N);
      Dev<uint16_t> x16(x.size());
      dx.put(x, st);
      cuda::CublasHandle h(st);
      cuda::gemm_cublas(h, up.W, dx.p, x16.p, dy.p, T, st);
      rep.add(kBackend, "gemm_cublas", tn + " T=70", matmul_error(dy.get((size_t)T * N, st), up, x, T));
    }
    // embedding rows, relative to the row's largest value: the device may fuse d * q - m into one
    // FMA, which moves a value that cancels to near zero by an ulp of the terms, not of the result
    const std::vector<int32_t> rows{0, 7, (int32_t)N - 1};
    Dev<int32_t> dr(rows.size());
    dr.put(rows, st);
    Dev<float> dout(rows.size() * K);
    cuda::get_rows(up.W, dr.p, (int)rows.size(), dout.p, st);
    const auto got = dout.get(rows.size() * K, st);
    std::vector<float> want;
    std::vector<double> big;
    for (int32_t r : rows) {
      want.insert(want.end(), &up.wf[r * K], &up.wf[(r + 1) * K]);
      double b = 1e-30;
      for (int64_t k = 0; k < K; k++) b = std::max(b, (double)std::fabs(up.wf[r * K + k]));
      big.insert(big.end(), K, b);
    }
    rep.add(kBackend, "get_rows", tn, compare(got.data(), want.data(), want.size(), [&](size_t i) { return big[i]; }));
  }
}

void check_elementwise(parity::Report& rep, cudaStream_t st) {
  const int R = 37, n = 128;
  const auto x = random_floats((size_t)R * n, 1, 2.f), w = random_floats(n, 2, 1.f);
  Dev<float> dx(x.size()), dw(w.size()), dy(x.size());
  dx.put(x, st);
  dw.put(w, st);
  cuda::rmsnorm_rows(dy.p, dx.p, dw.p, R, n, 1e-6f, st);
  std::vector<float> want(x.size());
  for (int r = 0; r < R; r++) kq::ref::rmsnorm(&want[r * n], &x[r * n], w.data(), n, 1e-6f);
  auto rel = [&](size_t i) { return std::fabs((double)want[i]) + 1e-3; };  // of |want| + 1e-3
  rep.add(kBackend, "rmsnorm_rows", "R=37 n=128", compare(dy.get(x.size(), st).data(), want.data(), want.size(), rel));

  for (bool neox : {true, false}) {
    const int T = 5, Hh = 3, Dh = 64;
    const auto q = random_floats((size_t)T * Hh * Dh, 3, 1.f);
    const std::vector<int32_t> pos{0, 1, 17, 255, 300};
    Dev<float> dq(q.size());
    Dev<int32_t> dp(pos.size());
    dq.put(q, st);
    dp.put(pos, st);
    cuda::rope(dq.p, dp.p, T, Hh, Dh, Dh, 1e6f, neox, st);
    auto wq = q;
    for (int t = 0; t < T; t++) kq::ref::rope(&wq[(size_t)t * Hh * Dh], Hh, Dh, Dh, pos[t], 1e6f, neox);
    // absolute: the CPU builds the angles by repeated multiplication, the GPU with exp2f: at
    // position 300 they part by ~1e-5 rad; a wrong pairing or frequency is off by O(1)
    rep.add(kBackend, neox ? "rope_neox" : "rope_adjacent", "T=5 H=3 Dh=64",
            compare(dq.get(q.size(), st).data(), wq.data(), wq.size(), [](size_t) { return 1.0; }));
  }

  const auto g = random_floats(1000, 4, 6.f), u = random_floats(1000, 5, 2.f);
  Dev<float> dg(g.size()), du(u.size());
  dg.put(g, st);
  du.put(u, st);
  cuda::silu_mul(dg.p, du.p, (int64_t)g.size(), st);
  auto wg = g;
  kq::ref::silu_mul(wg.data(), u.data(), (int)g.size());
  rep.add(kBackend, "silu_mul", "n=1000",
          compare(dg.get(g.size(), st).data(), wg.data(), wg.size(), [&](size_t i) { return std::fabs((double)wg[i]) + 1e-3; }));
}

void check_attention(parity::Report& rep, cudaStream_t st) {
  for (int Dh : {64, 128}) {
    const int S = 2, Hk = 2, G = 4, H = Hk * G, C = 700;
    const float scale = 1.f / std::sqrt((float)Dh);
    // rows: a prefill run of slot 0 (positions 0..5) and decode rows deep into slot 1
    const std::vector<int32_t> slot{0, 0, 0, 0, 0, 0, 1, 1}, pos{0, 1, 2, 3, 4, 5, 650, 699};
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
      rep.add(kBackend, mode == 0 ? "attention_prefill" : "attention_decode", "Dh=" + std::to_string(Dh),
              compare(dout.get(q.size(), st).data(), want.data(), want.size(), [](size_t) { return 1.0; }));
    }
  }
}

void check_routing_and_sampling(parity::Report& rep, cudaStream_t st) {
  const int T = 9, E = 64, Ek = 8;
  auto l = random_floats((size_t)T * E, 12, 4.f);
  l[3] = l[5];  // a tie
  Dev<float> dl(l.size()), dw((size_t)T * Ek);
  Dev<int32_t> dsel((size_t)T * Ek);
  dl.put(l, st);
  cuda::moe_route(dl.p, T, E, Ek, dsel.p, dw.p, st);
  const auto sel = dsel.get((size_t)T * Ek, st);
  const auto w = dw.get((size_t)T * Ek, st);
  std::vector<int32_t> want_sel;
  std::vector<float> want_w;
  for (int t = 0; t < T; t++) {
    std::vector<float> p(l.begin() + t * E, l.begin() + (t + 1) * E);
    kq::ref::softmax(p.data(), E);
    std::vector<int32_t> taken;
    float sum = 0;
    std::vector<float> ww;
    for (int k = 0; k < Ek; k++) {  // the CPU backend's selection: the lower index on a tie
      int best = -1;
      for (int e = 0; e < E; e++)
        if (std::find(taken.begin(), taken.end(), e) == taken.end() && (best < 0 || p[e] > p[best])) best = e;
      taken.push_back(best);
      ww.push_back(p[best]);
      sum += p[best];
    }
    for (int k = 0; k < Ek; k++) want_w.push_back(ww[k] / sum);
    want_sel.insert(want_sel.end(), taken.begin(), taken.end());
  }
  rep.add(kBackend, "moe_route_sel", "T=9 E=64 Ek=8", parity::compare_exact(sel.data(), want_sel.data(), sel.size()));
  rep.add(kBackend, "moe_route_weights", "T=9 E=64 Ek=8",
          compare(w.data(), want_w.data(), w.size(), [](size_t) { return 1.0; }));

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
    std::vector<int32_t> want(R);
    for (int r = 0; r < R; r++) want[r] = harness::sample_ref(&logits[(size_t)r * V], V, 40, 0.95f, temp, u[r]);
    rep.add(kBackend, "sample", temp == 0.f ? "greedy" : "top-k/top-p", parity::compare_exact(tok.data(), want.data(), R));
  }
}

// --perf: one [K = 4096, N = 12288] matmul at T = 512 through each GEMM that can take it (the
// evidence for the cuBLAS choice on F16/BF16, and the WMMA kernel's own TFLOP/s), and a
// [4096 -> 151936] matrix at T = 1 (hundreds of MB, past the L2: the decode kernel's bandwidth).
void perf_gemms(parity::Report& rep, cudaStream_t st) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::BF16}) {
    const std::string tn = ggml_type_name(t);
    const int64_t K = 4096, N = 12288, V = 151936;
    const auto wb = harness::random_matrix(t, K, N, 1.f / 64, 31);
    const auto ob = harness::random_matrix(t, K, V, 1.f / 64, 32);
    Dev<uint8_t> dw(wb.size()), dout(ob.size());
    cuda::upload(dw.p, wb.data(), wb.size(), st);
    cuda::upload(dout.p, ob.data(), ob.size(), st);
    const QMatrix W{t, K, N, dw.p}, O{t, K, V, dout.p};
    const int T = 512;
    Dev<float> x((size_t)T * K), y((size_t)T * N), yo((size_t)V);
    Dev<uint16_t> x16((size_t)T * K);
    x.put(random_floats(x.n, 3, 1.f), st);
    auto sync = [&] { cuda::sync(st); };
    const double flop = 2.0 * T * K * N;
    rep.perf(kBackend, "matvec", tn + " T=1 4096x151936", parity::time_us([&] { cuda::matvec(O, x.p, yo.p, 1, st); }, sync),
             (double)ob.size(), 2.0 * K * V);
    rep.perf(kBackend, "gemm_f16", tn + " T=512 4096x12288",
             parity::time_us([&] { cuda::gemm_f16(W, x.p, y.p, T, st); }, sync), (double)wb.size(), flop);
    if (cuda::cublas_supported(t)) {
      cuda::CublasHandle h(st);
      rep.perf(kBackend, "gemm_cublas", tn + " T=512 4096x12288",
               parity::time_us([&] { cuda::gemm_cublas(h, W, x.p, x16.p, y.p, T, st); }, sync), (double)wb.size(), flop);
    }
  }
}

}  // namespace
}  // namespace mb

int main(int argc, char** argv) {
  using namespace mb;
  bool perf = false;
  for (int i = 1; i < argc; i++) {
    if (std::string(argv[i]) == "--perf") perf = true;
    else {
      std::fprintf(stderr, "usage: test_cuda_ops [--perf]\n");
      return 2;
    }
  }
  const cuda::DeviceInfo dev = cuda::probe_device();
  if (dev.count == 0) {
    std::printf("test_cuda_ops: no CUDA device (%s)\n", dev.error.empty() ? "no device" : dev.error.c_str());
    return 3;
  }
  std::printf("test_cuda_ops: %s, cc %d.%d\n", dev.name.c_str(), dev.cc_major, dev.cc_minor);
  cudaStream_t st;
  cuda::check((int)cudaStreamCreate(&st), "cudaStreamCreate");
  parity::Report rep;
  // Each group runs even when an earlier one threw: a bug in one kernel should not hide the others'.
  const std::pair<const char*, void (*)(parity::Report&, cudaStream_t)> groups[] = {
      {"matmuls", check_matmuls}, {"elementwise", check_elementwise}, {"attention", check_attention},
      {"routing and sampling", check_routing_and_sampling}};
  for (const auto& [name, fn] : groups) {
    try {
      fn(rep, st);
    } catch (const std::exception& e) {
      rep.fail(kBackend, name, std::string("raised: ") + e.what());
    }
  }
  if (perf) {
    try {
      perf_gemms(rep, st);
    } catch (const std::exception& e) {
      rep.fail(kBackend, "perf", std::string("raised: ") + e.what());
    }
  }
  rep.summary("test_cuda_ops");
  cudaStreamDestroy(st);
  return rep.failed() ? 1 : 0;
}
