// Our attention kernel against llama.cpp's own non-flash attention graph (mul_mat(k, q) ->
// soft_max_ext with the causal mask -> mul_mat(v^T, kq), as llama.cpp builds it), computed by a
// ggml CPU backend loaded with dlopen (node-llama-cpp ships them; no build dependency), on random
// inputs: n query positions from p0 (G heads), keys [0, p0 + n).
//  - n >= 2 (a prefill batch): ggml runs its f16 GEMM (tinyBLAS) and the outputs must be bit
//    identical (an AVX-512 variant such as zen4 is the one our arithmetic follows);
//  - n = 1 (a decode step): ggml takes its single-token path (ggml_vec_dot_f16, another summation
//    order), which we do not follow (see kernels.h); reported, not required: how many f16
//    probabilities differ (read exactly through a one-hot V: v[j][d] = 1 where j = d + Dh*w), and
//    the largest relative output difference;
//  - time per call, both single-threaded (ggml's includes building nothing, only the compute).
// usage: compare_ggml_attention DIR_WITH_libggml-base.so CPU_VARIANT   (e.g. .../bins/linux-x64 zen4)
//
// Dimension legend: n query positions, G query heads per KV head, Dh head dim, N = p0 + n keys.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dispatch.h"

using namespace mb;
using namespace mb::kq;

