// test_backend_ops: every op of the Backend interface (model/backend.h) on every backend this
// build and machine can run, against the scalar reference (kernels/ref/) on the same inputs, with
// one error metric (kernels/tests/parity.h). Backends: the CPU backend on the kernel set dispatch
// picked (MB_KERNELS=ref|avx2 forces one: ctest runs it once per set), and the CUDA backend when
// this build has it (-DMB_CUDA=ON) and a device answers. An op a backend does not offer
// (Backend::supports) or a weight it refuses (Backend::matrix throws) is reported as skipped.
//   test_backend_ops [--perf] [--backend cpu|cuda] [--op GROUP]
// --perf also times each case per backend (us per call; GB/s of weights for the matmuls). --op
// runs the groups it prefixes (embed, matmul (with matmul_n), rmsnorm, add, add_bias, scale,
// copy_cols, move_rows, glu_silu, glu_gelu, softcap, rope, attention (with store_kv),
// attention_ring, moe (route, experts, weighted_sum)).
// Exit: 0 every check passed; 1 a check failed; 2 bad arguments.
//
// Dimension legend: see backend.h; T rows of a case, K/N a matrix's input/output width.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#include "kernels/tests/parity.h"
#include "model/backend.h"
#include "model/tests/harness.h"
#include "model/transformer.h"
#include "util/threadpool.h"
#ifdef MB_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#include "model/cuda/backend_cuda.h"
#endif

namespace mb {
namespace {

using namespace model_detail;
using parity::compare;
using parity::Error;
using parity::random_floats;

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

struct Args {
  bool perf = false;
  std::string backend, op;
};

// The rows of every case but attention's: two slots, a run of positions in slot 0 and one deep
// decode row in slot 1.
struct Rows {
  std::vector<int32_t> token, pos, slot;
  std::vector<uint8_t> want;
  Chunk chunk() const { return Chunk{token.data(), pos.data(), slot.data(), want.data(), (int)token.size()}; }
};
Rows make_rows(const std::vector<int>& slots, const std::vector<int>& positions, int V) {
  Rows r;
  for (size_t i = 0; i < slots.size(); i++) {
    r.slot.push_back(slots[i]);
    r.pos.push_back(positions[i]);
    r.token.push_back((int32_t)((i * 37 + 11) % (size_t)V));
    r.want.push_back(1);
  }
  return r;
}

// One backend under test and the helpers that move data in and out of its memory.
struct Under {
  std::string name;
  Backend* be;
  // Backend memory holding host (a fresh allocation, so writing it is the test's own business).
  float* put(const std::vector<float>& host) { return const_cast<float*>(be->vector(host)); }
  std::vector<float> get(const float* p, size_t n) {
    std::vector<float> h(n);
    be->read(h.data(), p, n);
    return h;
  }
  std::vector<int32_t> get_i32(const int32_t* p, size_t n) {
    std::vector<int32_t> h(n);
    be->read(reinterpret_cast<float*>(h.data()), reinterpret_cast<const float*>(p), n);
    return h;
  }
  const float* dummy = nullptr;
  // Waits for what the backend has enqueued (a read of one float).
  void sync() {
    if (!dummy) dummy = be->vector(std::vector<float>{0.f});
    float f;
    be->read(&f, dummy, 1);
  }
};

class Harness {
 public:
  Harness(const Args& a, parity::Report& rep) : a_(a), rep_(rep) {}

  // Each group runs even when an earlier one threw: one broken op should not hide the others.
  void run(Under& u) {
    u_ = &u;
    auto group = [&](const char* name, const std::function<void()>& fn) {
      if (!want(name)) return;
      try {
        fn();
      } catch (const std::exception& e) {
        rep_.fail(u_->name, name, std::string("raised: ") + e.what());
      }
    };
    group("embed", [&] { embed(); });
    group("matmul", [&] { matmul(); });
    for (const char* op : {"rmsnorm", "add", "add_bias", "scale", "copy_cols", "move_rows", "glu_silu", "glu_gelu", "softcap"})
      group(op, [&] { rows_op(op); });
    group("rope", [&] { rope(); });
    group("attention", [&] { attention(); });
    group("attention_ring", [&] { attention_ring(); });
    group("moe", [&] { moe(); });
  }

