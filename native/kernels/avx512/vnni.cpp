// AVX-512 VNNI GEMM for groups of up to 8 tokens, for the legacy types (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0: the default model, and most tensors of a 576-wide model quantized "Q4_K_M", which falls back
// to Q5_0), MXFP4 (gpt-oss's experts, same 32-element blocks) and for Q4_K and Q6_K (further down,
// same layout per super-block). Compiled with -mavx512f/bw/dq/vl/vnni (and AVX2, FMA, F16C);
// dispatch.cpp uses it only after checking the CPU.
//
// Dimension legend: K elements per row (nb = K / 32 blocks, K / 256 super-blocks for the K-quants);
// a group of 8 tokens t; weight rows in pairs (r, r + 1); j in [0, 8) the 4-element group of a
// block (elements 4j .. 4j + 3).
//
// Why a new layout instead of the AVX2 tile kernel with vpdpbusd swapped in: that kernel spends
// ~9 uops per (token, block), most of them converting and scaling each pair's partial sums. Here
// one zmm holds 16 (row, token) pairs, lane 2t + rr = (row r + rr, token t), and one vpdpbusd
// computes group j's integer sum for all 16 at once: the weights' 4 bytes are broadcast (one load
// from a small buffer), the activations come packed so token t's 4 bytes sit in lanes 2t and 2t+1.
//
// The arithmetic is the AVX2 kernels', bit for bit, so a token gives the same bits through either
// table and alone or in a batch: the AVX2 kernel keeps 8 float accumulator lanes per pair, lane j
// accumulating scale * float(exact sum of elements 4j..4j+3) block after block, and reduces them
// as ((L0+L4)+(L2+L6)) + ((L1+L5)+(L3+L7)), then adds the min term. Here L_j is a register over
// the 16 pairs, with the same per-lane operations in the same order. The integer sums are exact
// either way (vpdpbusd does not saturate). vpdpbusd multiplies unsigned by signed bytes, so
// signed weights (Q4_0: nibble - 8, Q5_0: value - 16, Q8_0, MXFP4: -12 .. 12) enter with +8 / +16 /
// +128 / +12 and the accumulator starts at -C times the sum of the 4 activations, which the pack
// step computes once per group.
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "avx512.h"

namespace mb {
namespace kq {
namespace avx512 {
namespace {

// Bytes of one packed block of 8 tokens: d[16] and s[16] floats (each token twice), q[8][16]
// dwords, then c[8][16] int32 accumulator starts when the weight type is signed.
constexpr size_t kPackHead = 2 * 64;
constexpr size_t kPackQ = 8 * 64;
template <int C> constexpr size_t packed_block_bytes() { return kPackHead + kPackQ + (C ? kPackQ : 0); }

// Pack up to 8 rows of q8_0 / q8_1 activations (x_stride bytes apart) for weights whose unsigned
// form is value + C. Tokens nt .. 7 are zero (their results are never stored).
template <bool Q81, int C>
void pack8(const uint8_t* xq, size_t xs, int nt, int64_t k, uint8_t* out) {
  const int64_t nb = k / QK;
  const size_t xbb = Q81 ? sizeof(block_q8_1) : sizeof(block_q8_0);
  constexpr size_t bb = packed_block_bytes<C>();
  for (int64_t i = 0; i < nb; i++) {
    uint8_t* o = out + i * bb;
    float* d = (float*)o;
    float* s = d + 16;
    int32_t* q = (int32_t*)(o + kPackHead);
    int32_t* c = (int32_t*)(o + kPackHead + kPackQ);
    for (int t = 0; t < 8; t++) {
      float dt = 0, st = 0;
      int32_t qt[8] = {0}, ct[8] = {0};
      if (t < nt) {
        const uint8_t* b = xq + t * xs + i * xbb;
        half h;
        std::memcpy(&h, b, 2);
        dt = _cvtsh_ss(h);
        if (Q81) {
          std::memcpy(&h, b + 2, 2);
          st = _cvtsh_ss(h);
        }
        const int8_t* qs = (const int8_t*)(b + (Q81 ? 4 : 2));
        std::memcpy(qt, qs, 32);
        if (C)
          for (int j = 0; j < 8; j++) ct[j] = -C * (qs[4 * j] + qs[4 * j + 1] + qs[4 * j + 2] + qs[4 * j + 3]);
      }
      d[2 * t] = d[2 * t + 1] = dt;
      s[2 * t] = s[2 * t + 1] = st;
      for (int j = 0; j < 8; j++) {
        q[j * 16 + 2 * t] = q[j * 16 + 2 * t + 1] = qt[j];
        if (C) c[j * 16 + 2 * t] = c[j * 16 + 2 * t + 1] = ct[j];
      }
    }
  }
}

// Two rows' 32 unsigned values of one block (element order) -> wq[j] = group j of both rows
// (row r's dword low).
inline void interleave_pair(__m256i row0, __m256i row1, int64_t* wq) {
  const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(row0), row1, 1);
  const __m512i idx = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  _mm512_store_si512((__m512i*)wq, _mm512_permutexvar_epi32(idx, u));
}
// A Q4 block's nibbles 0..15 in element order (the low nibbles of qs first).
inline __m256i q4_values(const uint8_t* qs) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)qs));
  return _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}
