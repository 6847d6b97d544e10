// Attention kernel tests (mb::attention, kernels.h):
//  - ref/ against the definition computed in double (q rounded to f16, full softmax,
//    probabilities rounded to f16) on random inputs: several head dims (incl. one that is not a
//    multiple of 8, which falls back to ref, and one that is not a multiple of 16), GQA group
//    sizes, and runs (p0, n) around the key block size, so the causal edge lands on, before and
//    after block, 16-key chunk and 4-key group boundaries. A probability within float noise of an
//    f16 rounding midpoint may round either way in float arithmetic; each such key adds its f16
//    step times |v| to the allowed error;
//  - avx2/ against ref/, bit for bit (both carry out llama.cpp's arithmetic, see ref/ops.cpp);
//  - batch independence, bit for bit: a run computed at once equals each of its positions
//    computed alone and the run cut in two at any point;
//  - no reads past the keys [0, p0 + n) and no use of stale scratch (both are NaN-poisoned);
//  - the flash kernels (ref-flash and the AVX-512 ones, see attention_kernels()) against the
//    definition without the f16 rounding of the probabilities, computed in double, within a
//    stated tolerance relative to B = sum_j p_j |v_j| (the output's scale): f32 kernels 1e-5 B,
//    the bf16 one 2^-7 B + 1e-5 B (p and v each rounded to bf16, unit roundoff 2^-8: each product within 2^-7 of its
//    value); and bit for bit batch independence for each, like the exact kernels;
//  - all of the above again with a sliding window W (each row sees keys [p - W + 1, p]) and with
//    sinks (a logit per head that joins the softmax without a value), alone and together: the
//    definitions take them as llama.cpp does; the key blocks wholly before the first row's
//    window are NaN-poisoned (never read); the plain calls (W = 0, no sinks) of the tables are
//    the calls every caller without a window makes, checked as before.
//
// Dimension legend: n query positions from p0, G query heads per KV head, Dh head dim,
// R = n * G query rows, N = p0 + n keys.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check_counted.h"
#include "dispatch.h"
#include "ref/ref.h"

using namespace mb;
using namespace mb::kq;

static std::mt19937 rng(7);

struct Case {
  int Dh, G, p0, n;
  float qscale;      // spread of the scores: 1 is a soft softmax, 6 a peaky one that moves the max often
  int window = 0;    // W, 0 for none
  bool sinks = false;
};

struct Inputs {
  int Dh, G, p0, n;
  size_t ldq;                 // floats between positions of q and out (wider than G*Dh: strides are honoured)
  std::vector<float> q;       // [n][ldq]
  std::vector<uint16_t> k, v; // [N + 8][Dh]; the 8 rows past N are NaN (must never be read)
  int window;
  std::vector<float> sinks;   // [G], empty for none
  const float* sink_ptr() const { return sinks.empty() ? nullptr : sinks.data(); }
  int first_key(int i) const { return window > 0 ? std::max(0, p0 + i - window + 1) : 0; }  // row i's window start
};

static Inputs make_inputs(const Case& c) {
  Inputs in{c.Dh, c.G, c.p0, c.n, (size_t)c.G * c.Dh + 8, {}, {}, {}, c.window, {}};
  const int N = c.p0 + c.n;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  in.q.resize((size_t)c.n * in.ldq);
  for (auto& x : in.q) x = nd(rng) * c.qscale;
  in.k.resize((size_t)(N + 8) * c.Dh);
  in.v.resize((size_t)(N + 8) * c.Dh);
  for (size_t i = 0; i < (size_t)N * c.Dh; i++) {
    in.k[i] = f2h(nd(rng));
    in.v[i] = f2h(nd(rng) * 2.0f);
  }
  for (size_t i = (size_t)N * c.Dh; i < in.k.size(); i++) in.k[i] = in.v[i] = 0x7e00;  // f16 NaN
  // blocks wholly before the first row's window: never read
  for (size_t i = 0; i < (size_t)(in.first_key(0) / ref::kFlashKeyBlock * ref::kFlashKeyBlock) * c.Dh; i++)
    in.k[i] = in.v[i] = 0x7e00;
  if (c.sinks) {
    // around the scores' range: some sinks above every score of a row (the max moves), some below
    in.sinks.resize(c.G);
    for (auto& x : in.sinks) x = nd(rng) * 2.0f * c.qscale;
  }
  return in;
}

// Runs positions [i0, i0 + m) of the inputs' run through fn; out rows land at their place in out.
struct Attn {
  AttnFn fn;
  AttnScratchFn scratch_floats;
};
static Attn of(const KernelTable& kt) { return {kt.attention, kt.attention_scratch}; }
static Attn of(const AttnKernel& k) { return {k.fn, k.scratch_floats}; }