 private:
  bool want(const char* op) const { return a_.op.empty() || a_.op.rfind(op, 0) == 0 || std::string(op).rfind(a_.op, 0) == 0; }
  bool offered(Op op) {
    if (u_->be->supports(op)) return true;
    rep_.skip(u_->name, op_name(op), "not offered by this backend");
    return false;
  }
  void check(const std::string& op, const std::string& what, const Error& e) { rep_.add(u_->name, op, what, e); }
  void perf(const std::string& op, const std::string& what, const std::function<void()>& fn, double bytes = 0,
            double flop = 0) {
    if (!a_.perf) return;
    rep_.perf(u_->name, op, what, parity::time_us(fn, [&] { u_->sync(); }), bytes, flop);
  }

  // A [K -> N] matrix of type t in the backend's memory and its dequantized values; false (and a
  // skip) when the backend refuses it.
  bool matrix(GgmlType t, int64_t K, int64_t N, uint64_t seed, std::vector<uint8_t>& bytes, QMatrix& dev,
              std::vector<float>& wf) {
    bytes = harness::random_matrix(t, K, N, 1.f / std::sqrt((float)K), seed);
    const QMatrix host{t, K, N, bytes.data()};
    try {
      dev = u_->be->matrix(std::string("test.") + ggml_type_name(t), host);
    } catch (const std::exception& e) {
      rep_.skip(u_->name, std::string("matmul ") + ggml_type_name(t), e.what());
      return false;
    }
    wf.assign((size_t)K * N, 0.f);
    const size_t rb = ggml_row_bytes(t, K);
    for (int64_t n = 0; n < N; n++) kq::ref::dequantize(t, bytes.data() + n * rb, &wf[n * K], K);
    return true;
  }

  // got against ref/'s matmul of the same inputs, max_norm in units of sum |w x| per output.
  Error matmul_error(const std::vector<float>& got, const QMatrix& host, const std::vector<float>& wf,
                     const std::vector<float>& x, int T) {
    const int64_t K = host.K, N = host.N;
    std::vector<float> want((size_t)T * N);
    kq::matmul_with(kq::ref_table(), host, x.data(), want.data(), T, nullptr);
    std::vector<double> mag((size_t)T * N, 0.0);
    for (int t = 0; t < T; t++)
      for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) mag[t * N + n] += std::fabs((double)wf[n * K + k] * x[t * K + k]);
    return compare(got.data(), want.data(), want.size(), [&](size_t i) { return mag[i] + 1e-20; });
  }

  void embed() {
    if (!offered(Op::embed)) return;
    const int64_t K = 256, V = 64;
    const Rows r = make_rows({0, 0, 1, 1, 0}, {0, 1, 2, 3, 4}, (int)V);
    for (GgmlType t : kTypes) {
      std::vector<uint8_t> bytes;
      QMatrix W;
      std::vector<float> wf;
      if (!matrix(t, K, V, 100 + (int)t, bytes, W, wf)) continue;
      u_->be->set_rows(r.chunk());
      float* x = u_->be->alloc(r.token.size() * K);
      u_->be->embed(W, x);
      std::vector<float> want;
      for (int32_t tok : r.token) want.insert(want.end(), &wf[tok * K], &wf[(tok + 1) * K]);
      check("embed", ggml_type_name(t), compare(u_->get(x, want.size()), want));
    }
  }