// A Q5 block's values 0..31: the nibbles plus 16 where qh's bit for the element is set.
inline __m256i q5_values(const uint8_t* qs, const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return _mm256_or_si256(q4_values(qs), _mm256_maskz_set1_epi8((__mmask32)h, 0x10));
}
// The f16 at byte off of two blocks, as [v0, v1] repeated over a zmm (lane 2t + rr = block rr's).
inline __m512 halves2(const void* b0, const void* b1, size_t off) {
  half h0, h1;
  std::memcpy(&h0, (const uint8_t*)b0 + off, 2);
  std::memcpy(&h1, (const uint8_t*)b1 + off, 2);
  return _mm512_broadcast_f32x2(_mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | ((uint32_t)h1 << 16)))));
}

// Per legacy type: its block, whether it has a min (m at byte 2, after d at byte 0), the offset C
// that makes its values unsigned, and its values for rows r and r+1 as wq (see interleave_pair).
template <GgmlType WT> struct Pair;
template <> struct Pair<GgmlType::Q4_0> {
  using W = block_q4_0; static constexpr bool kMin = false; static constexpr int C = 8;
  static void values(const W& b0, const W& b1, int64_t* wq) { interleave_pair(q4_values(b0.qs), q4_values(b1.qs), wq); }
};
template <> struct Pair<GgmlType::Q4_1> {
  using W = block_q4_1; static constexpr bool kMin = true; static constexpr int C = 0;
  static void values(const W& b0, const W& b1, int64_t* wq) { interleave_pair(q4_values(b0.qs), q4_values(b1.qs), wq); }
};
template <> struct Pair<GgmlType::Q5_0> {
  using W = block_q5_0; static constexpr bool kMin = false; static constexpr int C = 16;
  static void values(const W& b0, const W& b1, int64_t* wq) {
    interleave_pair(q5_values(b0.qs, b0.qh), q5_values(b1.qs, b1.qh), wq);
  }
};
template <> struct Pair<GgmlType::Q5_1> {
  using W = block_q5_1; static constexpr bool kMin = true; static constexpr int C = 0;
  static void values(const W& b0, const W& b1, int64_t* wq) {
    interleave_pair(q5_values(b0.qs, b0.qh), q5_values(b1.qs, b1.qh), wq);
  }
};
template <> struct Pair<GgmlType::Q8_0> {
  using W = block_q8_0; static constexpr bool kMin = false; static constexpr int C = 128;
  static void values(const W& b0, const W& b1, int64_t* wq) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    interleave_pair(_mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b0.qs), flip),
                    _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b1.qs), flip), wq);
  }
};

