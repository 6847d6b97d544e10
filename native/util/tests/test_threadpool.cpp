// ThreadPool: every thread runs each job exactly once, both while spinning and after the workers
// have gone to sleep; results written by workers are visible to the caller after run(); an
// exception on any thread reaches the caller; pools of any size construct and destruct cleanly.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

#include "util/threadpool.h"

static int g_fail = 0;
#define CHECK(c, ...) do { if (!(c)) { g_fail++; std::printf("FAIL line %d: ", __LINE__); std::printf(__VA_ARGS__); std::printf("\n"); } } while (0)

int main() {
  for (int n : {1, 2, 3, 4}) {
    mb::ThreadPool pool(n);
    CHECK(pool.size() == n, "size %d", pool.size());
    std::vector<long> hits(n, 0);
    std::vector<int> seen_nth(n, 0);
    const int kRuns = n <= 2 ? 3000 : 300;  // more threads than cores: keep it short
    for (int i = 0; i < kRuns; i++)
      pool.run([&](int ith, int nth) { hits[ith]++; seen_nth[ith] = nth; });
    for (int t = 0; t < n; t++) CHECK(hits[t] == kRuns && seen_nth[t] == n, "n=%d thread %d ran %ld", n, t, hits[t]);

    // workers asleep (well past the spin time) must still wake for every job
    for (int i = 0; i < 5; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      std::vector<int> out(n, -1);
      pool.run([&](int ith, int) { out[ith] = ith * 10; });
      for (int t = 0; t < n; t++) CHECK(out[t] == t * 10, "after sleep n=%d thread %d wrote %d", n, t, out[t]);
    }

    // a data-parallel sum: plain (non-atomic) writes by workers must be visible after run()
    std::vector<double> part(n, 0);
    pool.run([&](int ith, int nth) {
      for (int k = ith; k < 100000; k += nth) part[ith] += k;
    });
    double total = 0;
    for (double v : part) total += v;
    CHECK(total == 99999.0 * 100000 / 2, "n=%d sum %f", n, total);

    // exceptions from the last thread (a worker when n > 1) reach the caller, and the pool
    // keeps working afterwards
    bool caught = false;
    try {
      pool.run([&](int ith, int nth) { if (ith == nth - 1) throw std::runtime_error("boom"); });
    } catch (const std::runtime_error&) {
      caught = true;
    }
    CHECK(caught, "n=%d exception not propagated", n);
    std::atomic<int> after{0};
    pool.run([&](int, int) { after++; });
    CHECK(after == n, "n=%d pool broken after exception (%d)", n, after.load());
  }
  // round-trip latency of an empty job with 2 threads (informational: depends on machine load)
  {
    mb::ThreadPool pool(2);
    const int kRuns = 3000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRuns; i++) pool.run([](int, int) {});
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kRuns;
    std::printf("empty run() with 2 threads: %.2f us per call\n", us);
  }
  std::printf("%s\n", g_fail ? "FAILED" : "ok");
  return g_fail ? 1 : 0;
}