  void matmul() {
    if (!offered(Op::matmul)) return;
    const int64_t K = 256, N = 96;
    for (GgmlType t : kTypes) {
      std::vector<uint8_t> bytes;
      QMatrix W;
      std::vector<float> wf;
      if (!matrix(t, K, N, 200 + (int)t, bytes, W, wf)) continue;
      const QMatrix host{t, K, N, bytes.data()};
      for (int T : {1, 5, 40}) {
        const auto x = random_floats((size_t)T * K, 300 + T, 1.f);
        float* dx = u_->put(x);
        float* dy = u_->be->alloc((size_t)T * N);
        u_->be->matmul(W, dx, dy, T);
        const std::string what = std::string(ggml_type_name(t)) + " T=" + std::to_string(T);
        check("matmul", what, matmul_error(u_->get(dy, (size_t)T * N), host, wf, x, T));
        perf("matmul", what, [&] { u_->be->matmul(W, dx, dy, T); }, (double)bytes.size(), 2.0 * T * K * N);
      }
      // matmul_n: three matrices sharing one input (q/k/v), one token and three
      std::vector<uint8_t> b2, b3;
      QMatrix W2, W3;
      std::vector<float> wf2, wf3;
      if (!matrix(t, K, N / 2, 210 + (int)t, b2, W2, wf2) || !matrix(t, K, N / 4, 220 + (int)t, b3, W3, wf3)) continue;
      const QMatrix hosts[] = {host, {t, K, N / 2, b2.data()}, {t, K, N / 4, b3.data()}};
      const std::vector<float>* wfs[] = {&wf, &wf2, &wf3};
      for (int T : {1, 3}) {
        const auto x = random_floats((size_t)T * K, 400 + T, 1.f);
        float* dx = u_->put(x);
        const QMatrix* Ws[] = {&W, &W2, &W3};
        float* ys[3];
        for (int m = 0; m < 3; m++) ys[m] = u_->be->alloc((size_t)T * hosts[m].N);
        u_->be->matmul_n(Ws, 3, dx, ys, T);
        for (int m = 0; m < 3; m++)
          check("matmul_n", std::string(ggml_type_name(t)) + " T=" + std::to_string(T) + " m=" + std::to_string(m),
                matmul_error(u_->get(ys[m], (size_t)T * hosts[m].N), hosts[m], *wfs[m], x, T));
      }
    }
  }