// MXFP4: the doubled E2M1 values (-12 .. 12) via a byte shuffle of the nibbles, + 12.
template <> struct Pair<GgmlType::MXFP4> {
  using W = block_mxfp4; static constexpr bool kMin = false; static constexpr int C = 12;
  static __m256i unsigned_values(const W& b) {
    const __m256i table = _mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_mxfp4)),
                                          _mm256_set1_epi8(C));
    return _mm256_shuffle_epi8(table, q4_values(b.qs));
  }
  static void values(const W& b0, const W& b1, int64_t* wq) { interleave_pair(unsigned_values(b0), unsigned_values(b1), wq); }
};
// The weight scales of two blocks as [s0, s1] repeated (an f16 d at byte 0, or MXFP4's E8M0 byte).
template <GgmlType WT, class W> inline __m512 pair_scales(const W& b0, const W& b1) {
  if constexpr (WT == GgmlType::MXFP4)
    return _mm512_broadcast_f32x2(_mm_setr_ps(e8m0_half(b0.e), e8m0_half(b1.e), 0.0f, 0.0f));
  else
    return halves2(&b0, &b1, 0);
}

// The 8 bytes at p in all 8 qwords, as a load-port uop: left to itself the compiler keeps wq in a
// register and extracts each qword with vpermd + vpbroadcastq, two shuffles per group that compete
// with vpdpbusd / vcvtdq2ps / vfmadd for the two 512-bit ALU ports.
inline __m512i broadcast_q(const int64_t* p) {
  __m512i v;
  asm("vpbroadcastq %1, %0" : "=v"(v) : "m"(*p));
  return v;
}

// Lane 2t + rr of v is (row rr of the pair, token t); nr == 1: the pair has one row.
inline void store_pair(__m512 v, int nr, int nt, float* y, size_t ldy) {
  alignas(64) float out[16];
  _mm512_store_ps(out, v);
  for (int t = 0; t < nt; t++) {
    y[t * ldy] = out[2 * t];
    if (nr > 1) y[t * ldy + 1] = out[2 * t + 1];
  }
}
using PairFn = void (*)(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y,
                        size_t ldy);
// Gemm8::run: nr <= 4 rows as pairs
template <PairFn PAIR>
void over_pairs(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y, size_t ldy) {
  for (int r = 0; r < nr; r += 2) PAIR(k, w + r * ws, ws, nr - r, packed, nt, y + r, ldy);
}

// One row pair (rows r, r + 1; nr == 1 repeats row r and stores one) x one packed group of nt
// tokens. (Two pairs per pass measured no faster: the 16 accumulators then spill.)
template <GgmlType WT>
void gemm8_pair(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y,
                size_t ldy) {
  using P = Pair<WT>;
  using W = typename P::W;
  constexpr size_t bb = packed_block_bytes<P::C>();
  const int64_t nb = k / QK;
  const W* row0 = (const W*)w;
  const W* row1 = (const W*)(w + (nr > 1 ? ws : 0));
  __m512 acc[8], msum = _mm512_setzero_ps();
  for (int j = 0; j < 8; j++) acc[j] = _mm512_setzero_ps();
  alignas(64) int64_t wq[8];
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* pk = packed + i * bb;
    P::values(row0[i], row1[i], wq);
    if constexpr (P::kMin)
      msum = _mm512_fmadd_ps(halves2(&row0[i], &row1[i], 2), _mm512_loadu_ps((const float*)pk + 16), msum);
    const __m512 scale = _mm512_mul_ps(pair_scales<WT>(row0[i], row1[i]), _mm512_loadu_ps((const float*)pk));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
      const __m512i start =
          P::C ? _mm512_loadu_si512((const __m512i*)(pk + kPackHead + kPackQ) + j) : _mm512_setzero_si512();
      const __m512i sum =
          _mm512_dpbusd_epi32(start, broadcast_q(&wq[j]), _mm512_loadu_si512((const __m512i*)(pk + kPackHead) + j));
      acc[j] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sum), acc[j]);
    }
  }
  __m512 v = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
                           _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
  if constexpr (P::kMin) v = _mm512_add_ps(v, msum);
  store_pair(v, nr, nt, y, ldy);
}

