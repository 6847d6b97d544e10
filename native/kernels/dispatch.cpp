// The one place that builds the kernel tables and chooses one. Each table is filled from the
// functions its set exports; a set compiled with wider instructions than the build's baseline
// (MB_KERNELS_AVX2, MB_KERNELS_AVX512: defined by CMake when the compiler can target it) enters a
// table only after the CPU check, and building a table runs none of its code. The choice is made
// once (function-local static, immutable afterwards); a CUDA set would be chosen here as well.
#include "dispatch.h"

#include <cstdlib>
#include <cstring>

#include "ref/ref.h"
#if MB_KERNELS_AVX2
#include "avx2/avx2.h"
#endif
#if MB_KERNELS_AVX512
#include "avx512/avx512.h"
#endif
#if MB_KERNELS_AMX
#include <cpuid.h>
#include <cerrno>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace mb {
namespace kq {

// (CMake defines MB_KERNELS_AVX2 / MB_KERNELS_AVX512 only for x86 targets.)
#if MB_KERNELS_AVX2
static bool cpu_has_avx2_fma_f16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#endif

#if MB_KERNELS_AVX512
static bool cpu_has_avx512_vnni() {
  return cpu_has_avx2_fma_f16c() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}
#endif

const KernelTable& ref_table() {
  static const KernelTable t = [] {
    KernelTable k{};
    k.name = "ref";
    k.quantize_q8_0 = ref::quantize_q8_0;
    k.quantize_q8_1 = ref::quantize_q8_1;
    k.quantize_q8_K = ref::quantize_q8_K;
    k.to_f16 = ref::to_f16;
    k.to_bf16 = ref::to_bf16;
    k.dot[S_F32] = ref::dot_f32;
    k.dot[S_F16] = ref::dot_f16;
    k.dot[S_BF16] = ref::dot_bf16;
    k.dot[S_Q4_0] = ref::dot_q4_0;
    k.dot[S_Q4_1] = ref::dot_q4_1;
    k.dot[S_Q5_0] = ref::dot_q5_0;
    k.dot[S_Q5_1] = ref::dot_q5_1;
    k.dot[S_Q8_0] = ref::dot_q8_0;
    k.dot[S_Q4_K] = ref::dot_q4_K;
    k.dot[S_Q5_K] = ref::dot_q5_K;
    k.dot[S_Q6_K] = ref::dot_q6_K;
    k.dot[S_MXFP4] = ref::dot_mxfp4;
    k.rmsnorm = ref::rmsnorm;
    k.softmax = ref::softmax;
    k.silu_mul = ref::silu_mul;
    k.gelu_mul = ref::gelu_mul;
    k.attention = ref::attention;
    k.attention_scratch = ref::attention_scratch_floats;
    return k;
  }();
  return t;
}

#if MB_KERNELS_AVX2
static KernelTable build_avx2() {
  KernelTable k{};
  k.name = "avx2";
  k.quantize_q8_0 = avx2::quantize_q8_0;
  k.quantize_q8_1 = avx2::quantize_q8_1;
  k.quantize_q8_K = avx2::quantize_q8_K;
  k.to_f16 = avx2::to_f16;
  k.to_bf16 = ref::to_bf16;  // conversion only; never on a hot path (BF16 weights are rare here)
  k.dot[S_F32] = avx2::dot_f32;
  k.dot[S_F16] = avx2::dot_f16;
  k.dot[S_BF16] = avx2::dot_bf16;
  k.dot[S_Q4_0] = avx2::legacy_dot<GgmlType::Q4_0>;
  k.dot[S_Q4_1] = avx2::legacy_dot<GgmlType::Q4_1>;
  k.dot[S_Q5_0] = avx2::legacy_dot<GgmlType::Q5_0>;
  k.dot[S_Q5_1] = avx2::legacy_dot<GgmlType::Q5_1>;
  k.dot[S_Q8_0] = avx2::legacy_dot<GgmlType::Q8_0>;
  k.tile[S_Q4_0] = avx2::legacy_tile<GgmlType::Q4_0>;
  k.tile[S_Q4_1] = avx2::legacy_tile<GgmlType::Q4_1>;
  k.tile[S_Q5_0] = avx2::legacy_tile<GgmlType::Q5_0>;
  k.tile[S_Q5_1] = avx2::legacy_tile<GgmlType::Q5_1>;
  k.tile[S_Q8_0] = avx2::legacy_tile<GgmlType::Q8_0>;
  k.dot[S_MXFP4] = avx2::legacy_dot<GgmlType::MXFP4>;
  k.tile[S_MXFP4] = avx2::legacy_tile<GgmlType::MXFP4>;
  k.dot[S_Q4_K] = avx2::dot_q4_K;
  k.dot[S_Q5_K] = avx2::dot_q5_K;
  k.dot[S_Q6_K] = avx2::dot_q6_K;
  k.tile[S_Q4_K] = avx2::tile_q4_K;
  k.tile[S_Q5_K] = avx2::tile_q5_K;
  k.tile[S_Q6_K] = avx2::tile_q6_K;
  k.rmsnorm = avx2::rmsnorm;
  k.softmax = avx2::softmax;
  k.silu_mul = avx2::silu_mul;
  k.gelu_mul = avx2::gelu_mul;
  k.attention = avx2::attention;
  k.attention_scratch = avx2::attention_scratch_floats;
  return k;
}
#endif

const KernelTable* avx2_table() {
#if MB_KERNELS_AVX2
  static const KernelTable t = build_avx2();
  return cpu_has_avx2_fma_f16c() ? &t : nullptr;
#else
  return nullptr;
#endif
}

#if MB_KERNELS_AVX512_BF16
static bool cpu_has_avx512_bf16() { return cpu_has_avx512_vnni() && __builtin_cpu_supports("avx512bf16"); }
#endif

#if MB_KERNELS_AMX
// AMX needs three things a CPUID bit does not promise: the OS must grant this process the tile
// state (arch_prctl), the hypervisor must really run tile instructions (some VMs report AMX and
// raise SIGILL on them), and they must compute. The first is asked once; the other two are tried
// in a forked child, so an illegal instruction ends that child alone. Asked once per process.
static bool amx_usable() {
  static const bool ok = [] {
    if (!cpu_has_avx512_bf16()) return false;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    if (!amx_bf16 || !amx_tile) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) != 0) return false;
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) _exit(avx512::amx_bf16_works() ? 0 : 1);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
      if (errno != EINTR) return false;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return ok;
}
#endif

