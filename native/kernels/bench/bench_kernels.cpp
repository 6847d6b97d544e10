// Matmul throughput for the default model's shapes (SmolLM2-135M: D=576, F=1536, V=49152) and the
// Qwen2.5-Coder Q4_K_M files' (0.5B: D=896, F=4864, V=151936; 1.5B: D=1536, F=8960): ms per call
// (fastest, mean, and CPU time per thread), weight GB/s and GFLOP/s (2*T*K*N) of the fastest call,
// for each kernel table, 1 and 2 threads, T = 1, 8, 32, 512.
// usage: bench_kernels [--quick] [--only SUBSTRING] [--table NAME] [--tokens T] [--threads N]
//   --only: the shapes whose name or type contains SUBSTRING; --table: those tables only (a list:
//   ref, avx2, avx512vnni, avx512-g8, avx512-no4, avx512-no16, avx512-tiles); --tokens: those T (a list: 1,2,3,4,5,8; 1 is decode, 2..7
//   a few streams or speculative verification rows) instead of 1, 8, 32, 512; --threads: that
//   thread count only;
//   --cold: each call reads a different copy of the matrix, out of copies that together exceed
//   kColdBytes (more than the L3), so the weights come from memory as in a model's decode step,
//   where every matrix is read once per token (without it a matrix that fits in the L3 is timed
//   from the L3 after the first call)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "dispatch.h"
#include "util/threadpool.h"

using namespace mb;
using namespace mb::kq;

// CPU time of the whole process: on a shared, oversubscribed machine it shows the work done
// without the time spent preempted (for 2 threads it includes the workers' spinning).
static double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Shape { const char* what; GgmlType type; int64_t K, N; };