// Gemm8::run2: one row pair x two packed groups (the first full, the second of nt tokens, gpb
// bytes after it), so each block of the pair is unpacked once for 16 tokens instead of 8: at
// K = 576 the unpack (values, both scales and the min) is ~40% of gemm8_pair's uops. Every lane
// goes through gemm8_pair's operations in its order, so each group gets gemm8_pair's bits.
// Registers: 16 accumulators + 2 min sums + the pair's scale and min.
template <GgmlType WT>
void gemm16_pair(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, size_t gpb, int nt,
                 float* y, size_t ldy) {
  using P = Pair<WT>;
  using W = typename P::W;
  constexpr size_t bb = packed_block_bytes<P::C>();
  const int64_t nb = k / QK;
  const W* row0 = (const W*)w;
  const W* row1 = (const W*)(w + (nr > 1 ? ws : 0));
  __m512 acc[2][8], msum[2];
#pragma GCC unroll 2
  for (int g = 0; g < 2; g++) {
    msum[g] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) acc[g][j] = _mm512_setzero_ps();
  }
  alignas(64) int64_t wq[8];
  for (int64_t i = 0; i < nb; i++) {
    P::values(row0[i], row1[i], wq);
    const __m512 wd = pair_scales<WT>(row0[i], row1[i]);
    __m512 wm = _mm512_setzero_ps();
    if constexpr (P::kMin) wm = halves2(&row0[i], &row1[i], 2);
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++) {
      const uint8_t* pk = packed + g * gpb + i * bb;
      if constexpr (P::kMin) msum[g] = _mm512_fmadd_ps(wm, _mm512_loadu_ps((const float*)pk + 16), msum[g]);
      const __m512 scale = _mm512_mul_ps(wd, _mm512_loadu_ps((const float*)pk));
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) {
        const __m512i start =
            P::C ? _mm512_loadu_si512((const __m512i*)(pk + kPackHead + kPackQ) + j) : _mm512_setzero_si512();
        const __m512i sum =
            _mm512_dpbusd_epi32(start, broadcast_q(&wq[j]), _mm512_loadu_si512((const __m512i*)(pk + kPackHead) + j));
        acc[g][j] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sum), acc[g][j]);
      }
    }
  }
#pragma GCC unroll 2
  for (int g = 0; g < 2; g++) {
    __m512 v = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[g][0], acc[g][4]), _mm512_add_ps(acc[g][2], acc[g][6])),
                             _mm512_add_ps(_mm512_add_ps(acc[g][1], acc[g][5]), _mm512_add_ps(acc[g][3], acc[g][7])));
    if constexpr (P::kMin) v = _mm512_add_ps(v, msum[g]);
    store_pair(v, nr, g ? nt : 8, y + (size_t)g * 8 * ldy, ldy);
  }
}
using Pair16Fn = void (*)(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, size_t gpb, int nt,
                          float* y, size_t ldy);
template <Pair16Fn PAIR>
void over_pairs16(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, size_t gpb, int nt, float* y,
                  size_t ldy) {
  for (int r = 0; r < nr; r += 2) PAIR(k, w + r * ws, ws, nr - r, packed, gpb, nt, y + r, ldy);
}

template <int C> size_t packed_bytes(int64_t k) { return (size_t)(k / QK) * packed_block_bytes<C>(); }