#if MB_KERNELS_AVX512
// The AVX2 set with the 8-token GEMM for the types that have one and flash attention. The flash
// kernel is the f32 one even where the CPU has AVX-512 BF16: the bf16 value product (faster by
// ~20% in a prefill) puts fixtures outside twice llama.cpp's own flash on/off spread in the logits
// oracle (test/oracle), the f32 one stays inside it.
static KernelTable build_avx512() {
  KernelTable k = build_avx2();
  k.name = "avx512vnni";
  // the legacy types' tile and dot carry the GEMM's arithmetic (one integer sum per block), so a
  // token's bits are the same alone or in a batch within this set
  k.dot[S_Q4_0] = avx512::vnni_dot<GgmlType::Q4_0>;
  k.dot[S_Q4_1] = avx512::vnni_dot<GgmlType::Q4_1>;
  k.dot[S_Q5_0] = avx512::vnni_dot<GgmlType::Q5_0>;
  k.dot[S_Q5_1] = avx512::vnni_dot<GgmlType::Q5_1>;
  k.dot[S_Q8_0] = avx512::vnni_dot<GgmlType::Q8_0>;
  k.dot[S_MXFP4] = avx512::vnni_dot<GgmlType::MXFP4>;
  k.tile[S_Q4_0] = avx512::vnni_tile<GgmlType::Q4_0>;
  k.tile[S_Q4_1] = avx512::vnni_tile<GgmlType::Q4_1>;
  k.tile[S_Q5_0] = avx512::vnni_tile<GgmlType::Q5_0>;
  k.tile[S_Q5_1] = avx512::vnni_tile<GgmlType::Q5_1>;
  k.tile[S_Q8_0] = avx512::vnni_tile<GgmlType::Q8_0>;
  k.tile[S_MXFP4] = avx512::vnni_tile<GgmlType::MXFP4>;
  // the K-quants' integer sums are exact in any order, so these keep the AVX2 tiles' bits, and so
  // do their token groups (kquant_group.cpp; in gemm4, with their own group size and token
  // counts); no Gemm8: the tiles beat it, vnni.cpp
  k.tile[S_Q4_K] = avx512::tile_q4_K;
  k.tile[S_Q6_K] = avx512::tile_q6_K;
  k.gemm8[S_Q4_0] = avx512::gemm8_q4_0;
  k.gemm8[S_Q4_1] = avx512::gemm8_q4_1;
  k.gemm8[S_Q5_0] = avx512::gemm8_q5_0;
  k.gemm8[S_Q5_1] = avx512::gemm8_q5_1;
  k.gemm8[S_Q8_0] = avx512::gemm8_q8_0;
  k.gemm8[S_MXFP4] = avx512::gemm8_mxfp4;
  k.gemm4[S_Q4_0] = avx512::gemm4_q4_0;
  k.gemm4[S_Q4_1] = avx512::gemm4_q4_1;
  k.gemm4[S_Q5_0] = avx512::gemm4_q5_0;
  k.gemm4[S_Q5_1] = avx512::gemm4_q5_1;
  k.gemm4[S_Q8_0] = avx512::gemm4_q8_0;
  k.gemm4[S_MXFP4] = avx512::gemm4_mxfp4;
  k.gemm4[S_Q4_K] = avx512::gemmk_q4_K;
  k.gemm4[S_Q6_K] = avx512::gemmk_q6_K;
  k.gemm16[S_Q4_K] = avx512::gemm16_q4_K;
  k.gemm16[S_Q6_K] = avx512::gemm16_q6_K;
  k.gemm16[S_Q4_0] = avx512::gemm16_q4_0;
  k.gemm16[S_Q5_0] = avx512::gemm16_q5_0;
  k.gemm16[S_Q8_0] = avx512::gemm16_q8_0;
  k.attention = avx512::flash_attention_f32;
  k.attention_scratch = avx512::flash_attention_f32_scratch_floats;
  return k;
}
#endif