static void run_part(const Attn& a, const Inputs& in, int i0, int m, std::vector<float>& out) {
  std::vector<float> scratch(a.scratch_floats(m * in.G, in.Dh, in.p0 + i0 + m), NAN);
  a.fn(in.q.data() + (size_t)i0 * in.ldq, in.ldq, in.k.data(), in.v.data(), out.data() + (size_t)i0 * in.ldq, in.ldq, m,
     in.G, in.Dh, in.p0 + i0, 1.0f / std::sqrt((float)in.Dh), in.window, in.sink_ptr(), scratch.data());
}
static std::vector<float> run_all(const Attn& fn, const Inputs& in) {
  std::vector<float> out((size_t)in.n * in.ldq, -7.0f);  // the gaps between rows must stay untouched
  run_part(fn, in, 0, in.n, out);
  return out;
}

// s[j] = exp(score_j - max) of query row i, head h, over keys [first_key(i), p0 + i] (the f16-
// rounded query, 0 elsewhere); returns their sum with the sink's term.
static double exp_scores(const Inputs& in, int i, int h, std::vector<double>& s) {
  const double scale = 1.0 / std::sqrt((double)in.Dh);
  const float* qr = in.q.data() + (size_t)i * in.ldq + (size_t)h * in.Dh;
  const int nk = in.p0 + i + 1, lo = in.first_key(i);
  s.assign(nk, -INFINITY);
  double mx = in.sinks.empty() ? -INFINITY : in.sinks[h];
  for (int j = lo; j < nk; j++) {
    double d = 0;
    for (int e = 0; e < in.Dh; e++) d += (double)h2f(f2h(qr[e])) * h2f(in.k[(size_t)j * in.Dh + e]);
    s[j] = d * scale;
    mx = std::fmax(mx, s[j]);
  }
  double sum = in.sinks.empty() ? 0.0 : std::exp(in.sinks[h] - mx);
  for (double& x : s) sum += (x = std::exp(x - mx));
  return sum;
}

// The definition in double: full softmax over keys [0, p0 + i], probabilities rounded to f16.
// slack[at]: the allowed extra error of output `at` from probabilities that sit so close to an
// f16 rounding midpoint (relative 1e-5, far above the float noise of the scores) that a float
// implementation may round them the other way.
static std::vector<double> exact(const Inputs& in, std::vector<double>* slack) {
  std::vector<double> out((size_t)in.n * in.ldq, 0.0);
  slack->assign(out.size(), 0.0);
  for (int i = 0; i < in.n; i++)
    for (int h = 0; h < in.G; h++) {
      const int nk = in.p0 + i + 1, lo = in.first_key(i);
      std::vector<double> s;
      const double sum = exp_scores(in, i, h, s);
      const size_t at = (size_t)i * in.ldq + (size_t)h * in.Dh;
      for (int j = lo; j < nk; j++) {
        const double p = s[j] / sum;
        const double p16 = h2f(f2h((float)p));
        const double lo = h2f(f2h((float)(p * (1 - 1e-5)))), hi = h2f(f2h((float)(p * (1 + 1e-5))));
        for (int e = 0; e < in.Dh; e++) {
          const double ve = h2f(in.v[(size_t)j * in.Dh + e]);
          out[at + e] += p16 * ve;
          if (lo != hi) (*slack)[at + e] += (hi - lo) * std::fabs(ve);
        }
      }
    }
  return out;
}

// The flash definition in double: full softmax over keys [0, p0 + i] of the f16-rounded query, no
// rounding of the probabilities; bound[at] = sum_j p_j |v_j| for output `at`.
static std::vector<double> exact_flash(const Inputs& in, std::vector<double>* bound) {
  std::vector<double> out((size_t)in.n * in.ldq, 0.0);
  bound->assign(out.size(), 0.0);
  for (int i = 0; i < in.n; i++)
    for (int h = 0; h < in.G; h++) {
      const int nk = in.p0 + i + 1, lo = in.first_key(i);
      std::vector<double> s;
      const double sum = exp_scores(in, i, h, s);
      const size_t at = (size_t)i * in.ldq + (size_t)h * in.Dh;
      for (int j = lo; j < nk; j++)
        for (int e = 0; e < in.Dh; e++) {
          const double ve = h2f(in.v[(size_t)j * in.Dh + e]);
          out[at + e] += s[j] / sum * ve;
          (*bound)[at + e] += s[j] / sum * std::fabs(ve);
        }
    }
  return out;
}