// ---- Q4_K (activations q8_K) ----
// Same layout idea per super-block of 256: the integer sums are the AVX2 dot_q4_K's (per
// sub-block of 32, times its 6-bit scale, summed; the min term from bsum pairs), and the float step
// is the one GCC emits for its `sumf += d * sumi - dmin * summ`: fmsub(d, sumi, summ * dmin), then
// add, so every pair keeps the AVX2 dot's bits.
// Packed super-block: xd[16] floats; bs[4][16] dwords, dword 2t(+1) = token t's (b_2i, b_2i+1) as
// int16, b_s the sum of sub-block s's 32 values (Q4_K's mins); bs16[8][16] dwords, the same for
// bsums[2i], bsums[2i+1] (sums of 16: Q6_K's offset); q[64 groups of 4][16] dwords in element order.
constexpr size_t kPackKBs16 = 64 + 4 * 64;
constexpr size_t kPackKHead = kPackKBs16 + 8 * 64;
constexpr size_t kPackKBlock = kPackKHead + 64 * 64;

void pack8_q8_K(const uint8_t* xq, size_t xs, int nt, int64_t k, uint8_t* out) {
  const int64_t nb = k / QK_K;
  for (int64_t i = 0; i < nb; i++) {
    uint8_t* o = out + i * kPackKBlock;
    float* d = (float*)o;
    int32_t* bs = (int32_t*)(o + 64);
    int32_t* bs16 = (int32_t*)(o + kPackKBs16);
    int32_t* q = (int32_t*)(o + kPackKHead);
    for (int t = 0; t < 8; t++) {
      float dt = 0;
      int32_t qt[64] = {0}, bt[4] = {0}, b16[8] = {0};
      if (t < nt) {
        const block_q8_K& b = ((const block_q8_K*)(xq + t * xs))[i];
        dt = b.d;
        std::memcpy(qt, b.qs, 256);
        for (int j = 0; j < 4; j++) {
          const int16_t lo = (int16_t)(b.bsums[4 * j] + b.bsums[4 * j + 1]);
          const int16_t hi = (int16_t)(b.bsums[4 * j + 2] + b.bsums[4 * j + 3]);
          bt[j] = (int32_t)((uint32_t)(uint16_t)lo | ((uint32_t)(uint16_t)hi << 16));
        }
        std::memcpy(b16, b.bsums, 32);
      }
      d[2 * t] = d[2 * t + 1] = dt;
      for (int j = 0; j < 4; j++) bs[j * 16 + 2 * t] = bs[j * 16 + 2 * t + 1] = bt[j];
      for (int j = 0; j < 8; j++) bs16[j * 16 + 2 * t] = bs16[j * 16 + 2 * t + 1] = b16[j];
      for (int g = 0; g < 64; g++) q[g * 16 + 2 * t] = q[g * 16 + 2 * t + 1] = qt[g];
    }
  }
}

size_t packed_bytes_q8_K(int64_t k) { return (size_t)(k / QK_K) * kPackKBlock; }

// The 8 scales (or mins) of rows r and r+1 per sub-block as qwords of two int32 (row r low).
inline void scale_pairs(uint64_t s0, uint64_t s1, int64_t* out) {
  const __m512i a = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128((long long)s0));
  const __m512i b = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128((long long)s1));
  _mm512_store_si512((__m512i*)out, _mm512_or_si512(a, _mm512_slli_epi64(b, 32)));
}
// The 8 mins of rows r and r+1 as int16 pairs (sub-blocks 2i, 2i+1) per row: qword i = (row r's
// pair, row r+1's pair).
inline void min_pairs(uint64_t m0, uint64_t m1, int64_t* out) {
  const __m128i a = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m0));  // 8 int16 = 4 dwords
  const __m128i b = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m1));
  _mm_store_si128((__m128i*)out, _mm_unpacklo_epi32(a, b));
  _mm_store_si128((__m128i*)out + 1, _mm_unpackhi_epi32(a, b));
}