namespace {
// The few declarations of ggml.h / ggml-cpu.h this needs (C ABI).
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_init_params {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};
constexpr int GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1;
struct Ggml {
  ggml_context* (*init)(ggml_init_params);
  void (*free)(ggml_context*);
  ggml_tensor* (*new_tensor_3d)(ggml_context*, int, int64_t, int64_t, int64_t);
  ggml_tensor* (*mul_mat)(ggml_context*, ggml_tensor*, ggml_tensor*);
  ggml_tensor* (*soft_max_ext)(ggml_context*, ggml_tensor*, ggml_tensor*, float, float);
  ggml_cgraph* (*new_graph)(ggml_context*);
  void (*build_forward_expand)(ggml_cgraph*, ggml_tensor*);
  void* (*get_data)(const ggml_tensor*);
  int (*graph_compute_with_ctx)(ggml_context*, ggml_cgraph*, int);
  void (*cpu_init)();
};

template <class F>
bool sym(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (!*f) std::fprintf(stderr, "missing symbol %s\n", name);
  return *f != nullptr;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Inputs {
  int G, Dh, p0, n, N;
  std::vector<float> q;        // [n][G][Dh] (ours)
  std::vector<uint16_t> k, v;  // [N][Dh]
};

// llama.cpp's graph; out [n][G][Dh]; returns the compute time. The keys are padded to a multiple
// of 256 with masked cells, as llama.cpp pads the KV cells it attends to (which is also what lets
// ggml take its GEMM path: it wants the key count to be a multiple of 4 or 16).
double run_ggml(const Ggml& g, const Inputs& in, float scale, std::vector<float>& out) {
  const int G = in.G, Dh = in.Dh, n = in.n, N = (in.N + 255) / 256 * 256;
  ggml_init_params ip{(size_t)256 << 20, nullptr, false};
  ggml_context* ctx = g.init(ip);
  ggml_tensor* tk = g.new_tensor_3d(ctx, GGML_TYPE_F16, Dh, N, 1);
  ggml_tensor* tq = g.new_tensor_3d(ctx, GGML_TYPE_F32, Dh, n, G);
  ggml_tensor* tv = g.new_tensor_3d(ctx, GGML_TYPE_F16, N, Dh, 1);  // V transposed, as llama.cpp's non-flash cache
  ggml_tensor* tm = g.new_tensor_3d(ctx, GGML_TYPE_F32, N, n, 1);   // causal mask
  std::memset(g.get_data(tk), 0, (size_t)N * Dh * 2);
  std::memcpy(g.get_data(tk), in.k.data(), in.k.size() * 2);
  float* qd = (float*)g.get_data(tq);
  for (int h = 0; h < G; h++)
    for (int i = 0; i < n; i++) std::memcpy(qd + ((size_t)h * n + i) * Dh, &in.q[((size_t)i * G + h) * Dh], Dh * 4);
  uint16_t* vd = (uint16_t*)g.get_data(tv);
  for (int j = 0; j < N; j++)
    for (int d = 0; d < Dh; d++) vd[(size_t)d * N + j] = j < in.N ? in.v[(size_t)j * Dh + d] : 0;
  float* md = (float*)g.get_data(tm);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < N; j++) md[(size_t)i * N + j] = j <= in.p0 + i ? 0.0f : -INFINITY;
  ggml_tensor* kq = g.mul_mat(ctx, tk, tq);  // [N, n, G]
  kq = g.soft_max_ext(ctx, kq, tm, scale, 0.0f);
  ggml_tensor* kqv = g.mul_mat(ctx, tv, kq);  // [Dh, n, G]
  ggml_cgraph* gf = g.new_graph(ctx);
  g.build_forward_expand(gf, kqv);
  const double t0 = now();
  g.graph_compute_with_ctx(ctx, gf, 1);
  const double t = now() - t0;
  const float* od = (const float*)g.get_data(kqv);
  out.resize((size_t)n * G * Dh);
  for (int h = 0; h < G; h++)
    for (int i = 0; i < n; i++) std::memcpy(&out[((size_t)i * G + h) * Dh], od + ((size_t)h * n + i) * Dh, Dh * 4);
  g.free(ctx);
  return t;
}

double run_ours(const KernelTable& kt, const Inputs& in, float scale, std::vector<float>& out) {
  std::vector<float> scratch(kt.attention_scratch(in.n * in.G, in.Dh, in.N));
  out.resize((size_t)in.n * in.G * in.Dh);
  const double t0 = now();
  kt.attention(in.q.data(), (size_t)in.G * in.Dh, in.k.data(), in.v.data(), out.data(), (size_t)in.G * in.Dh, in.n,
               in.G, in.Dh, in.p0, scale, 0, nullptr, scratch.data());
  return now() - t0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR_WITH_libggml-base.so CPU_VARIANT (e.g. zen4, haswell)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  void* base = dlopen((dir + "/libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
  void* cpu = base ? dlopen((dir + "/libggml-cpu-" + argv[2] + ".so").c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (!cpu) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  Ggml g{};
  const bool ok = sym(base, "ggml_init", &g.init) && sym(base, "ggml_free", &g.free) &&
                  sym(base, "ggml_new_tensor_3d", &g.new_tensor_3d) && sym(base, "ggml_mul_mat", &g.mul_mat) &&
                  sym(base, "ggml_soft_max_ext", &g.soft_max_ext) && sym(base, "ggml_new_graph", &g.new_graph) &&
                  sym(base, "ggml_build_forward_expand", &g.build_forward_expand) &&
                  sym(base, "ggml_get_data", &g.get_data) &&
                  sym(cpu, "ggml_graph_compute_with_ctx", &g.graph_compute_with_ctx);
  if (!ok) return 2;
  if (sym(cpu, "ggml_cpu_init", &g.cpu_init)) g.cpu_init();

  const KernelTable& kt = active_table();
  std::printf("ours: %s table; ggml: libggml-cpu-%s\n", kt.name, argv[2]);
  std::printf("%3s %4s %6s %4s %14s %14s %10s %10s\n", "G", "Dh", "p0", "n", "outputs", "p16 differ", "ggml ms",
              "ours ms");
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int bad = 0;
  struct Case { int G, Dh, p0, n; float qs; };
  const Case cases[] = {{3, 64, 0, 32, 1.0f},   {3, 64, 200, 56, 4.0f}, {3, 64, 1000, 24, 2.0f}, {4, 128, 300, 17, 2.0f},
                        {1, 64, 0, 130, 1.0f},  {3, 64, 4096, 32, 2.0f}, {3, 64, 63, 1, 1.0f},    {3, 64, 255, 1, 4.0f},
                        {3, 64, 1023, 1, 2.0f}, {3, 64, 4095, 1, 2.0f}};
  for (const Case& c : cases) {
    Inputs in{c.G, c.Dh, c.p0, c.n, c.p0 + c.n, {}, {}, {}};
    const float scale = 1.0f / std::sqrt((float)c.Dh);
    in.q.resize((size_t)c.n * c.G * c.Dh);
    in.k.resize((size_t)in.N * c.Dh);
    in.v.resize(in.k.size());
    for (auto& x : in.q) x = nd(rng) * c.qs;
    for (auto& x : in.k) x = f2h(nd(rng));
    for (auto& x : in.v) x = f2h(nd(rng));
    std::vector<float> mine, theirs;
    double tg = 1e30, to = 1e30;
    for (int rep = 0; rep < 3; rep++) {
      tg = std::min(tg, run_ggml(g, in, scale, theirs));
      to = std::min(to, run_ours(kt, in, scale, mine));
    }
    char outputs[64], probs[32] = "-";
    if (c.n >= 2) {
      size_t differ = 0;
      for (size_t i = 0; i < mine.size(); i++) differ += std::memcmp(&mine[i], &theirs[i], 4) != 0;
      std::snprintf(outputs, sizeof outputs, differ ? "%zu DIFFER" : "identical", differ);
      if (differ) bad++;
    } else {
      double amax = 0, dmax = 0;
      for (size_t i = 0; i < mine.size(); i++) {
        amax = std::max(amax, (double)std::fabs(theirs[i]));
        dmax = std::max(dmax, (double)std::fabs(mine[i] - theirs[i]));
      }
      std::snprintf(outputs, sizeof outputs, "rel %.1e", dmax / amax);
      // probabilities, Dh keys at a time through a one-hot V
      Inputs oh = in;
      int differ = 0;
      for (int w = 0; w * c.Dh < in.N; w++) {
        for (int j = 0; j < in.N; j++)
          for (int d = 0; d < c.Dh; d++) oh.v[(size_t)j * c.Dh + d] = (j == d + c.Dh * w) ? f2h(1.0f) : 0;
        run_ggml(g, oh, scale, theirs);
        run_ours(kt, oh, scale, mine);
        for (int h = 0; h < c.G; h++)
          for (int d = 0; d < c.Dh && d + c.Dh * w < in.N; d++)
            differ += std::memcmp(&mine[(size_t)h * c.Dh + d], &theirs[(size_t)h * c.Dh + d], 4) != 0;
      }
      std::snprintf(probs, sizeof probs, "%d of %d", differ, in.N * c.G);
    }
    std::printf("%3d %4d %6d %4d %14s %14s %10.4f %10.4f\n", c.G, c.Dh, c.p0, c.n, outputs, probs, tg * 1e3, to * 1e3);
  }
  std::printf("%s\n", bad ? "PREFILL OUTPUTS DIFFER from ggml's" : "prefill outputs bit-identical to ggml's");
  return bad ? 1 : 0;
}