  // The row-wise ops: x [R, n] (ld wider for add_bias) against their scalar definitions.
  void rows_op(const std::string& op) {
    const int R = 37, n = 200;
    const size_t ld = 256;
    const Op which = op == "rmsnorm" ? Op::rmsnorm : op == "add" ? Op::add : op == "add_bias" ? Op::add_bias
                     : op == "scale" ? Op::scale : op == "copy_cols" ? Op::copy_cols : op == "move_rows" ? Op::move_rows
                     : op == "glu_silu" ? Op::glu_silu : op == "glu_gelu" ? Op::glu_gelu : Op::softcap;
    if (!offered(which)) return;
    Backend& be = *u_->be;
    const auto x = random_floats((size_t)R * ld, 500, 3.f), y = random_floats((size_t)R * ld, 501, 2.f),
               w = random_floats(ld, 502, 1.f);
    std::vector<float> want = x;
    float* dx = u_->put(x);
    const float* dy = u_->put(y);
    const float* dw = u_->put(w);
    std::function<void()> fn;
    size_t count = (size_t)R * n;
    if (op == "rmsnorm") {
      float* out = be.alloc((size_t)R * n);
      fn = [&, out] { be.rmsnorm(out, dx, dw, R, n, 1e-6f); };
      fn();
      for (int r = 0; r < R; r++) kq::ref::rmsnorm(&want[(size_t)r * n], &x[(size_t)r * n], w.data(), n, 1e-6f);
      check(op, "R=37 n=200", compare(u_->get(out, count), want.data(), count));
    } else if (op == "add" || op == "add_bias" || op == "scale" || op == "softcap") {
      if (op == "add") {
        be.add(dx, dy, R, n);
        for (size_t i = 0; i < count; i++) want[i] += y[i];
        fn = [&] { be.add(dx, dy, R, n); };
      } else if (op == "add_bias") {
        be.add_bias(dx, ld, dw, R, n);
        for (int r = 0; r < R; r++)
          for (int i = 0; i < n; i++) want[r * ld + i] += w[i];
        count = (size_t)R * ld;
        fn = [&] { be.add_bias(dx, ld, dw, R, n); };
      } else if (op == "scale") {
        be.scale(dx, R, n, 0.125f);
        for (size_t i = 0; i < count; i++) want[i] *= 0.125f;
        fn = [&] { be.scale(dx, R, n, 1.f); };
      } else {
        be.softcap(dx, R, n, 2.5f);
        for (size_t i = 0; i < count; i++) want[i] = (float)(2.5 * std::tanh(x[i] / 2.5));
        fn = [&] { be.softcap(dx, R, n, 1e30f); };
      }
      check(op, "R=37 n=200", compare(u_->get(dx, count), want.data(), count));
    } else if (op == "copy_cols") {
      float* out = be.alloc((size_t)R * 64);
      be.copy_cols(out, 64, dx + 8, ld, R, 48);
      std::vector<float> got = u_->get(out, (size_t)R * 64), exp((size_t)R * 64, 0.f);
      for (int r = 0; r < R; r++) std::copy_n(&x[r * ld + 8], 48, &exp[(size_t)r * 64]);
      check(op, "R=37 n=48 of ld 256", compare(got, exp));
      fn = [&, out] { be.copy_cols(out, 64, dx + 8, ld, R, 48); };
    } else if (op == "move_rows") {
      const int rows[] = {0, 3, 4, 9, 36};
      be.move_rows(dx, ld, rows, 5);
      for (int i = 0; i < 5; i++) std::copy_n(&x[rows[i] * ld], ld, &want[i * ld]);
      check(op, "5 of 37 rows", compare(u_->get(dx, 5 * ld), want.data(), 5 * ld));
    } else {
      const bool silu = op == "glu_silu";
      be.glu(silu ? Glu::silu : Glu::gelu, dx, dy, R, n);
      for (int r = 0; r < R; r++)
        (silu ? kq::ref::silu_mul : kq::ref::gelu_mul)(&want[(size_t)r * n], &y[(size_t)r * n], n);
      check(op, "R=37 n=200", compare(u_->get(dx, count), want.data(), count));
      fn = [&, silu] { be.glu(silu ? Glu::silu : Glu::gelu, dx, dy, R, n); };
    }
    if (fn) perf(op, "R=37 n=200", fn, 4.0 * R * n * 2);
  }

  void rope() {
    if (!offered(Op::rope)) return;
    const Rows r = make_rows({0, 0, 0, 1, 1}, {0, 1, 2, 255, 1000}, 100);
    const int T = (int)r.token.size(), Hh = 3, Dh = 64;
    const auto factors = random_floats(16, 600, 0.5f);
    std::vector<float> fac(factors.size());
    for (size_t i = 0; i < fac.size(); i++) fac[i] = 1.f + std::fabs(factors[i]);
    for (int c = 0; c < 4; c++) {
      const bool neox = c != 1, partial = c >= 2, with_factors = c == 3;
      if (with_factors && !u_->be->supports(Op::rope_factors)) {
        rep_.skip(u_->name, "rope_factors", "not offered by this backend");
        continue;
      }
      RopeArgs ra{partial ? 32 : Dh, 1e6f, neox, with_factors ? u_->be->vector(fac) : nullptr, with_factors ? 1.2f : 1.f};
      const auto q = random_floats((size_t)T * Hh * Dh, 601 + c, 1.f);
      float* dq = u_->put(q);
      u_->be->set_rows(r.chunk());
      u_->be->rope(dq, Hh, Dh, ra, T);
      auto want = q;
      for (int t = 0; t < T; t++)
        kq::ref::rope(&want[(size_t)t * Hh * Dh], Hh, Dh, ra.dims, r.pos[t], ra.base, neox,
                      with_factors ? fac.data() : nullptr, ra.attn_factor);
      const std::string what = std::string(neox ? "neox" : "adjacent") + (partial ? " dims=32" : "") +
                               (with_factors ? " factors" : "");
      check("rope", what, compare(u_->get(dq, q.size()), want));
      perf("rope", what, [&] { u_->be->rope(dq, Hh, Dh, ra, T); });
    }
  }

