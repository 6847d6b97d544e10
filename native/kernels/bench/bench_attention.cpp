// Attention kernel throughput on SmolLM2-135M's shape (G = 3, Dh = 64), one
// thread, for every attention kernel this build and CPU can run (attention_kernels()): a prefill
// item (n = 32 positions, 96 query rows, as the model cuts a prefill) and a decode item (one
// position, 3 rows) at several depths p0 of the cache. Reports ms per call (fastest of the
// repeats, the least disturbed on a shared machine), GFLOP/s counting 4 * Dh flops per (row, key)
// pair actually attended (QK and PV), and key+value GB/s read from the f16 cache. A third item,
// "swa+sink", is a prefill item of gpt-oss's sliding-window layers (G = 8, W = 128, a sink per
// head): the kernels skip the keys before the window, so its cost stays flat with depth. A fourth,
// "qwen", is a prefill item of Qwen2.5-Coder-0.5B (G = 7, n = 13 positions: 91 rows, as the model
// cuts a prefill) at the depths of a coding agent's first prompt (2.6k, 10k and 18k keys).
// usage: bench_attention [--quick]     (--quick: depths up to 4096, no scalar references)
//
// Dimension legend: n query positions, G heads per KV head, Dh head dim, N = p0 + n keys.
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

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int Dh = 64;
  const std::vector<AttnKernel> kernels = attention_kernels();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::printf("%-8s %-18s %6s %4s %10s %9s %9s\n", "item", "kernel", "p0", "n", "best ms", "GFLOP/s", "KV GB/s");
  struct Item {
    const char* name;
    int n, G, window;
    bool sinks;
  };
  const std::vector<int> depths = {0, 512, 2048, 8192, 16384, 32736}, agent_depths = {2600, 10000, 18000};
  for (const Item& item : {Item{"prefill", 32, 3, 0, false}, Item{"decode", 1, 3, 0, false},
                           Item{"swa+sink", 32, 8, 128, true}, Item{"qwen", 13, 7, 0, false}}) {
    const int n = item.n, G = item.G;
    for (int p0 : G == 7 ? agent_depths : depths) {
      if (quick && p0 > 4096) continue;
      const int N = p0 + n;
      std::vector<float> sinks(G);
      for (auto& x : sinks) x = nd(rng);
      std::vector<float> q((size_t)n * G * Dh), out(q.size());
      std::vector<uint16_t> k((size_t)N * Dh), v((size_t)N * Dh);
      for (auto& x : q) x = nd(rng);
      for (auto& x : k) x = f2h(nd(rng));
      for (auto& x : v) x = f2h(nd(rng));
      double pairs = 0;  // (row, key) pairs attended
      for (int i = 0; i < n; i++) pairs += (double)G * (item.window ? std::min(item.window, p0 + i + 1) : p0 + i + 1);
      for (const AttnKernel& kern : kernels) {
        const bool scalar = std::strncmp(kern.name, "ref", 3) == 0;
        if (scalar && (quick || pairs > 2e5)) continue;
        std::vector<float> scratch(kern.scratch_floats(n * G, Dh, N));
        auto call = [&] {
          kern.fn(q.data(), (size_t)G * Dh, k.data(), v.data(), out.data(), (size_t)G * Dh, n, G, Dh, p0, 0.125f,
                  item.window, item.sinks ? sinks.data() : nullptr, scratch.data());
        };
        call();  // warm up
        double best = 1e30, el = 0;
        int iters = 0;
        while (iters < 3 || el < (quick ? 0.05 : 0.25)) {
          const double t0 = now();
          call();
          const double d = now() - t0;
          best = std::min(best, d);
          el += d;
          iters++;
        }
        const int read = item.window ? std::min(N, item.window + n) : N;  // keys the call needs
        std::printf("%-8s %-18s %6d %4d %10.4f %9.2f %9.2f\n", item.name, kern.name, p0, n, best * 1e3,
                    4.0 * Dh * pairs / best / 1e9, 2.0 * read * Dh * 2 / best / 1e9);
      }
    }
  }
  return 0;
}