const KernelTable* avx512_table() {
#if MB_KERNELS_AVX512
  static const KernelTable t = build_avx512();
  return cpu_has_avx512_vnni() ? &t : nullptr;
#else
  return nullptr;
#endif
}

// The AVX-512 set with the attention on AMX tiles (same arithmetic accuracy as the f32 flash
// kernel, its own bits). Everything else is the AVX-512 set's, bit for bit.
const KernelTable* amx_table() {
#if MB_KERNELS_AMX
  static const KernelTable t = [] {
    KernelTable k = build_avx512();
    k.name = "avx512amx";
    k.attention = avx512::flash_attention_amx;
    k.attention_scratch = avx512::flash_attention_amx_scratch_floats;
    k.attention_rows = 224;  // bench_attention, Qwen2.5-Coder-0.5B at 18k keys: 224 GFLOP/s vs 194 at 91 rows
    return k;
  }();
  return cpu_has_avx512_vnni() && amx_usable() ? &t : nullptr;
#else
  return nullptr;
#endif
}

std::vector<AttnKernel> attention_kernels() {
  std::vector<AttnKernel> ks = {{"ref", ref::attention, ref::attention_scratch_floats, false},
                                {"ref-flash", ref::flash_attention, ref::flash_attention_scratch_floats, true}};
#if MB_KERNELS_AVX2
  if (avx2_table()) ks.push_back({"avx2", avx2::attention, avx2::attention_scratch_floats, false});
#endif
#if MB_KERNELS_AVX512
  if (avx512_table())
    ks.push_back({"avx512-flash-f32", avx512::flash_attention_f32, avx512::flash_attention_f32_scratch_floats, true});
#endif
#if MB_KERNELS_AVX512_BF16
  if (cpu_has_avx512_bf16())
    ks.push_back({"avx512-flash-bf16", avx512::flash_attention_bf16, avx512::flash_attention_bf16_scratch_floats, true});
#endif
#if MB_KERNELS_AMX
  if (amx_table())
    ks.push_back({"avx512-amx", avx512::flash_attention_amx, avx512::flash_attention_amx_scratch_floats, true});
#endif
  return ks;
}

const KernelTable& active_table() {
  static const KernelTable* chosen = [] {
    // MB_KERNELS=ref forces the scalar set (debugging numerics against the reference), =avx2 the
    // AVX2 set on a CPU that has AVX-512 too (benchmarks and the oracle compare them), =amx the
    // AVX-512 set with AMX attention where the probe passes. AMX is opt-in because its decode step
    // converts every key block for a few query rows: at an agent's depth (16k keys) that is ~3x the
    // f32 kernel's attention time per token, which costs more over a session's answers than the
    // faster cold prefill saves.
    const char* force = std::getenv("MB_KERNELS");
    if (force && std::strcmp(force, "ref") == 0) return &ref_table();
    const bool avx2_only = force && std::strcmp(force, "avx2") == 0;
    if (force && std::strcmp(force, "amx") == 0)
      if (const KernelTable* x = amx_table()) return x;
    if (const KernelTable* v = avx2_only ? nullptr : avx512_table()) return v;
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
void matmul_n(const QMatrix* const* W, int n, const float* x, float* const* y, int T, ThreadPool* pool,
              MatmulScratch* scratch) {
  kq::matmul_n_with(kq::active_table(), W, n, x, y, T, pool, scratch);
}
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  kq::active_table().rmsnorm(out, x, weight, n, eps);
}
void rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, bool neox,
          const float* freq_factors, float attn_factor) {
  kq::ref::rope(x, n_heads, head_dim, rope_dim, pos, freq_base, neox, freq_factors, attn_factor);
}
void silu_mul(float* gate, const float* up, int n) { kq::active_table().silu_mul(gate, up, n); }
void gelu_mul(float* gate, const float* up, int n) { kq::active_table().gelu_mul(gate, up, n); }
void softmax(float* x, int n) { kq::active_table().softmax(x, n); }
void add(float* out, const float* a, int n) { kq::ref::add(out, a, n); }
void attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int Dh, int p0, float scale, int window, const float* sinks, float* scratch) {
  kq::active_table().attention(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, window, sinks, scratch);
}
size_t attention_scratch_floats(int n, int G, int Dh, int n_keys) {
  return kq::active_table().attention_scratch(n * G, Dh, n_keys);
}
int attention_rows() { return kq::active_table().attention_rows; }

}  // namespace mb