  // store_kv of a prefill of both slots, then store_kv and attention of a chunk with a run of
  // slot 0 and a decode row of slot 1, causal, windowed and with sinks; the reference runs
  // ref::attention on a host f16 cache built from the same K/V.
  void attention() {
    if (!offered(Op::store_kv) || !offered(Op::attention)) return;
    const int S = 2, Hk = 2, G = 3, H = Hk * G, N = 160;
    for (int Dh : {64, 128}) {
      const size_t HD = (size_t)H * Dh, KD = (size_t)Hk * Dh;
      Backend& be = *u_->be;
      KvBuf kv = be.alloc_kv(1, S, Hk, N, Dh, G, false);
      const int P = 100;  // prefill positions of each slot
      std::vector<int> s0, p0;
      for (int s = 0; s < S; s++)
        for (int p = 0; p < P; p++) s0.push_back(s), p0.push_back(p);
      const Rows pre = make_rows(s0, p0, 100);
      const Rows cur = make_rows({0, 0, 0, 0, 1}, {P, P + 1, P + 2, P + 3, P}, 100);
      // host cache [S][Hk][N][Dh] in f16, as store_kv writes it
      std::vector<uint16_t> hk((size_t)S * Hk * N * Dh, 0), hv(hk.size(), 0);
      auto store = [&](const Rows& r, uint64_t seed) {
        const int T = (int)r.token.size();
        const auto k = random_floats((size_t)T * KD, seed, 1.f), v = random_floats((size_t)T * KD, seed + 1, 1.f);
        be.set_rows(r.chunk());
        be.store_kv(kv, 0, u_->put(k), u_->put(v), T);
        for (int t = 0; t < T; t++)
          for (int g = 0; g < Hk; g++)
            for (int d = 0; d < Dh; d++) {
              const size_t at = kv.index(0, r.slot[t], g, r.pos[t]) + d;
              hk[at] = f32_to_f16(k[t * KD + g * Dh + d]);
              hv[at] = f32_to_f16(v[t * KD + g * Dh + d]);
            }
      };
      store(pre, 700 + Dh);
      store(cur, 710 + Dh);
      {
        // K/V rows of slot 1, positions [P - 2, P + 1), as kv_read lays them out: [n][K, V][Hk][Dh]
        const int n = 3;
        std::vector<uint8_t> got((size_t)n * 2 * KD * 2);
        be.kv_read(kv, 1, P - 2, n, got.data());
        std::vector<uint16_t> exp((size_t)n * 2 * KD), g16(exp.size());
        for (int t = 0; t < n; t++)
          for (int g = 0; g < Hk; g++)
            for (int d = 0; d < Dh; d++) {
              exp[(t * 2 + 0) * KD + g * Dh + d] = hk[kv.index(0, 1, g, P - 2 + t) + d];
              exp[(t * 2 + 1) * KD + g * Dh + d] = hv[kv.index(0, 1, g, P - 2 + t) + d];
            }
        std::memcpy(g16.data(), got.data(), got.size());
        check("store_kv", "Dh=" + std::to_string(Dh) + " read back", parity::compare_exact(g16.data(), exp.data(), exp.size()));
      }
      const int T = (int)cur.token.size();
      const auto q = random_floats((size_t)T * HD, 720 + Dh, 2.f);
      const float* dq = u_->put(q);
      const auto sinks = random_floats(H, 730, 1.f);
      for (int c = 0; c < 3; c++) {
        const Op need = c == 0 ? Op::attention : c == 1 ? Op::attention_window : Op::attention_sinks;
        const char* label = c == 0 ? "causal" : c == 1 ? "window 24" : "sinks";
        if (c > 0 && !be.supports(need)) {
          rep_.skip(u_->name, op_name(need), "not offered by this backend");
          continue;
        }
        AttnArgs aa{1.f / std::sqrt((float)Dh), c == 1 ? 24 : 0, c == 2 ? be.vector(sinks) : nullptr};
        float* out = be.alloc((size_t)T * HD);
        be.set_rows(cur.chunk());
        be.attention(kv, 0, dq, out, H, aa, T);
        std::vector<float> want((size_t)T * HD);
        std::vector<float> scratch(kq::ref::attention_scratch_floats(G, Dh, N));
        for (int t = 0; t < T; t++)
          for (int g = 0; g < Hk; g++) {
            const size_t off = kv.index(0, cur.slot[t], g, 0), qo = t * HD + (size_t)g * G * Dh;
            kq::ref::attention(&q[qo], HD, &hk[off], &hv[off], &want[qo], HD, 1, G, Dh, cur.pos[t], aa.scale, aa.window,
                               c == 2 ? &sinks[(size_t)g * G] : nullptr, scratch.data());
          }
        const std::string what = std::string(label) + " Dh=" + std::to_string(Dh);
        check("attention", what, compare(u_->get(out, want.size()), want));
        perf("attention", what, [&] { be.attention(kv, 0, dq, out, H, aa, T); });
      }
    }
  }