// The run at once equals each position alone and the run cut in two, bit for bit.
static void check_batch_independence(const Attn& a, const char* name, const Inputs& in, const std::vector<float>& all,
                                     const std::string& what) {
  std::vector<float> alone((size_t)in.n * in.ldq, -7.0f);
  for (int i = 0; i < in.n; i++) run_part(a, in, i, 1, alone);
  CHECK(std::memcmp(alone.data(), all.data(), all.size() * 4) == 0, "%s %s: positions alone differ from the run", name,
        what.c_str());
  if (in.n > 1) {
    // its own generator, so the cases' inputs do not depend on how many kernels this CPU runs
    static std::mt19937 cut_rng(11);
    const int cut = 1 + (int)(cut_rng() % (unsigned)(in.n - 1));
    std::vector<float> two((size_t)in.n * in.ldq, -7.0f);
    run_part(a, in, 0, cut, two);
    run_part(a, in, cut, in.n - cut, two);
    CHECK(std::memcmp(two.data(), all.data(), all.size() * 4) == 0, "%s %s: run cut at %d differs", name, what.c_str(),
          cut);
  }
}

// max over the output rows of (|a - b| - slack) / bound (a NaN counts as infinite; slack and bound
// may be null: none, and 1), and whether the gaps between rows kept their fill
static double max_err(const Inputs& in, const std::vector<float>& a, const std::vector<double>& b,
                      const std::vector<double>* slack, const std::vector<double>* bound, bool* gaps_ok) {
  double e = 0;
  *gaps_ok = true;
  for (int i = 0; i < in.n; i++)
    for (size_t x = 0; x < in.ldq; x++) {
      const size_t at = (size_t)i * in.ldq + x;
      if (x < (size_t)in.G * in.Dh) {
        const double d = (std::fabs((double)a[at] - b[at]) - (slack ? (*slack)[at] : 0.0)) /
                         (bound ? std::fmax((*bound)[at], 1e-30) : 1.0);
        e = std::isnan(d) ? INFINITY : std::fmax(e, d);
      } else if (a[at] != -7.0f) {
        *gaps_ok = false;
      }
    }
  return e;
}
static std::vector<double> widen(const std::vector<float>& a) { return std::vector<double>(a.begin(), a.end()); }
static std::string name_of(const Case& c) {
  return "Dh=" + std::to_string(c.Dh) + " G=" + std::to_string(c.G) + " p0=" + std::to_string(c.p0) + " n=" +
         std::to_string(c.n) + " qscale=" + std::to_string(c.qscale) + " W=" + std::to_string(c.window) +
         (c.sinks ? " sinks" : "");
}

