// The one error metric of every parity check, CPU and CUDA, kernel-level and backend-level
// (test-backend-ops' habit): a result against its scalar reference on the same inputs, as
//   nmse     = sum (got - want)^2 / sum want^2          (normalized mean squared error)
//   max_norm = max |got - want| / scale(i)              (worst error; scale: max |want| unless the
//                                                        check names a per-element scale)
// with a NaN or infinity in got counting as infinite error, and one tolerance table keyed by op
// name. Report prints one line per check ("ok  " / "FAIL" / "skip", backend, op, case, both
// errors) and, in perf mode, one line per timing. Header-only: the CPU tests, the CPU and CUDA
// backends' harness and the CUDA kernels' harness include it alike.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace mb {
namespace parity {

struct Error {
  double nmse = 0;
  double max_norm = 0;
  bool finite = true;
};

// scale(i) > 0: what |got[i] - want[i]| is measured in for max_norm.
template <class A, class B, class Scale>
Error compare(const A* got, const B* want, size_t n, Scale scale) {
  Error e;
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double g = (double)got[i], w = (double)want[i];
    if (!std::isfinite(g)) {
      e.finite = false;
      continue;
    }
    const double d = g - w;
    num += d * d;
    den += w * w;
    e.max_norm = std::fmax(e.max_norm, std::fabs(d) / scale(i));
  }
  e.nmse = den > 0 ? num / den : num;
  if (!e.finite) e.nmse = e.max_norm = INFINITY;
  return e;
}
// max_norm relative to the reference's largest magnitude.
template <class A, class B>
Error compare(const A* got, const B* want, size_t n) {
  double big = 1e-30;
  for (size_t i = 0; i < n; i++) big = std::fmax(big, std::fabs((double)want[i]));
  return compare(got, want, n, [big](size_t) { return big; });
}
template <class A, class B>
Error compare(const std::vector<A>& got, const B* want, size_t n) {
  return compare(got.data(), want, std::min(got.size(), n));
}
template <class A, class B>
Error compare(const std::vector<A>& got, const std::vector<B>& want) {
  return compare(got.data(), want.data(), std::min(got.size(), want.size()));
}
// Bits: 0 when every element is the same, else infinite (integer results: routing, sampling).
template <class A>
Error compare_exact(const A* got, const A* want, size_t n) {
  Error e;
  if (std::memcmp(got, want, n * sizeof(A)) != 0) e.nmse = e.max_norm = INFINITY;
  return e;
}

struct Tolerance {
  const char* op;   // an op name, matched as a prefix of the check's op
  double nmse;
  double max_norm;
};

// Per-op tolerances. Elementwise f32 ops: test-backend-ops' default NMSE 1e-7. Matmuls and
// attention, where the reference accumulates in another order or precision (activations quantized
// to the weight's partner type on the CPU, f32 or f16 on CUDA): test-backend-ops' 5e-4, with
// max_norm the worst error as a fraction of sum |w x| (matmul's scale), the CUDA kernel checks'
// bounds unchanged. max_norm is what catches one wrong output among thousands (NMSE averages it
// away). First matching prefix wins.
inline const std::vector<Tolerance>& tolerances() {
  static const std::vector<Tolerance> t = {
      // CUDA kernel-level (kernels/cuda/tests/test_cuda_ops.cpp)
      {"matvec_experts", 5e-4, 1e-5},   // f32 sums: ~1e-6 of sum |w x|
      {"matvec", 5e-4, 1e-5},
      {"gemm_f16", 5e-4, 2e-3},         // the f16 GEMM rounds both operands: ~1e-3 of sum |w x|
      {"gemm_cublas", 5e-4, 1e-2},
      {"get_rows", 1e-10, 1e-6},        // of the row's largest value: the device may fuse d * q - m
      {"rmsnorm_rows", 1e-7, 1e-5},     // of |want| + 1e-3
      {"rope_", 1e-6, 1e-3},            // absolute: CPU angles by repeated products, GPU by exp2f
      {"silu_mul", 1e-7, 1e-5},         // of |want| + 1e-3
      {"attention_", 5e-4, 1e-4},       // absolute, against exact softmax in double over the f16 cache
      {"moe_route_weights", 1e-7, 1e-5},
      {"sample", 0, 0},
      // backend-level (model/tests/test_backend_ops.cpp)
      {"embed", 1e-10, 1e-6},
      // of sum |w x|: a CPU set meets ref/'s dot to ~1e-7 (the same quantized activations); CUDA keeps
      // f32 activations, ~1e-3 at worst from ref/'s q8 rounding of them
      {"matmul", 5e-4, 5e-3},
      {"rmsnorm", 1e-7, 1e-5},
      {"add", 1e-7, 1e-6},
      {"scale", 1e-7, 1e-6},
      {"copy_cols", 0, 0},
      {"move_rows", 0, 0},
      {"rope", 1e-6, 1e-4},
      {"store_kv", 0, 0},               // f16 bits
      {"attention", 5e-4, 1e-2},
      {"glu_silu", 1e-7, 1e-5},
      {"glu_gelu", 1e-6, 1e-3},         // through the f16 GELU table on the CPU
      {"softcap", 1e-7, 1e-5},
      {"route_sel", 0, 0},
      {"route", 1e-7, 1e-5},
      {"weighted_sum", 1e-7, 1e-5},
      {"experts", 5e-4, 5e-3},          // of max |want|, as matmul
  };
  return t;
}
inline Tolerance tolerance(const std::string& op) {
  for (const Tolerance& t : tolerances())
    if (op.compare(0, std::strlen(t.op), t.op) == 0) return t;
  return Tolerance{"default", 1e-7, 1e-5};
}
inline bool within(const Error& e, const Tolerance& t) { return e.finite && e.nmse <= t.nmse && e.max_norm <= t.max_norm; }