  // A sliding-window layer's ring (R = W + Tm positions, position p at p mod R, as gemma3 keeps
  // its local layers): 196 positions stored in chunks of 4, then a chunk of 4 more stored and
  // attended with window W; the reference runs ref::attention with that window over a linear
  // cache of every position.
  void attention_ring() {
    if (!offered(Op::kv_ring) || !offered(Op::attention_window)) return;
    const int Hk = 2, G = 2, H = Hk * G, Dh = 64, W = 40, Tm = 8, R = W + Tm, P = 196, Tc = 4;
    const size_t HD = (size_t)H * Dh, KD = (size_t)Hk * Dh;
    Backend& be = *u_->be;
    KvBuf kv = be.alloc_kv(1, 1, Hk, R, Dh, G, true);
    std::vector<uint16_t> hk((size_t)Hk * (P + Tc) * Dh), hv(hk.size());  // [Hk][P + Tc][Dh]
    for (int p0 = 0; p0 < P + Tc; p0 += Tc) {
      const Rows r = make_rows({0, 0, 0, 0}, {p0, p0 + 1, p0 + 2, p0 + 3}, 100);
      const auto k = random_floats((size_t)Tc * KD, 740 + p0, 1.f), v = random_floats((size_t)Tc * KD, 741 + p0, 1.f);
      be.set_rows(r.chunk());
      be.store_kv(kv, 0, u_->put(k), u_->put(v), Tc);
      for (int t = 0; t < Tc; t++)
        for (int g = 0; g < Hk; g++)
          for (int d = 0; d < Dh; d++) {
            hk[((size_t)g * (P + Tc) + p0 + t) * Dh + d] = f32_to_f16(k[t * KD + g * Dh + d]);
            hv[((size_t)g * (P + Tc) + p0 + t) * Dh + d] = f32_to_f16(v[t * KD + g * Dh + d]);
          }
    }
    const Rows cur = make_rows({0, 0, 0, 0}, {P, P + 1, P + 2, P + 3}, 100);
    const auto q = random_floats((size_t)Tc * HD, 750, 2.f);
    const float* dq = u_->put(q);
    float* out = be.alloc((size_t)Tc * HD);
    const AttnArgs aa{1.f / std::sqrt((float)Dh), W, nullptr};
    be.set_rows(cur.chunk());
    be.attention(kv, 0, dq, out, H, aa, Tc);
    std::vector<float> want((size_t)Tc * HD), scratch(kq::ref::attention_scratch_floats(G, Dh, P + Tc));
    for (int t = 0; t < Tc; t++)
      for (int g = 0; g < Hk; g++) {
        const size_t off = (size_t)g * (P + Tc) * Dh, qo = t * HD + (size_t)g * G * Dh;
        kq::ref::attention(&q[qo], HD, &hk[off], &hv[off], &want[qo], HD, 1, G, Dh, cur.pos[t], aa.scale, W, nullptr,
                           scratch.data());
      }
    check("attention", "ring R=48 window 40", compare(u_->get(out, want.size()), want));
    perf("attention", "ring R=48 window 40", [&] { be.attention(kv, 0, dq, out, H, aa, Tc); });
  }