int main() {
  std::vector<Case> cases;
  // runs around the block (64) and 4-key-group boundaries, decode rows (n = 1) deep in a cache
  const int runs[][2] = {{0, 1},   {0, 2},   {0, 5},   {0, 37},  {0, 64},  {0, 65},   {0, 130}, {3, 1},
                         {15, 1},  {16, 1},  {62, 1},  {63, 1},  {64, 1},  {65, 1},   {61, 7},  {127, 3},
                         {100, 29}, {190, 70}, {1000, 1}, {1023, 2}, {1000, 45}, {2047, 1}};
  for (int Dh : {64, 128, 40, 12})
    for (int G : {1, 3, 4})
      for (auto& r : runs) {
        if ((Dh != 64 || G != 3) && r[0] + r[1] > 300) continue;  // long ones on the default model's shape only
        cases.push_back({Dh, G, r[0], r[1], 1.0f});
        if (Dh == 64) cases.push_back({Dh, G, r[0], r[1], 6.0f});
      }
  // sliding windows (the window's start on, before and after block and chunk edges; W = 1 sees
  // only the row itself) and sinks, alone and together
  const int wruns[][2] = {{0, 70}, {5, 1}, {63, 1}, {64, 2}, {100, 29}, {130, 64}, {190, 70}, {1000, 45}, {2047, 1}};
  for (int Dh : {64, 128, 40})
    for (int G : {1, 4})
      for (auto& r : wruns)
        for (int W : {0, 1, 17, 64, 100}) {
          if (Dh != 64 && r[0] + r[1] > 300) continue;
          for (int sinks = 0; sinks < 2; sinks++) {
            if (W == 0 && !sinks) continue;  // the plain cases above
            cases.push_back({Dh, G, r[0], r[1], Dh == 64 ? 6.0f : 1.0f, W, sinks == 1});
          }
        }

  const KernelTable* fast = avx2_table();
  if (!fast) std::printf("SKIPPED: no AVX2/FMA/F16C kernels on this build or CPU (ref checks only)\n");
  double worst_ref = 0;
  for (const Case& c : cases) {
    const Inputs in = make_inputs(c);
    const std::string what = name_of(c);
    std::vector<double> slack;
    const std::vector<double> want = exact(in, &slack);
    // Beyond the rounding-midpoint slack: outputs are sums of up to ~2000 terms p * v with
    // |v| <~ 8, summed in float by avx2 (a few 1e-6), and the probabilities off by the float
    // noise of the scores (~3e-6 relative at |s| ~ 30) where they do not change their f16 value.
    const double tol = 2e-5;
    bool gaps;
    const std::vector<float> r = run_all(of(ref_table()), in);
    const double er = max_err(in, r, want, &slack, nullptr, &gaps);
    worst_ref = std::fmax(worst_ref, er);
    CHECK(er <= tol && gaps, "ref vs exact %s: max err beyond slack %.3g (gaps %s)", what.c_str(), er,
          gaps ? "ok" : "written");
    if (!fast) continue;

    const std::vector<float> a = run_all(of(*fast), in);
    CHECK(std::memcmp(a.data(), r.data(), a.size() * 4) == 0, "avx2 %s: not bit-identical to ref (max diff %.3g)",
          what.c_str(), max_err(in, a, widen(r), nullptr, nullptr, &gaps));

    // each position alone, as a decode step computes it, and the run cut in two (prefill chunks end anywhere)
    check_batch_independence(of(*fast), "avx2", in, a, what);
  }
  // the flash kernels
  std::vector<AttnKernel> flash;
  for (const AttnKernel& k : attention_kernels())
    if (k.flash) flash.push_back(k);
  std::vector<double> worst_flash(flash.size(), 0.0);
  for (const Case& c : cases) {
    const Inputs in = make_inputs(c);
    const std::string what = name_of(c);
    std::vector<double> bound;
    const std::vector<double> want = exact_flash(in, &bound);
    for (size_t f = 0; f < flash.size(); f++) {
      const bool bf16 = std::strstr(flash[f].name, "bf16") != nullptr;
      // heads other than 64 and 128 go to the exact AVX2 kernel (f16 probabilities: 2^-11 B)
      const bool exact_fallback = std::strncmp(flash[f].name, "avx512", 6) == 0 && c.Dh != 64 && c.Dh != 128;
      const double tol = (bf16 && !exact_fallback ? std::ldexp(1.0, -7) : 0.0) + (exact_fallback ? std::ldexp(1.0, -10) : 0.0) + 1e-5;
      bool gaps;
      const std::vector<float> a = run_all(of(flash[f]), in);
      const double e = max_err(in, a, want, nullptr, &bound, &gaps);
      worst_flash[f] = std::fmax(worst_flash[f], exact_fallback ? 0.0 : e);
      CHECK(e <= tol && gaps, "%s vs exact %s: max err %.3g B (tolerance %.3g B; gaps %s)", flash[f].name, what.c_str(), e,
            tol, gaps ? "ok" : "written");
      check_batch_independence(of(flash[f]), flash[f].name, in, a, what);
    }
  }
  for (size_t f = 0; f < flash.size(); f++)
    std::printf("%s: max |out - exact| = %.3g B over %zu cases (B = sum_j p_j |v_j|)\n", flash[f].name, worst_flash[f],
                cases.size());

  // the reference is row by row, so it is batch independent by construction; check it once anyway
  {
    const Inputs in = make_inputs({64, 3, 70, 20, 1.0f});
    const std::vector<float> all = run_all(of(ref_table()), in);
    std::vector<float> alone((size_t)in.n * in.ldq, -7.0f);
    for (int i = 0; i < in.n; i++) run_part(of(ref_table()), in, i, 1, alone);
    CHECK(std::memcmp(alone.data(), all.data(), all.size() * 4) == 0, "ref: positions alone differ from the run");
  }
  // the public entry point routes to the picked table
  {
    const Inputs in = make_inputs({64, 3, 40, 9, 1.0f});
    std::vector<float> a((size_t)in.n * in.ldq, -7.0f), b = a;
    std::vector<float> scratch(attention_scratch_floats(in.n, in.G, in.Dh, in.p0 + in.n));
    const float sinks[3] = {0.5f, -1.0f, 3.0f};
    for (int W : {0, 7}) {
      mb::attention(in.q.data(), in.ldq, in.k.data(), in.v.data(), a.data(), in.ldq, in.n, in.G, in.Dh, in.p0, 0.125f,
                    W, W ? sinks : nullptr, scratch.data());
      active_table().attention(in.q.data(), in.ldq, in.k.data(), in.v.data(), b.data(), in.ldq, in.n, in.G, in.Dh,
                               in.p0, 0.125f, W, W ? sinks : nullptr, scratch.data());
      CHECK(a == b, "mb::attention differs from the active table's (W=%d)", W);
    }
  }
  std::printf("%zu cases; max |ref - exact| beyond the f16-midpoint slack %.3g; avx2 %s\n", cases.size(), worst_ref,
              fast ? "checked bit for bit against ref" : "not available");
  std::printf("%d checks, %d failed\n", g_checks, g_fail);
  return g_fail ? 1 : 0;
}
