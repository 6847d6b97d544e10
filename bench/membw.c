// membw: the machine's memory read bandwidth, as decode sees it: THREADS threads each stream
// through their own share of a buffer far larger than the last-level cache, summing 64-bit words
// (the compiler vectorizes the loop), and the best of PASSES passes is printed as one JSON line.
//   membw [THREADS] [MIB] [PASSES]     defaults: 2 threads, 1024 MiB, 5 passes
// Built and cached by bench/bench.mjs (cc -O3 -march=x86-64-v3); no part of the engine.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const uint64_t* p;  // [words] this thread's share
  size_t words;
  pthread_barrier_t* start;
  double seconds;
  uint64_t sink;
} Share;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void* reader(void* arg) {
  Share* s = arg;
  pthread_barrier_wait(s->start);
  const double t0 = now();
  // eight independent sums, so the adds never limit the load rate
  uint64_t a[8] = {0};
  for (size_t i = 0; i + 8 <= s->words; i += 8)
    for (int k = 0; k < 8; k++) a[k] += s->p[i + k];
  s->seconds = now() - t0;
  s->sink = a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
  return NULL;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
  const int passes = argc > 3 ? atoi(argv[3]) : 5;
  if (threads < 1 || mib < 1 || passes < 1) return 2;
  const size_t bytes = mib << 20;
  uint64_t* buf = aligned_alloc(4096, bytes);  // [bytes / 8] words
  if (!buf) return 3;
  memset(buf, 1, bytes);  // fault every page in before timing
  const size_t per = bytes / 8 / threads;
  double best = 0;
  uint64_t sink = 0;
  for (int pass = 0; pass < passes; pass++) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, threads);
    Share* sh = calloc(threads, sizeof(Share));
    pthread_t* th = calloc(threads, sizeof(pthread_t));
    for (int t = 0; t < threads; t++) {
      sh[t] = (Share){buf + per * t, per, &start, 0, 0};
      pthread_create(&th[t], NULL, reader, &sh[t]);
    }
    double slowest = 0;
    for (int t = 0; t < threads; t++) {
      pthread_join(th[t], NULL);
      if (sh[t].seconds > slowest) slowest = sh[t].seconds;
      sink ^= sh[t].sink;
    }
    const double gbs = (double)(per * 8 * threads) / slowest / 1e9;
    if (gbs > best) best = gbs;
    pthread_barrier_destroy(&start);
    free(sh);
    free(th);
  }
  printf("{\"threads\":%d,\"mib\":%zu,\"passes\":%d,\"gb_per_s\":%.2f,\"sink\":%llu}\n", threads, mib, passes, best,
         (unsigned long long)(sink & 1));
  free(buf);
  return 0;
}
