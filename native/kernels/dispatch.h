// The kernel table: one complete set of kernels per instruction set, all with the signatures of
// the scalar references in ref/. dispatch.cpp fills each table from the functions its set
// exports (avx2/avx2.h, avx512/avx512.h) and picks one from what the CPU reports. Private to
// kernels/ (tests and benchmarks compare tables through it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "blocks.h"

namespace mb {
namespace kq {

// Quantize one row of k floats (k a multiple of the block size) to the given partner type.
using QuantizeFn = void (*)(const float* x, void* y, int64_t k);
// Dot of one weight row with one partner-typed activation row, k elements.
using DotFn = float (*)(int64_t k, const void* w, const void* x);
// Register-tiled dot: y[t*ldy + r] = dot(w row r, x row t) for r < nr, t < nt, with nr <= 4 and
// nt <= 4; weight rows are w_stride bytes apart, activation rows x_stride apart. Exists so a
// block of weights is unpacked once and used for several tokens.
using TileFn = void (*)(int64_t k, const uint8_t* w, size_t w_stride, int nr, const uint8_t* x,
                        size_t x_stride, int nt, float* y, size_t ldy);
// Causal attention of a run of query positions against one KV head, with an optional window and
// sinks (see mb::attention).
using AttnFn = void (*)(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo,
                        int n, int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch);
// Floats of scratch that AttnFn needs for R = n * G query rows over N keys.
using AttnScratchFn = size_t (*)(int R, int Dh, int N);

constexpr int kGemm8MaxGroups = 4;  // the most groups Gemm8::run_n takes

// Optional GEMM for groups of up to 8 tokens (the AVX-512 VNNI set has one for Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, MXFP4; its gemm4 the same interface for groups of 4, and for Q4_K and Q6_K groups of
// up to 16): pack lays out nt <= 8 (group) partner-typed activation rows (x_stride bytes
// apart) in packed_bytes(k) bytes; run computes y[t*ldy + r] for nr <= 4 weight rows x those nt
// tokens, with the same bits as the table's tile/dot for every pair. Its scalar reference is
// ref/'s dot for the type.
struct Gemm8 {
  size_t (*packed_bytes)(int64_t k);
  void (*pack)(const uint8_t* xq, size_t x_stride, int nt, int64_t k, uint8_t* packed);
  void (*run)(int64_t k, const uint8_t* w, size_t w_stride, int nr, const uint8_t* packed, int nt, float* y,
              size_t ldy);
  // Optional: run over n_groups <= kGemm8MaxGroups consecutive packed groups (group_bytes apart,
  // all full but the last, which has nt tokens; y rows of group g at (group size) * g * ldy), each weight block
  // unpacked once for all of them; the same bits as run on each group.
  void (*run_n)(int64_t k, const uint8_t* w, size_t w_stride, int nr, const uint8_t* packed, size_t group_bytes,
                int n_groups, int nt, float* y, size_t ldy);
  // The fewest tokens a last, short group must have to go through run (fewer go to the tile
  // kernels): where run's cost does not shrink with nt, the tiles win below it.
  int min_tokens = 4;
  // gemm4 only: tokens per group (0: 4) and the token counts the driver uses it for, from `from`
  // to one less than `below` (0: 2 and kGemm4Below in matmul.cpp). The K-quants' groups take up
  // to 16 tokens, Gemm16 the rest.
  int group = 0, from = 0, below = 0;
};

// Optional GEMM over blocks of 16 weight rows (the AVX-512 VNNI set has one for Q4_K, Q6_K, Q4_0,
// Q5_0 and Q8_0): unpack lays out nr <= 16 rows (w_stride bytes apart) in unpacked_bytes(k) bytes
// (64-byte aligned) once per call; prepare, where set, derives aux_bytes(k) bytes from each
// partner-typed activation row once per call; run computes y[t*ldy + r] for r < nr and t < nt
// (any count) from the unpacked rows, nt activation rows (x_stride bytes apart) and their aux
// (aux_stride apart), with the same bits as the table's tile and dot for every pair.
constexpr int kGemm16Rows = 16;
struct Gemm16 {
  size_t (*unpacked_bytes)(int64_t k);
  void (*unpack)(int64_t k, const uint8_t* w, size_t w_stride, int nr, uint8_t* out);
  size_t (*aux_bytes)(int64_t k);
  void (*prepare)(const uint8_t* xq, int64_t k, uint8_t* aux);
  void (*run)(int64_t k, const uint8_t* unpacked, int nr, const uint8_t* x, size_t x_stride, const uint8_t* aux,
              size_t aux_stride, int nt, float* y, size_t ldy);
};

struct KernelTable {
  const char* name;
  QuantizeFn quantize_q8_0, quantize_q8_1, quantize_q8_K, to_f16, to_bf16;
  DotFn dot[S_COUNT];
  TileFn tile[S_COUNT];  // may be null: the driver then calls dot per pair
  Gemm8 gemm8[S_COUNT];  // run may be null: the driver then uses tile
  Gemm8 gemm4[S_COUNT];  // the same for groups of 4 tokens (the K-quants: of up to 16); where set, the driver
                         // prefers it from 2 (Gemm8::from) to kGemm4Below - 1 (Gemm8::below) tokens
  Gemm16 gemm16[S_COUNT];  // run may be null; where set, the driver prefers it to gemm8 from kGemm16MinTokens
  void (*rmsnorm)(float* out, const float* x, const float* w, int n, float eps);
  void (*softmax)(float* x, int n);
  void (*silu_mul)(float* gate, const float* up, int n);
  void (*gelu_mul)(float* gate, const float* up, int n);
  AttnFn attention;
  AttnScratchFn attention_scratch;
  // query rows per attention call the kernel is fastest at: it converts each key block once per
  // call, so more rows spread that cost, fewer leave more calls to share out over the threads
  int attention_rows = 96;
};

const KernelTable& ref_table();
const KernelTable* avx2_table();    // nullptr if not compiled in or the CPU lacks AVX2/FMA/F16C
const KernelTable* avx512_table();  // nullptr if not compiled in or the CPU lacks AVX-512 VNNI (+F/BW/DQ/VL)
const KernelTable* amx_table();     // avx512 with AMX attention; nullptr unless AMX-BF16 runs here (probed)
const KernelTable& active_table();  // the one picked (MB_KERNELS=ref|avx2 forces one)

// Every attention kernel this build and CPU can run, the references first (tests and benchmarks
// compare them). flash: the one-pass kind, held to ref::flash_attention within a tolerance; the
// others carry out ref::attention bit for bit.
struct AttnKernel {
  const char* name;
  AttnFn fn;
  AttnScratchFn scratch_floats;
  bool flash;
};
std::vector<AttnKernel> attention_kernels();

// The GEMM driver with an explicit table.
void matmul_with(const KernelTable& kt, const QMatrix& W, const float* x, float* y, int T, ThreadPool* pool,
                 MatmulScratch* scratch = nullptr);
// matmul_with of each W[m] (m < n) with the same x into y[m]; see mb::matmul_n.
void matmul_n_with(const KernelTable& kt, const QMatrix* const* W, int n, const float* x, float* const* y, int T,
                   ThreadPool* pool, MatmulScratch* scratch = nullptr);
// Quantize x[k] to W's partner type with the given table; returns bytes written per row.
size_t quantize_row_for(const KernelTable& kt, GgmlType wtype, const float* x, void* y, int64_t k);

}  // namespace kq
}  // namespace mb