void gemm8_q4_K_pair(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y,
                     size_t ldy) {
  const int64_t nb = k / QK_K;
  const block_q4_K* row0 = (const block_q4_K*)w;
  const block_q4_K* row1 = (const block_q4_K*)(w + (nr > 1 ? ws : 0));
  __m512 acc = _mm512_setzero_ps();
  alignas(64) int64_t wq[8], sc[8], mn[4];
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* pk = packed + i * kPackKBlock;
    const block_q4_K& b0 = row0[i];
    const block_q4_K& b1 = row1[i];
    uint64_t sc0, mn0, sc1, mn1;
    unpack_scales_mins(b0.scales, &sc0, &mn0);
    unpack_scales_mins(b1.scales, &sc1, &mn1);
    scale_pairs(sc0, sc1, sc);
    min_pairs(mn0, mn1, mn);
    __m512i sumi = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
      const __m256i q0 = _mm256_loadu_si256((const __m256i*)(b0.qs + 32 * j));
      const __m256i q1 = _mm256_loadu_si256((const __m256i*)(b1.qs + 32 * j));
      for (int h = 0; h < 2; h++) {  // h = 0: low nibbles, sub-block 2j; 1: high, 2j + 1
        const int sb = 2 * j + h;
        interleave_pair(_mm256_and_si256(h ? _mm256_srli_epi16(q0, 4) : q0, m4),
                        _mm256_and_si256(h ? _mm256_srli_epi16(q1, 4) : q1, m4), wq);
        __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
          s = _mm512_dpbusd_epi32(s, broadcast_q(&wq[g]),
                                  _mm512_loadu_si512((const __m512i*)(pk + kPackKHead) + sb * 8 + g));
        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(s, broadcast_q(&sc[sb])));
      }
    }
    __m512i summ = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
      summ = _mm512_dpwssd_epi32(summ, broadcast_q(&mn[j]), _mm512_loadu_si512((const __m512i*)(pk + 64) + j));
    const __m512 xd = _mm512_loadu_ps((const float*)pk);
    const __m512 d = _mm512_mul_ps(halves2(&b0, &b1, 0), xd);
    const __m512 dmin = _mm512_mul_ps(halves2(&b0, &b1, 2), xd);
    const __m512 m = _mm512_mul_ps(_mm512_cvtepi32_ps(summ), dmin);
    acc = _mm512_add_ps(acc, _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(sumi), m));
  }
  store_pair(acc, nr, nt, y, ldy);
}


