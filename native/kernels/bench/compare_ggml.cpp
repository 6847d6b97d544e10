// Side-by-side with llama.cpp's own CPU kernels, loaded at run time from a ggml-cpu shared
// library (node-llama-cpp ships them, e.g. .../bins/linux-x64/libggml-cpu-haswell.so, which is
// the AVX2+FMA+F16C build and so the like-for-like comparison for avx2/).
// For each weight type: ggml's activation quantizer vs ours (bytes), ggml's vec_dot vs our
// matmul on the same quantized data (largest relative difference), and single-thread time of a
// T=1 product over N rows (both including the activation quantization).
// usage: compare_ggml /path/to/libggml-cpu-haswell.so
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dispatch.h"

using namespace mb;
using namespace mb::kq;

namespace {
// Mirrors ggml-cpu.h (ggml_type_traits_cpu) of the llama.cpp that node-llama-cpp 3.x bundles.
using ggml_from_float_t = void (*)(const float* x, void* y, int64_t k);
using ggml_vec_dot_t = void (*)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y, size_t by, int nrc);
struct ggml_type_traits_cpu {
  ggml_from_float_t from_float;
  ggml_vec_dot_t vec_dot;
  int vec_dot_type;
  int64_t nrows;
};
using get_traits_t = const ggml_type_traits_cpu* (*)(int type);

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s libggml-cpu-<variant>.so\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  auto get_traits = (get_traits_t)dlsym(lib, "ggml_get_type_traits_cpu");
  auto cpu_init = (void (*)())dlsym(lib, "ggml_cpu_init");
  if (!get_traits) {
    std::fprintf(stderr, "ggml_get_type_traits_cpu not found\n");
    return 2;
  }
  if (cpu_init) cpu_init();
  const KernelTable& kt = active_table();
  std::printf("ours: %s table; ggml: %s\n", kt.name, argv[1]);
  std::printf("%-5s %5s %6s %12s %14s %11s %11s %7s\n", "type", "K", "N", "x bytes", "max rel diff", "ggml ms", "ours ms",
              "ratio");
  struct Case { GgmlType t; int64_t K, N; };
  const Case cases[] = {
      {GgmlType::Q4_1, 576, 1536}, {GgmlType::Q4_1, 1536, 576}, {GgmlType::Q8_0, 576, 49152},
      {GgmlType::Q4_0, 1536, 1536}, {GgmlType::Q5_0, 1536, 1536}, {GgmlType::Q5_1, 1536, 1536},
      {GgmlType::Q8_0, 1536, 1536}, {GgmlType::Q4_K, 1536, 1536}, {GgmlType::Q5_K, 1536, 1536},
      {GgmlType::Q6_K, 1536, 1536}, {GgmlType::F16, 1536, 1536},
  };
  std::mt19937 rng(7);
  int bad = 0;
  for (const Case& c : cases) {
    const ggml_type_traits_cpu* tr = get_traits((int)c.t);
    if (!tr || !tr->vec_dot || (int)vec_dot_type(c.t) != tr->vec_dot_type) {
      std::printf("%-5s: ggml pairs it differently or lacks it, skipped\n", ggml_type_name(c.t));
      continue;
    }
    const size_t wrb = ggml_row_bytes(c.t, c.K);
    std::vector<uint8_t> w(wrb * c.N);
    for (auto& b : w) b = rng() & 0xff;
    const size_t bb = block_bytes(c.t);
    for (size_t o = 0; o < w.size(); o += bb) {  // sane scales, as in the other tests
      const half d = f2h(std::uniform_real_distribution<float>(0.001f, 0.02f)(rng));
      if (c.t == GgmlType::Q6_K) std::memcpy(&w[o + bb - 2], &d, 2);
      else if (c.t == GgmlType::F16) std::memcpy(&w[o], &d, 2);
      else std::memcpy(&w[o], &d, 2);
      if (c.t == GgmlType::Q8_0) for (size_t j = 2; j < bb; j++) if (w[o + j] == 0x80) w[o + j] = 0x81;
      if (c.t == GgmlType::Q4_1 || c.t == GgmlType::Q5_1 || c.t == GgmlType::Q4_K || c.t == GgmlType::Q5_K) std::memcpy(&w[o + 2], &d, 2);
    }
    std::vector<float> x(c.K);
    for (auto& v : x) v = std::normal_distribution<float>(0, 1)(rng);
    const GgmlType vt = vec_dot_type(c.t);
    const size_t xrb = ggml_row_bytes(vt, c.K);
    std::vector<uint8_t> xg(xrb), xo(xrb);
    // the activation quantizer is the from_float of the partner type (a type's own from_float
    // quantizes weights)
    const ggml_type_traits_cpu* xtr = get_traits((int)vt);
    const ggml_from_float_t quant = xtr ? xtr->from_float : nullptr;
    if (quant) quant(x.data(), xg.data(), c.K);
    else std::memcpy(xg.data(), x.data(), xrb);
    quantize_row_for(kt, c.t, x.data(), xo.data(), c.K);
    const bool same_x = xg == xo;
    // dots on ggml's quantized x, so only the dot kernels differ
    std::vector<float> yg(c.N), yo(c.N);
    for (int64_t r = 0; r < c.N; r++) tr->vec_dot((int)c.K, &yg[r], 0, w.data() + r * wrb, 0, xg.data(), 0, 1);
    for (int64_t r = 0; r < c.N; r++) yo[r] = kt.dot[type_slot(c.t)](c.K, w.data() + r * wrb, xg.data());
    double maxrel = 0, scale = 0;
    for (int64_t r = 0; r < c.N; r++) scale = std::max(scale, (double)std::fabs(yg[r]));
    for (int64_t r = 0; r < c.N; r++) maxrel = std::max(maxrel, std::fabs((double)yg[r] - yo[r]) / scale);
    if (maxrel > 1e-5) bad++;
    // timing: best of several T=1 products, quantization included on both sides
    QMatrix W{c.t, c.K, c.N, w.data()};
    double tg = 1e30, to = 1e30;
    for (int rep = 0; rep < 16; rep++) {
      // alternate which side runs first, so neither always finds the other's data in cache
      for (int side = 0; side < 2; side++) {
        const bool ggml_turn = (side == 0) == (rep % 2 == 0);
        const double t0 = now();
        if (ggml_turn) {
          if (quant) quant(x.data(), xg.data(), c.K);
          for (int64_t r = 0; r < c.N; r++) tr->vec_dot((int)c.K, &yg[r], 0, w.data() + r * wrb, 0, xg.data(), 0, 1);
          tg = std::min(tg, now() - t0);
        } else {
          matmul_with(kt, W, x.data(), yo.data(), 1, nullptr);
          to = std::min(to, now() - t0);
        }
      }
    }
    std::printf("%-5s %5lld %6lld %12s %14.2e %11.4f %11.4f %7.2f\n", ggml_type_name(c.t), (long long)c.K, (long long)c.N,
                same_x ? "identical" : "differ", maxrel, tg * 1e3, to * 1e3, tg / to);
  }
  std::printf("%s\n", bad ? "DIFFERENCES above 1e-5" : "all dots within 1e-5 of ggml (relative to the largest output)");
  return bad ? 1 : 0;
}
