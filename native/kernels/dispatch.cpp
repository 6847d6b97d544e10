// The one place that chooses a kernel set. The choice is made once (function-local static,
// immutable afterwards) from what the CPU reports; a CUDA set would be chosen here as well.
#include <cstdlib>
#include <cstring>

#include "blocks.h"
#include "ref/ref.h"

namespace mb {
namespace kq {

static bool cpu_has_avx2_fma_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

static bool cpu_has_avx512_vnni() {
#if defined(__x86_64__)
  return cpu_has_avx2_fma_f16c() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

const KernelTable* vnni_table() {
  if (!cpu_has_avx512_vnni()) return nullptr;
  return vnni_table_unchecked();
}

const KernelTable* avx2_table() {
  // check first: even building the AVX2 table runs code compiled for AVX2
  if (!cpu_has_avx2_fma_f16c()) return nullptr;
  return avx2_table_unchecked();
}

const KernelTable& active_table() {
  static const KernelTable* chosen = [] {
    // MB_KERNELS=ref forces the scalar set (debugging numerics against the reference), =avx2 the
    // AVX2 set on a CPU that has AVX-512 VNNI too (benchmarks compare them).
    const char* force = std::getenv("MB_KERNELS");
    if (force && std::strcmp(force, "ref") == 0) return &ref_table();
    const bool avx2_only = force && std::strcmp(force, "avx2") == 0;
    if (const KernelTable* v = avx2_only ? nullptr : vnni_table()) return v;
    if (const KernelTable* a = avx2_table()) return a;
    return &ref_table();
  }();
  return *chosen;
}

}  // namespace kq

const char* kernels_backend() { return kq::active_table().name; }

void matmul(const QMatrix& W, const float* x, float* y, int T, ThreadPool* pool, MatmulScratch* scratch) {
  kq::matmul_with(kq::active_table(), W, x, y, T, pool, scratch);
}
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  kq::active_table().rmsnorm(out, x, weight, n, eps);
}
void rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, bool neox) {
  kq::ref::rope(x, n_heads, head_dim, rope_dim, pos, freq_base, neox);
}
void silu_mul(float* gate, const float* up, int n) { kq::active_table().silu_mul(gate, up, n); }
void softmax(float* x, int n) { kq::active_table().softmax(x, n); }
void add(float* out, const float* a, int n) { kq::ref::add(out, a, n); }
void attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int Dh, int p0, float scale, float* scratch) {
  kq::active_table().attention(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, scratch);
}
size_t attention_scratch_floats(int n, int G, int Dh, int n_keys) { return kq::attn_scratch_floats(n * G, Dh, n_keys); }

}  // namespace mb