// Checks and timings of one run. Lines go to out (stdout unless told); json() lists the checks.
class Report {
 public:
  explicit Report(FILE* out = stdout) : out_(out) {}
  // Returns whether the check passed.
  bool add(const std::string& backend, const std::string& op, const std::string& what, const Error& e) {
    const Tolerance t = tolerance(op);
    const bool ok = within(e, t);
    std::fprintf(out_, "%s %-14s %-22s %-28s nmse %-9.3g (<= %-7.2g) max %-9.3g (<= %.2g)\n", ok ? "ok  " : "FAIL",
                 backend.c_str(), op.c_str(), what.c_str(), e.nmse, t.nmse, e.max_norm, t.max_norm);
    char b[96];
    std::snprintf(b, sizeof b, ",\"nmse\":%.3g,\"max\":%.3g}", e.finite ? e.nmse : -1.0, e.finite ? e.max_norm : -1.0);
    json_ += (json_.size() > 1 ? "," : "") + std::string("{\"backend\":\"") + backend + "\",\"op\":\"" + op +
             "\",\"case\":\"" + escape(what) + "\",\"ok\":" + (ok ? "true" : "false") + b;
    if (!ok) failed_++;
    checks_++;
    return ok;
  }
  // A check that could not run: fails it, naming why.
  void fail(const std::string& backend, const std::string& op, const std::string& why) {
    Error e;
    e.finite = false;
    e.nmse = e.max_norm = INFINITY;
    add(backend, op, why, e);
  }
  // An op the backend does not offer (Backend::supports): neither pass nor failure.
  void skip(const std::string& backend, const std::string& op, const std::string& why) {
    std::fprintf(out_, "skip %-14s %-22s %s\n", backend.c_str(), op.c_str(), why.c_str());
    skipped_++;
  }
  // Perf mode: us per call, and what one call moves (bytes) and computes (flop), 0 = not stated.
  void perf(const std::string& backend, const std::string& op, const std::string& what, double us, double bytes,
            double flop) {
    std::fprintf(out_, "perf %-14s %-22s %-28s %10.2f us", backend.c_str(), op.c_str(), what.c_str(), us);
    if (bytes > 0) std::fprintf(out_, "  %8.2f GB/s", bytes / us * 1e-3);
    if (flop > 0) std::fprintf(out_, "  %8.2f GFLOP/s", flop / us * 1e-3);
    std::fprintf(out_, "\n");
  }
  int failed() const { return failed_; }
  int checks() const { return checks_; }
  int skipped() const { return skipped_; }
  std::string json() const { return json_ + "]"; }
  void summary(const char* who) const {
    std::fprintf(out_, "%s: %s, %d check(s), %d failed, %d skipped\n", who, failed_ ? "FAIL" : "pass", checks_, failed_,
                 skipped_);
  }

 private:
  static std::string escape(const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o;
  }
  FILE* out_;
  std::string json_ = "[";
  int failed_ = 0, checks_ = 0, skipped_ = 0;
};

// Median-free perf timing: one warm-up call, then as many calls as fit in min_s (at least 3);
// sync() (may be empty) waits for a device. Returns us per call.
template <class Fn, class Sync>
double time_us(const Fn& fn, const Sync& sync, double min_s = 0.2) {
  using clk = std::chrono::steady_clock;
  fn();
  sync();
  int n = 0;
  const auto t0 = clk::now();
  double dt = 0;
  do {
    fn();
    n++;
    if (n >= 3) {
      sync();
      dt = std::chrono::duration<double>(clk::now() - t0).count();
    }
  } while (n < 3 || dt < min_s);
  return dt / n * 1e6;
}

// Deterministic inputs: the same seed gives the same values on every machine.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.f) {
  std::vector<float> v(n);
  uint64_t s = seed;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = ((float)(s >> 40) / 16777216.f * 2.f - 1.f) * scale;
  }
  return v;
}

}  // namespace parity
}  // namespace mb
