// gelu_mul (gemma3's GeGLU) throughput, one thread, for each kernel set this build and CPU can
// run: a prefill chunk's worth (512 rows of Gemma 3 270M's F = 2048) and one decode row. Reports
// ns per element (fastest of the repeats, the least disturbed on a shared machine).
// usage: bench_geglu
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "dispatch.h"

using namespace mb::kq;

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int main() {
  std::vector<const KernelTable*> sets = {&ref_table()};
  if (const KernelTable* t = avx2_table()) sets.push_back(t);
  if (const KernelTable* t = avx512_table()) sets.push_back(t);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::printf("%-12s %8s %12s\n", "kernel", "elements", "best ns/elem");
  for (const int n : {512 * 2048, 2048}) {
    std::vector<float> gate(n), up(n), work(n);
    for (auto& x : gate) x = nd(rng);
    for (auto& x : up) x = nd(rng);
    for (const KernelTable* kt : sets) {
      double best = 1e30;
      const int reps = n > 100000 ? 5 : 2000;
      for (int r = 0; r < reps; r++) {
        work = gate;
        const double t0 = now();
        kt->gelu_mul(work.data(), up.data(), n);
        best = std::min(best, now() - t0);
      }
      std::printf("%-12s %8d %12.3f\n", kt->name, n, best * 1e9 / n);
    }
  }
  return 0;
}