// ---- Q6_K (activations q8_K) ----
// dot_q6_K's integers (values 0..63 times each 16-element group's signed scale, minus 32 times
// the scales against the bsums), then its float step: fma(sumi, d * xd, acc).
void gemm8_q6_K_pair(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y,
                     size_t ldy) {
  const int64_t nb = k / QK_K;
  const block_q6_K* row0 = (const block_q6_K*)w;
  const block_q6_K* row1 = (const block_q6_K*)(w + (nr > 1 ? ws : 0));
  __m512 acc = _mm512_setzero_ps();
  alignas(64) int64_t wq[8], sc[16], sc16[8];
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  const __m512i lo_pairs = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_pairs = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* pk = packed + i * kPackKBlock;
    const block_q6_K& b0 = row0[i];
    const block_q6_K& b1 = row1[i];
    // the 16 scales of both rows as int32 pairs (mullo) and as int16 pairs of pairs (vpdpwssd)
    const __m128i s0 = _mm_loadu_si128((const __m128i*)b0.scales), s1 = _mm_loadu_si128((const __m128i*)b1.scales);
    const __m512i a = _mm512_cvtepi8_epi32(s0), b = _mm512_cvtepi8_epi32(s1);
    _mm512_store_si512((__m512i*)sc, _mm512_permutex2var_epi32(a, lo_pairs, b));
    _mm512_store_si512((__m512i*)sc + 1, _mm512_permutex2var_epi32(a, hi_pairs, b));
    interleave_pair(_mm256_cvtepi8_epi16(s0), _mm256_cvtepi8_epi16(s1), sc16);
    __m512i sumi = _mm512_setzero_si512();
    for (int n = 0; n < 2; n++) {
      const __m256i l00 = _mm256_loadu_si256((const __m256i*)(b0.ql + 64 * n));
      const __m256i l01 = _mm256_loadu_si256((const __m256i*)(b0.ql + 64 * n + 32));
      const __m256i h0 = _mm256_loadu_si256((const __m256i*)(b0.qh + 32 * n));
      const __m256i l10 = _mm256_loadu_si256((const __m256i*)(b1.ql + 64 * n));
      const __m256i l11 = _mm256_loadu_si256((const __m256i*)(b1.ql + 64 * n + 32));
      const __m256i h1 = _mm256_loadu_si256((const __m256i*)(b1.qh + 32 * n));
      for (int u = 0; u < 4; u++) {  // elements 128n + 32u .. +31: scales 8n + 2u and 8n + 2u + 1
        const __m256i l0 = u & 1 ? l01 : l00, l1 = u & 1 ? l11 : l10;
        const int ls = u < 2 ? 0 : 4, hs = 2 * u;
        const __m256i v0 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, ls), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h0, hs), m2), 4));
        const __m256i v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, ls), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h1, hs), m2), 4));
        interleave_pair(v0, v1, wq);
        for (int half = 0; half < 2; half++) {
          const int g16 = 8 * n + 2 * u + half;
          __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int g = 0; g < 4; g++)
            s = _mm512_dpbusd_epi32(s, broadcast_q(&wq[4 * half + g]),
                                    _mm512_loadu_si512((const __m512i*)(pk + kPackKHead) + 4 * g16 + g));
          sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(s, broadcast_q(&sc[g16])));
        }
      }
    }
    __m512i off = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      off = _mm512_dpwssd_epi32(off, broadcast_q(&sc16[j]), _mm512_loadu_si512((const __m512i*)(pk + kPackKBs16) + j));
    sumi = _mm512_sub_epi32(sumi, _mm512_slli_epi32(off, 5));
    const __m512 d = _mm512_mul_ps(halves2(&b0, &b1, offsetof(block_q6_K, d)), _mm512_loadu_ps((const float*)pk));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), d, acc);
  }
  store_pair(acc, nr, nt, y, ldy);
}


}  // namespace

extern const Gemm8 gemm8_q4_0 = {packed_bytes<8>, pack8<false, 8>, over_pairs<gemm8_pair<GgmlType::Q4_0>>,
                                  over_pairs16<gemm16_pair<GgmlType::Q4_0>>};
extern const Gemm8 gemm8_q4_1 = {packed_bytes<0>, pack8<true, 0>, over_pairs<gemm8_pair<GgmlType::Q4_1>>,
                                  over_pairs16<gemm16_pair<GgmlType::Q4_1>>};
extern const Gemm8 gemm8_q5_0 = {packed_bytes<16>, pack8<false, 16>, over_pairs<gemm8_pair<GgmlType::Q5_0>>,
                                  over_pairs16<gemm16_pair<GgmlType::Q5_0>>};
extern const Gemm8 gemm8_q5_1 = {packed_bytes<0>, pack8<true, 0>, over_pairs<gemm8_pair<GgmlType::Q5_1>>,
                                  over_pairs16<gemm16_pair<GgmlType::Q5_1>>};
extern const Gemm8 gemm8_q8_0 = {packed_bytes<128>, pack8<false, 128>, over_pairs<gemm8_pair<GgmlType::Q8_0>>,
                                  over_pairs16<gemm16_pair<GgmlType::Q8_0>>};
extern const Gemm8 gemm8_mxfp4 = {packed_bytes<12>, pack8<false, 12>, over_pairs<gemm8_pair<GgmlType::MXFP4>>,
                                   over_pairs16<gemm16_pair<GgmlType::MXFP4>>};
extern const Gemm8 gemm8_q4_K = {packed_bytes_q8_K, pack8_q8_K, over_pairs<gemm8_q4_K_pair>};
extern const Gemm8 gemm8_q6_K = {packed_bytes_q8_K, pack8_q8_K, over_pairs<gemm8_q6_K_pair>};

}  // namespace avx512
}  // namespace kq
}  // namespace mb