  // route (both kinds), experts (swiglu) on the routed rows and the weighted sum.
  void moe() {
    Backend& be = *u_->be;
    const int T = 6, E = 8, Ek = 2, D = 256, F = 256;  // K-quants need rows of 256
    const Rows r = make_rows({0, 0, 0, 1, 1, 1}, {0, 1, 2, 0, 1, 2}, 100);
    be.set_rows(r.chunk());
    std::vector<int32_t> sel_host;
    std::vector<float> w_host;
    int32_t* sel = be.alloc_i32((size_t)T * Ek);
    float* weight = be.alloc((size_t)T * Ek);
    if (offered(Op::moe_route))
      for (Routing kind : {Routing::softmax_top_k, Routing::top_k_softmax}) {
        auto logits = random_floats((size_t)T * E, 800 + (int)kind, 4.f);
        logits[3] = logits[5];  // a tie: the lower index wins
        be.route(kind, u_->put(logits), E, Ek, sel, weight, T);
        std::vector<int32_t> want_sel((size_t)T * Ek);
        std::vector<float> want_w((size_t)T * Ek);
        for (int t = 0; t < T; t++) {
          std::vector<float> p(&logits[(size_t)t * E], &logits[(size_t)(t + 1) * E]);
          if (kind == Routing::softmax_top_k) kq::ref::softmax(p.data(), E);
          std::vector<int> idx(E);
          std::iota(idx.begin(), idx.end(), 0);
          std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return p[a] > p[b]; });
          double sum = 0;
          for (int k = 0; k < Ek; k++) sum += p[idx[k]];
          for (int k = 0; k < Ek; k++) {
            want_sel[t * Ek + k] = idx[k];
            want_w[t * Ek + k] = kind == Routing::softmax_top_k ? (float)(p[idx[k]] / sum) : p[idx[k]];
          }
          if (kind == Routing::top_k_softmax) kq::ref::softmax(&want_w[(size_t)t * Ek], Ek);
        }
        const char* what = kind == Routing::softmax_top_k ? "softmax_top_k" : "top_k_softmax";
        sel_host = u_->get_i32(sel, want_sel.size());
        w_host = u_->get(weight, want_w.size());
        check("route_sel", what, parity::compare_exact(sel_host.data(), want_sel.data(), want_sel.size()));
        check("route", what, compare(w_host, want_w));
      }
    if (sel_host.empty()) return;
    if (offered(Op::moe_experts))
      for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K}) {
        auto gate = harness::random_matrix(t, D, (int64_t)E * F, 1.f / std::sqrt((float)D), 900 + (int)t);
        auto up = harness::random_matrix(t, D, (int64_t)E * F, 1.f / std::sqrt((float)D), 901 + (int)t);
        auto down = harness::random_matrix(t, F, (int64_t)E * D, 1.f / std::sqrt((float)F), 902 + (int)t);
        const ExpertMatrices hg{t, D, F, gate.data(), F * ggml_row_bytes(t, D)};
        const ExpertMatrices hu{t, D, F, up.data(), F * ggml_row_bytes(t, D)};
        const ExpertMatrices hd{t, F, D, down.data(), D * ggml_row_bytes(t, F)};
        ExpertFfn f;
        try {
          f.gate = be.experts("test.gate", hg);
          f.up = be.experts("test.up", hu);
          f.down = be.experts("test.down", hd);
        } catch (const std::exception& e) {
          rep_.skip(u_->name, std::string("experts ") + ggml_type_name(t), e.what());
          continue;
        }
        f.E = E;
        f.act = ExpertAct::swiglu;
        const auto xn = random_floats((size_t)T * D, 910, 1.f);
        float* res = be.alloc((size_t)T * Ek * D);
        be.experts(f, u_->put(xn), Ek, sel, res, T);
        std::vector<float> want((size_t)T * Ek * D), g(F), uu(F);
        for (int i = 0; i < T * Ek; i++) {
          const int e = sel_host[i];
          const float* xr = &xn[(size_t)(i / Ek) * D];
          kq::matmul_with(kq::ref_table(), hg.expert(e), xr, g.data(), 1, nullptr);
          kq::matmul_with(kq::ref_table(), hu.expert(e), xr, uu.data(), 1, nullptr);
          kq::ref::silu_mul(g.data(), uu.data(), F);
          kq::matmul_with(kq::ref_table(), hd.expert(e), g.data(), &want[(size_t)i * D], 1, nullptr);
        }
        check("experts", std::string("swiglu ") + ggml_type_name(t), compare(u_->get(res, want.size()), want));
      }
    if (offered(Op::weighted_sum)) {
      const int n = 128;
      const auto res = random_floats((size_t)T * Ek * n, 920, 1.f);
      float* y = be.alloc((size_t)T * n);
      be.weighted_sum(y, u_->put(res), weight, Ek, n, T);
      std::vector<double> want((size_t)T * n, 0.0);
      for (int t = 0; t < T; t++)
        for (int k = 0; k < Ek; k++)
          for (int d = 0; d < n; d++) want[t * n + d] += (double)res[((size_t)t * Ek + k) * n + d] * w_host[t * Ek + k];
      check("weighted_sum", "T=6 Ek=2 n=128", compare(u_->get(y, want.size()).data(), want.data(), want.size()));
    }
  }

  const Args& a_;
  parity::Report& rep_;
  Under* u_ = nullptr;
};

}  // namespace
}  // namespace mb