// whether name is one of the comma-separated names in list
static bool in_list(const char* list, const char* name) {
  const size_t n = std::strlen(name);
  for (const char* p = list; *p;) {
    const char* e = std::strchr(p, ',');
    const size_t len = e ? (size_t)(e - p) : std::strlen(p);
    if (len == n && std::strncmp(p, name, n) == 0) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

int main(int argc, char** argv) {
  bool quick = false;
  const char* only = nullptr;
  const char* table = nullptr;
  std::vector<int> token_counts = {1, 8, 32, 512};
  int only_threads = 0;
  bool cold = false;
  constexpr size_t kColdBytes = 256u << 20;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--cold") == 0) cold = true;
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (std::strcmp(argv[i], "--table") == 0 && i + 1 < argc) table = argv[++i];
    else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
      token_counts.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end;
        const long t = std::strtol(p, &end, 10);
        if (end == p) break;
        if (t > 0) token_counts.push_back((int)t);
        p = *end == ',' ? end + 1 : end;
      }
    }
    else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) only_threads = std::atoi(argv[++i]);
  }
  const Shape shapes[] = {
      {"attn q/o 576x576", GgmlType::Q4_1, 576, 576},
      {"ffn gate/up 576->1536", GgmlType::Q4_1, 576, 1536},
      {"ffn down 1536->576", GgmlType::Q4_1, 1536, 576},
      {"output 576->49152", GgmlType::Q8_0, 576, 49152},
      // a Qwen2.5-1.5B-sized projection in the K-quant a Q4_K_M file mostly holds
      {"proj 1536x1536", GgmlType::Q4_K, 1536, 1536},
      {"proj 1536x1536", GgmlType::Q6_K, 1536, 1536},
      // one gpt-oss-20b expert's gate/up/down (D = F = 2880) in the MXFP4 its GGUFs ship
      {"expert 2880x2880", GgmlType::MXFP4, 2880, 2880},
      // Qwen2.5-Coder-0.5B Q4_K_M: Q5_0 gate/up, ffn_down in Q4_K or Q6_K, the Q8_0 output
      {"q05 gate/up 896->4864", GgmlType::Q5_0, 896, 4864},
      {"q05 down 4864->896", GgmlType::Q4_K, 4864, 896},
      {"q05 down 4864->896", GgmlType::Q6_K, 4864, 896},
      {"q05 output 896->151936", GgmlType::Q8_0, 896, 151936},
      // Qwen2.5-Coder-1.5B Q4_K_M: Q4_K nearly everywhere, ffn_down half Q6_K, the Q6_K output
      {"q15 k/v 1536->256", GgmlType::Q4_K, 1536, 256},
      {"q15 k/v 1536->256", GgmlType::Q6_K, 1536, 256},
      {"q15 gate/up 1536->8960", GgmlType::Q4_K, 1536, 8960},
      {"q15 down 8960->1536", GgmlType::Q4_K, 8960, 1536},
      {"q15 down 8960->1536", GgmlType::Q6_K, 8960, 1536},
      {"q15 output 1536->151936", GgmlType::Q6_K, 1536, 151936},
  };
  std::mt19937 rng(1);
  std::vector<const KernelTable*> tables = {&ref_table()};
  if (const KernelTable* a = avx2_table()) tables.push_back(a);
  // the AVX-512 set once more with one packed group per pass (no run_n): what the steps of groups gain
  // and without the 16-row GEMMs (Gemm8, or the K-quants' tiles, for every T): what Gemm16 gains
  // and without the 4-token groups and the K-quants' groups (8-token groups and tiles below 16
  // tokens, Gemm16 from 16): what they gain; for Q4_K/Q6_K this is the one-row tiles below 16
  KernelTable one_group{}, no16{}, no4{}, tiles_only{};
  if (const KernelTable* v = avx512_table()) {
    tables.push_back(v);
    one_group = *v;
    one_group.name = "avx512-g8";
    for (Gemm8& g : one_group.gemm8) g.run_n = nullptr;
    for (Gemm8& g : one_group.gemm4) g.run_n = nullptr;
    tables.push_back(&one_group);
    no4 = *v;
    no4.name = "avx512-no4";
    for (Gemm8& g : no4.gemm4) g = {};
    tables.push_back(&no4);
    no16 = *v;
    no16.name = "avx512-no16";
    for (Gemm16& g : no16.gemm16) g = {};
    tables.push_back(&no16);
    // and with neither GEMM (the tiles for every T): what Gemm8 gains over them
    tiles_only = no16;
    tiles_only.name = "avx512-tiles";
    for (Gemm8& g : tiles_only.gemm8) g = {};
    for (Gemm8& g : tiles_only.gemm4) g = {};
    tables.push_back(&tiles_only);
  }
  std::printf("%-24s %-5s %-10s %3s %4s %10s %10s %10s %9s %9s\n", "shape", "type", "table", "thr", "T",
              "best ms", "mean ms", "cpu ms/thr", "W GB/s", "GFLOP/s");
  for (const Shape& s : shapes) {
    if (only && !std::strstr(s.what, only) && !std::strstr(ggml_type_name(s.type), only)) continue;
    const size_t wb = ggml_row_bytes(s.type, s.K) * s.N;
    std::vector<uint8_t> w(wb);
    for (auto& b : w) b = rng() & 0xff;
    // sane f16 scales in every block (at the front; Q6_K's at the end) so no NaNs appear
    const size_t bb = block_bytes(s.type);
    for (size_t o = s.type == GgmlType::Q6_K ? bb - 2 : 0; o < wb; o += bb) {
      if (s.type == GgmlType::MXFP4) {  // one E8M0 byte: 2^-7
        w[o] = 120;
        continue;
      }
      half h = f2h(0.01f);
      std::memcpy(&w[o], &h, 2);
      if (s.type == GgmlType::Q4_1 || s.type == GgmlType::Q4_K) std::memcpy(&w[o + 2], &h, 2);
    }
    // copies [n_copies][wb], the first being w's bytes, the others the same bytes elsewhere
    const size_t n_copies = cold ? std::max<size_t>(2, kColdBytes / wb + 1) : 1;
    std::vector<uint8_t> copies(cold ? n_copies * wb : 0);
    for (size_t c = 0; c < (cold ? n_copies : 0); c++) std::memcpy(&copies[c * wb], w.data(), wb);
    size_t next_copy = 0;
    QMatrix W{s.type, s.K, s.N, cold ? copies.data() : w.data()};
    auto rotate = [&] {
      if (!cold) return;
      next_copy = (next_copy + 1) % n_copies;
      W.data = &copies[next_copy * wb];
    };
    for (int T : token_counts) {
      std::vector<float> x((size_t)T * s.K), y((size_t)T * s.N);
      for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
      for (const KernelTable* kt : tables) {
        if (table && !in_list(table, kt->name)) continue;
        for (int nth : {1, 2}) {
          if (only_threads && nth != only_threads) continue;
          if (kt == &ref_table() && (T >= 32 || nth == 2)) continue;  // the scalar path only as a baseline
          if (quick && T == 512 && s.N >= 49152) continue;
          ThreadPool pool(nth);
          matmul_with(*kt, W, x.data(), y.data(), T, &pool);  // warm up
          // time each call for ~0.3 s (at least 3 calls); report the fastest call, which is the
          // least disturbed by other processes on a shared machine, and the mean
          int iters = 0;
          double el = 0, best = 1e30;
          const double cpu0 = cpu_seconds();
          while (iters < 3 || el < (quick ? 0.1 : 0.3)) {
            rotate();
            auto t0 = std::chrono::steady_clock::now();
            matmul_with(*kt, W, x.data(), y.data(), T, &pool);
            const double d = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            best = std::min(best, d);
            el += d;
            iters++;
          }
          const double ms = best * 1e3, mean_ms = el * 1e3 / iters;
          const double cpu_ms = (cpu_seconds() - cpu0) * 1e3 / iters / nth;
          std::printf("%-24s %-5s %-10s %3d %4d %10.4f %10.4f %10.4f %9.2f %9.2f\n", s.what,
                      ggml_type_name(s.type), kt->name, nth, T, ms, mean_ms, cpu_ms, wb / best / 1e9,
                      2.0 * T * s.K * s.N / best / 1e9);
        }
      }
    }
  }
  return 0;
}