int main(int argc, char** argv) {
  using namespace mb;
  Args a;
  for (int i = 1; i < argc; i++) {
    const std::string k = argv[i];
    if (k == "--perf") a.perf = true;
    else if (k == "--backend" && i + 1 < argc) a.backend = argv[++i];
    else if (k == "--op" && i + 1 < argc) a.op = argv[++i];
    else {
      std::fprintf(stderr, "usage: test_backend_ops [--perf] [--backend cpu|cuda] [--op NAME]\n");
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out as it is made, also into a pipe
  parity::Report rep;
  Harness h(a, rep);
  if (a.backend.empty() || a.backend == "cpu") {
    ThreadPool pool(2);
    auto be = model_detail::cpu_backend(&pool, 64);
    Under u{std::string("cpu/") + kernels_backend(), be.get()};
    h.run(u);
  }
#ifdef MB_HAVE_CUDA
  if (a.backend.empty() || a.backend == "cuda") {
    // The CUDA backend is made for a model: a small random qwen3 gives it its sizes.
    const auto img = harness::make_random_gguf(harness::shape_preset("qwen3-tiny", GgmlType::Q8_0), 1, 0);
    std::shared_ptr<GgufFile> f(GgufFile::parse(img.data(), img.size()));
    const cuda::DeviceInfo dev = cuda::probe_device();
    if (dev.count == 0) {
      rep.skip("cuda", "all", "no CUDA device (" + dev.error + ")");
    } else {
      try {
        auto be = cuda_backend(f, read_config(*f), model_detail::Capacity{2, 256, 64});
        Under u{"cuda", be.get()};
        h.run(u);
      } catch (const std::exception& e) {
        rep.fail("cuda", "all", std::string("raised: ") + e.what());
      }
    }
  }
#else
  if (a.backend == "cuda") rep.skip("cuda", "all", "this build has no CUDA (npm run build:cuda)");
#endif
  rep.summary("test_backend_ops");
  return rep.failed() ? 1 : 0;
}
