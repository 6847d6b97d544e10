// AVX2/FMA/F16C activation quantizers, dot products and elementwise ops (see avx2.h). Integer
// block sums are exact (maddubs pair sums stay below 32767: |w| <= 128 and |x| <= 127 since our
// quantizers never write -128).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "../ref/ref.h"
#include "avx2.h"
#include "simd.h"

namespace mb {
namespace kq {
namespace avx2 {

inline int hsum_i32_8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}
inline float fp16(half h) { return _cvtsh_ss(h); }

// 32 bits -> 32 bytes holding 0x10 where the bit is set (the 5th bit of Q5 values)
inline __m256i bits_to_0x10(const uint8_t* qh4) {
  uint32_t x;
  std::memcpy(&x, qh4, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
  const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  bytes = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
  return _mm256_and_si256(bytes, _mm256_set1_epi8(0x10));
}

// ---- activation quantizers ----

// As ggml's x86 quantize_row_q8_0/q8_1: scale 127/amax, round to nearest even.
template <bool WITH_SUM>
inline void quantize_q8_blocks(const float* x, void* vy, int64_t k) {
  const int64_t nb = k / QK;
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < nb; i++, x += QK) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
           v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v0), _mm256_andnot_ps(sign_bit, v1));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v2));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    int8_t* qs;
    if (WITH_SUM) {
      auto* y = (block_q8_1*)vy + i;
      y->d = (half)_cvtss_sh(d, 0);
      const int sum = hsum_i32_8(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
      y->s = (half)_cvtss_sh(d * sum, 0);
      qs = y->qs;
    } else {
      auto* y = (block_q8_0*)vy + i;
      y->d = (half)_cvtss_sh(d, 0);
      qs = y->qs;
    }
    // pack 32 int32 -> 32 int8 in order (packs interleave 128-bit lanes; undo with a permute)
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i*)qs, i0);
  }
}
void quantize_q8_0(const float* x, void* y, int64_t k) { quantize_q8_blocks<false>(x, y, k); }
void quantize_q8_1(const float* x, void* y, int64_t k) { quantize_q8_blocks<true>(x, y, k); }

// Bit-identical to ref::quantize_q8_K (same products, same ties-to-even rounding).
void quantize_q8_K(const float* x, void* vy, int64_t k) {
  auto* y = (block_q8_K*)vy;
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + j)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (!(amax > 0)) {  // all zero (or NaN): same output as the reference's early exit
      if (amax == 0) {
        y[i].d = 0;
        std::memset(y[i].qs, 0, QK_K);
        std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
        continue;
      }
      ref::quantize_q8_K(x, &y[i], QK_K);
      continue;
    }
    // the reference keeps the first element of largest magnitude, with its sign
    float max = 0;
    for (int j = 0; j < QK_K; j++)
      if (std::fabs(x[j]) == amax) { max = x[j]; break; }
    const float iscale = -127.f / max;
    const __m256 mul = _mm256_set1_ps(iscale);
    const __m256i lim = _mm256_set1_epi32(127);
    for (int j = 0; j < QK_K; j += 32) {
      __m256i q[4];
      for (int u = 0; u < 4; u++) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * u), mul);
        q[u] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), lim);
      }
      // bsums over 16: q[0]+q[1] and q[2]+q[3]
      y[i].bsums[j / 16] = (int16_t)hsum_i32_8(_mm256_add_epi32(q[0], q[1]));
      y[i].bsums[j / 16 + 1] = (int16_t)hsum_i32_8(_mm256_add_epi32(q[2], q[3]));
      __m256i a = _mm256_packs_epi32(q[0], q[1]);
      __m256i b = _mm256_packs_epi32(q[2], q[3]);
      a = _mm256_packs_epi16(a, b);
      a = _mm256_permutevar8x32_epi32(a, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256((__m256i*)(y[i].qs + j), a);
    }
    y[i].d = 1 / iscale;
  }
}

void to_f16(const float* x, void* vy, int64_t k) {
  auto* y = (half*)vy;
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < k; i++) y[i] = f2h(x[i]);
}

// ---- float dots (4 accumulators, as ggml's F32/F16 vector loops) ----

template <typename Load>
inline float dot_float_rows(int64_t k, Load load) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= k; i += 32)
    for (int u = 0; u < 4; u++) {
      __m256 a, b;
      load(i + 8 * u, a, b);
      acc[u] = _mm256_fmadd_ps(a, b, acc[u]);
    }
  for (; i + 8 <= k; i += 8) {
    __m256 a, b;
    load(i, a, b);
    acc[0] = _mm256_fmadd_ps(a, b, acc[0]);
  }
  // tails (k % 8) are added by the callers
  return hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}
float dot_f32(int64_t k, const void* w, const void* x) {
  auto a = (const float*)w, b = (const float*)x;
  float s = dot_float_rows(k, [&](int64_t i, __m256& va, __m256& vb) { va = _mm256_loadu_ps(a + i); vb = _mm256_loadu_ps(b + i); });
  for (int64_t i = k & ~7LL; i < k; i++) s += a[i] * b[i];
  return s;
}
float dot_f16(int64_t k, const void* w, const void* x) {
  auto a = (const half*)w, b = (const half*)x;
  float s = dot_float_rows(k, [&](int64_t i, __m256& va, __m256& vb) {
    va = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(a + i)));
    vb = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + i)));
  });
  for (int64_t i = k & ~7LL; i < k; i++) s += h2f(a[i]) * h2f(b[i]);
  return s;
}
inline __m256 bf16x8(const bf16* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
float dot_bf16(int64_t k, const void* w, const void* x) {
  auto a = (const bf16*)w, b = (const bf16*)x;
  float s = dot_float_rows(k, [&](int64_t i, __m256& va, __m256& vb) { va = bf16x8(a + i); vb = bf16x8(b + i); });
  for (int64_t i = k & ~7LL; i < k; i++) s += bf2f(a[i]) * bf2f(b[i]);
  return s;
}

// ---- legacy quants: register-tiled NR weight rows x NT tokens ----
//
// Per (row, token) pair and block: acc = fma(bcast(d_w) * bcast(d_x), int_dot, acc); for the types
// with a min, per row: msum[lane t] = fma(m_w, s_x[t], msum). Both scale pairs sit at the start of
// their blocks ([d, m] and [d, s]) and are converted with one vcvtph2ps each, which keeps the
// shuffle port free; the nibble unpack uses a broadcast load and a variable shift for the same
// reason. The 1x1 instance is the row dot, and every instance computes each pair identically.

// [d, second half, ...] of a block as floats (the 4 bytes at the block start)
inline __m128 scales_of(const void* block) {
  uint32_t u;
  std::memcpy(&u, block, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}
// 16 bytes of nibbles -> 32 bytes, without a cross-lane shuffle
inline __m256i unpack_nibbles_bcast(const uint8_t* qs) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)qs));
  const __m256i sh = _mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
  return _mm256_and_si256(sh, _mm256_set1_epi8(0x0F));
}

template <GgmlType WT> struct Legacy;
template <> struct Legacy<GgmlType::Q4_0> {
  using W = block_q4_0; using X = block_q8_0; static constexpr bool kMin = false, kSigned = true;
  static __m256i load(const W& b) { return _mm256_sub_epi8(unpack_nibbles_bcast(b.qs), _mm256_set1_epi8(8)); }
};
template <> struct Legacy<GgmlType::Q4_1> {
  using W = block_q4_1; using X = block_q8_1; static constexpr bool kMin = true, kSigned = false;
  static __m256i load(const W& b) { return unpack_nibbles_bcast(b.qs); }
};
template <> struct Legacy<GgmlType::Q5_0> {
  using W = block_q5_0; using X = block_q8_0; static constexpr bool kMin = false, kSigned = true;
  static __m256i load(const W& b) {
    return _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles_bcast(b.qs), bits_to_0x10(b.qh)), _mm256_set1_epi8(16));
  }
};
template <> struct Legacy<GgmlType::Q5_1> {
  using W = block_q5_1; using X = block_q8_1; static constexpr bool kMin = true, kSigned = false;
  static __m256i load(const W& b) { return _mm256_or_si256(unpack_nibbles_bcast(b.qs), bits_to_0x10(b.qh)); }
};
template <> struct Legacy<GgmlType::Q8_0> {
  using W = block_q8_0; using X = block_q8_0; static constexpr bool kMin = false, kSigned = true;
  static __m256i load(const W& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
};
// MXFP4: the nibbles index the doubled E2M1 table; the scale is one E8M0 byte, not an f16 pair.
template <> struct Legacy<GgmlType::MXFP4> {
  using W = block_mxfp4; using X = block_q8_0; static constexpr bool kMin = false, kSigned = true;
  static __m256i load(const W& b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_mxfp4));
    return _mm256_shuffle_epi8(table, unpack_nibbles_bcast(b.qs));
  }
};
// The weight block's scale in lane 0 (and, with a min, the min in lane 1).
template <GgmlType WT, class W> inline __m128 weight_scales(const W& b) {
  if constexpr (WT == GgmlType::MXFP4) return _mm_set_ss(e8m0_half(b.e));
  else return scales_of(&b);
}

// lane t of the result = lane 1 (s) of xds[t]
template <int NT> inline __m128 gather_s(const __m128* xds) {
  if constexpr (NT == 1) {
    return _mm_movehdup_ps(xds[0]);
  } else if constexpr (NT == 2) {
    const __m128 a = _mm_unpacklo_ps(xds[0], xds[1]);  // d0 d1 s0 s1
    return _mm_movehl_ps(a, a);
  } else {
    const __m128 a = _mm_unpacklo_ps(xds[0], xds[1]);
    const __m128 b = _mm_unpacklo_ps(xds[2], NT == 4 ? xds[NT - 1] : xds[2]);
    return _mm_movehl_ps(b, a);  // s0 s1 s2 s3
  }
}
inline float lane(__m128 v, int t) {
  alignas(16) float f[4];
  _mm_store_ps(f, v);
  return f[t];
}

template <GgmlType WT, int NR, int NT>
inline void legacy_kernel(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  using L = Legacy<WT>;
  using W = typename L::W;
  using X = typename L::X;
  const int64_t nb = k / QK;
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[NR][NT];
  __m128 msum[NR];
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++) {
    msum[r] = _mm_setzero_ps();
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; i++) {
    __m256i wq[NR], wraw[NR];
    __m128 wds[NR];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
      const W& b = ((const W*)(w + r * ws))[i];
      // decode streams the weights once from memory: fetch the rows two strips ahead
      if constexpr (NT == 1) _mm_prefetch((const char*)&b + 2 * NR * ws, _MM_HINT_T0);
      wraw[r] = L::load(b);
      // signed weights: multiply |w| by sign(x, w), since maddubs wants one unsigned operand
      wq[r] = L::kSigned ? _mm256_sign_epi8(wraw[r], wraw[r]) : wraw[r];
      wds[r] = weight_scales<WT>(b);
    }
    __m128 xds[NT];
    __m256 dx[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
      xds[t] = scales_of(&((const X*)(x + t * xs))[i]);
      dx[t] = _mm256_broadcastss_ps(xds[t]);
    }
    if constexpr (L::kMin) {
      const __m128 s = gather_s<NT>(xds);
#pragma GCC unroll 4
      for (int r = 0; r < NR; r++) msum[r] = _mm_fmadd_ps(_mm_permute_ps(wds[r], 0x55), s, msum[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
      const __m256 dw = _mm256_broadcastss_ps(wds[r]);
#pragma GCC unroll 4
      for (int t = 0; t < NT; t++) {
        __m256i xv = _mm256_loadu_si256((const __m256i*)((const X*)(x + t * xs))[i].qs);
        if constexpr (L::kSigned) xv = _mm256_sign_epi8(xv, wraw[r]);
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], xv), ones16);
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[t]), _mm256_cvtepi32_ps(p), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[t * ldy + r] = hsum8(acc[r][t]) + (L::kMin ? lane(msum[r], t) : 0.0f);
}

template <GgmlType WT>
float legacy_dot(int64_t k, const void* w, const void* x) {
  float y;
  legacy_kernel<WT, 1, 1>(k, (const uint8_t*)w, 0, (const uint8_t*)x, 0, &y, 1);
  return y;
}

// nt == 1 (decode): up to 4 rows at once for independent accumulator chains. nt > 1: pairs of
// rows x nt tokens, 8 accumulators at most, so the 16 ymm registers hold the whole tile.
template <GgmlType WT, int NR>
inline void legacy_rows(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int nt, float* y, size_t ldy) {
  switch (nt) {
    case 4: legacy_kernel<WT, NR, 4>(k, w, ws, x, xs, y, ldy); break;
    case 3: legacy_kernel<WT, NR, 3>(k, w, ws, x, xs, y, ldy); break;
    case 2: legacy_kernel<WT, NR, 2>(k, w, ws, x, xs, y, ldy); break;
    default: legacy_kernel<WT, NR, 1>(k, w, ws, x, xs, y, ldy); break;
  }
}
template <GgmlType WT>
void legacy_tile(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y, size_t ldy) {
  if (nt == 1) {
    switch (nr) {
      case 4: legacy_kernel<WT, 4, 1>(k, w, ws, x, xs, y, ldy); return;
      case 3: legacy_kernel<WT, 3, 1>(k, w, ws, x, xs, y, ldy); return;
      case 2: legacy_kernel<WT, 2, 1>(k, w, ws, x, xs, y, ldy); return;
      default: legacy_kernel<WT, 1, 1>(k, w, ws, x, xs, y, ldy); return;
    }
  }
  int r = 0;
  for (; r + 2 <= nr; r += 2) legacy_rows<WT, 2>(k, w + r * ws, ws, x, xs, nt, y + r, ldy);
  if (r < nr) legacy_rows<WT, 1>(k, w + r * ws, ws, x, xs, nt, y + r, ldy);
}

// ---- K-quants (x is q8_K): exact int32 sums per super-block, scaled once per super-block ----
//
// Register-tiled NR weight rows x NT tokens. Per (row, token) pair and super-block: the integer
// sum is exact (maddubs pairs stay below 2^15: |q| <= 63, |x| <= 127), so the order it is added
// in does not matter, and the float step is written out as one fused operation, so every
// instance, the 1x1 one (the row dot) included, and the AVX-512 set's 8-token GEMM give the same
// bits:
//   Q4_K, Q5_K: sumf = sumf + fmsub(d_w * d_x, sumi, (dmin_w * d_x) * summ)
//   Q6_K:       sumf = fma(d_w * d_x, sumi, sumf)
// The unpacked weights of a super-block are used for all NT tokens.

// int16 lane j of s (in both 128-bit halves) broadcast across the vector: one in-lane shuffle
// instead of a scalar move plus a broadcast
inline __m256i bcast16(__m256i s, int j) {
  const __m256i ctrl = _mm256_set1_epi16((short)((2 * j) | ((2 * j + 1) << 8)));
  return _mm256_shuffle_epi8(s, ctrl);
}
// The 8 pair sums of a q8_K block's 16 bsums (sub-blocks of 32), as int16.
inline __m128i bsum_pairs(const int16_t* bsums) {
  return _mm_hadd_epi16(_mm_loadu_si128((const __m128i*)bsums), _mm_loadu_si128((const __m128i*)(bsums + 8)));
}
inline int hsum_i32_4(__m128i p) {
  p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(1, 0, 3, 2)));
  p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(p);
}
// Lane t: the sum of v[t]'s 8 (or 4) int32, for 4 vectors at once (an integer sum in any order
// is the same, so a token's sums match hsum_i32_8 and hsum_i32_4 exactly).
inline __m128i hsum4_i32_8(const __m256i* v) {
  const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}
inline __m128i hsum4_i32_4(const __m128i* v) {
  return _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]));
}
// The activation scales of NT <= 4 tokens' blocks as lanes (0 past NT).
template <int NT> inline __m128 token_scales(const block_q8_K* const* xb) {
  alignas(16) float d[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
  for (int t = 0; t < NT; t++) d[t] = xb[t]->d;
  return _mm_load_ps(d);
}
// A decode step (and a step of a few tokens) streams each row once from memory: fetch
// kPrefetchAhead bytes ahead of the super-block being read, every line of it (measured on the
// 1.5B's Q6_K output matrix, one thread, busy machine: best of 3, 24 ms with it, 39 ms without).
// Prefetches never fault.
constexpr size_t kPrefetchAhead = 1024;
template <size_t BYTES> inline void prefetch_block(const void* b, size_t ahead) {
  for (size_t o = 0; o < BYTES; o += 64) _mm_prefetch((const char*)b + ahead + o, _MM_HINT_T0);
}

// Q4_K (KIND 4) and Q5_K (KIND 5): the same scales, mins and float step; Q5_K adds a fifth bit.
template <int KIND, int NR, int NT>
inline void kq45_kernel(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  using W = std::conditional_t<KIND == 4, block_q4_K, block_q5_K>;
  const int64_t nb = k / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  __m128 sumv = _mm_setzero_ps();  // NR == 1, NT > 1: sumf[0][t] in lane t
  float sumf[NR][NT];
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) sumf[r][t] = 0;
  for (int64_t i = 0; i < nb; i++) {
    const W* b[NR];
    __m256i sc16[NR];
    uint64_t mn[NR];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
      b[r] = (const W*)(w + r * ws) + i;
      if constexpr (kPrefetchAhead > 0) prefetch_block<sizeof(W)>(b[r], kPrefetchAhead);
      uint64_t sc;
      unpack_scales_mins(b[r]->scales, &sc, &mn[r]);
      sc16[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    }
    const block_q8_K* xb[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) xb[t] = (const block_q8_K*)(x + t * xs) + i;
    __m256i acc[NR][NT];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
      for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
#pragma GCC unroll 4
      for (int r = 0; r < NR; r++) {
        const __m256i q = _mm256_loadu_si256((const __m256i*)(b[r]->qs + 32 * j));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (KIND == 5) {
          // bit (2j) of qh is the 5th bit of the low-nibble sub-block, bit (2j+1) of the high one
          const __m256i qh = _mm256_loadu_si256((const __m256i*)b[r]->qh);
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
        }
        const __m256i s0 = bcast16(sc16[r], 2 * j), s1 = bcast16(sc16[r], 2 * j + 1);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
          const __m256i y0 = _mm256_loadu_si256((const __m256i*)(xb[t]->qs + 64 * j));
          const __m256i y1 = _mm256_loadu_si256((const __m256i*)(xb[t]->qs + 64 * j + 32));
          acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0));
          acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1));
        }
      }
    }
    if constexpr (NR == 1 && NT == 4) {
      // four tokens' sums and float steps side by side, one per lane: the same operations on the
      // same values as the scalar step below, which T = 1 runs (measured, one thread, 1.5B's Q4_K
      // gate/up: 4 tokens 1.18 -> 0.98 ms; for 2 and 3 tokens the lanes cost more than they save,
      // 0.70 -> 0.88 at 2)
      const __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn[0]));
      __m256i a[4];
      __m128i p[4];
#pragma GCC unroll 4
      for (int t = 0; t < 4; t++) {
        a[t] = t < NT ? acc[0][t] : _mm256_setzero_si256();
        p[t] = t < NT ? _mm_madd_epi16(bsum_pairs(xb[t]->bsums), m) : _mm_setzero_si128();
      }
      const __m128 xd = token_scales<NT>(xb);
      const __m128 d = _mm_mul_ps(_mm_set1_ps(fp16(b[0]->d)), xd), dmin = _mm_mul_ps(_mm_set1_ps(fp16(b[0]->dmin)), xd);
      const __m128 v = _mm_fmsub_ps(d, _mm_cvtepi32_ps(hsum4_i32_8(a)), _mm_mul_ps(dmin, _mm_cvtepi32_ps(hsum4_i32_4(p))));
      sumv = _mm_add_ps(sumv, v);
    } else {
#pragma GCC unroll 4
      for (int t = 0; t < NT; t++) {
        const __m128i bs = bsum_pairs(xb[t]->bsums);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
          const __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn[r]));
          const int summ = hsum_i32_4(_mm_madd_epi16(bs, m));
          const int sumi = hsum_i32_8(acc[r][t]);
          const float d = fp16(b[r]->d) * xb[t]->d, dmin = fp16(b[r]->dmin) * xb[t]->d;
          sumf[r][t] = sumf[r][t] + std::fma(d, (float)sumi, -(dmin * (float)summ));
        }
      }
    }
  }
  if constexpr (NR == 1 && NT == 4) {
    alignas(16) float out[4];
    _mm_store_ps(out, sumv);
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[t * ldy] = out[t];
    return;
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[t * ldy + r] = sumf[r][t];
}

template <int NR, int NT>
inline void q6_K_kernel(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  const int64_t nb = k / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  __m128 sumv = _mm_setzero_ps();  // NR == 1, NT > 1: sumf[0][t] in lane t
  float sumf[NR][NT];
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) sumf[r][t] = 0;
  for (int64_t i = 0; i < nb; i++) {
    const block_q6_K* b[NR];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
      b[r] = (const block_q6_K*)(w + r * ws) + i;
      if constexpr (kPrefetchAhead > 0) prefetch_block<sizeof(block_q6_K)>(b[r], kPrefetchAhead);
    }
    const block_q8_K* xb[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) xb[t] = (const block_q8_K*)(x + t * xs) + i;
    __m256i acc[NR][NT];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
      for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
#pragma GCC unroll 4
      for (int r = 0; r < NR; r++) {
        const uint8_t* ql = b[r]->ql + 64 * n;
        const uint8_t* qh = b[r]->qh + 32 * n;
        // the 8 scales of this half as int16, the same in both 128-bit lanes
        const __m256i sc16 =
            _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)(b[r]->scales + 8 * n))));
        const __m256i l0 = _mm256_loadu_si256((const __m256i*)ql);
        const __m256i l1 = _mm256_loadu_si256((const __m256i*)(ql + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i*)qh);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
          // values 0..63 of elements 128n + 32u .. +31 (the -32 offset is applied through bsums below)
          const __m256i l = u & 1 ? l1 : l0;
          const __m256i q = _mm256_or_si256(_mm256_and_si256(u < 2 ? l : _mm256_srli_epi16(l, 4), m4),
                                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * u), m2), 4));
          // elements 0..15 of this 32 use scale sc[2u] (low lane), 16..31 use sc[2u+1] (high lane)
          const short lo_sel = (short)((4 * u) | ((4 * u + 1) << 8)), hi_sel = (short)((4 * u + 2) | ((4 * u + 3) << 8));
          const __m256i s = _mm256_shuffle_epi8(sc16, _mm256_set_m128i(_mm_set1_epi16(hi_sel), _mm_set1_epi16(lo_sel)));
#pragma GCC unroll 4
          for (int t = 0; t < NT; t++) {
            const __m256i yy = _mm256_loadu_si256((const __m256i*)(xb[t]->qs + 128 * n + 32 * u));
            acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, yy), s));
          }
        }
      }
    }
    // subtract 32 * sum_g scale_g * bsum_g
    if constexpr (NR == 1 && NT == 4) {
      // the tokens side by side, one per lane, as in kq45_kernel
      const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b[0]->scales));
      __m256i a[4], o[4];
#pragma GCC unroll 4
      for (int t = 0; t < 4; t++) {
        a[t] = t < NT ? acc[0][t] : _mm256_setzero_si256();
        o[t] = t < NT ? _mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i*)xb[t]->bsums)) : _mm256_setzero_si256();
      }
      const __m128i sumi = _mm_sub_epi32(hsum4_i32_8(a), _mm_slli_epi32(hsum4_i32_8(o), 5));
      const __m128 d = _mm_mul_ps(_mm_set1_ps(fp16(b[0]->d)), token_scales<NT>(xb));
      sumv = _mm_fmadd_ps(d, _mm_cvtepi32_ps(sumi), sumv);
    } else {
#pragma GCC unroll 4
      for (int t = 0; t < NT; t++) {
        const __m256i bs = _mm256_loadu_si256((const __m256i*)xb[t]->bsums);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
          const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b[r]->scales));
          const int off = hsum_i32_8(_mm256_madd_epi16(s16, bs));
          const int sumi = hsum_i32_8(acc[r][t]) - 32 * off;
          sumf[r][t] = std::fma(fp16(b[r]->d) * xb[t]->d, (float)sumi, sumf[r][t]);
        }
      }
    }
  }
  if constexpr (NR == 1 && NT == 4) {
    alignas(16) float out[4];
    _mm_store_ps(out, sumv);
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[t * ldy] = out[t];
    return;
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[t * ldy + r] = sumf[r][t];
}

// KIND 4, 5: Q4_K, Q5_K; 6: Q6_K
template <int KIND, int NR, int NT>
inline void kquant_kernel(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  if constexpr (KIND == 6) q6_K_kernel<NR, NT>(k, w, ws, x, xs, y, ldy);
  else kq45_kernel<KIND, NR, NT>(k, w, ws, x, xs, y, ldy);
}
template <int KIND, int NR>
inline void kquant_rows(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int nt, float* y,
                        size_t ldy) {
  switch (nt) {
    case 4: kquant_kernel<KIND, NR, 4>(k, w, ws, x, xs, y, ldy); break;
    case 3: kquant_kernel<KIND, NR, 3>(k, w, ws, x, xs, y, ldy); break;
    case 2: kquant_kernel<KIND, NR, 2>(k, w, ws, x, xs, y, ldy); break;
    default: kquant_kernel<KIND, NR, 1>(k, w, ws, x, xs, y, ldy); break;
  }
}
// One row after the other, each with all nt tokens, so the matrix is read as one sequential,
// prefetched stream for any token count (measured: 4 rows at once, as for the legacy types,
// streamed the 1.5B's Q6_K output matrix at a third of one row's rate, prefetching or not; pairs
// of rows without the prefetch made 2 tokens cost 4.4x one token there, 12.7 ms with one row).
// Every (row, token) sum runs the same instructions in the same order whatever nr and nt are, so
// the bits do not depend on the batch.
template <int KIND>
void kquant_tile(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
                 size_t ldy) {
  for (int r = 0; r < nr; r++) kquant_rows<KIND, 1>(k, w + r * ws, ws, x, xs, nt, y + r, ldy);
}
template <int KIND> float kquant_dot(int64_t k, const void* w, const void* x) {
  float y;
  kquant_kernel<KIND, 1, 1>(k, (const uint8_t*)w, 0, (const uint8_t*)x, 0, &y, 1);
  return y;
}

float dot_q4_K(int64_t k, const void* w, const void* x) { return kquant_dot<4>(k, w, x); }
float dot_q5_K(int64_t k, const void* w, const void* x) { return kquant_dot<5>(k, w, x); }
float dot_q6_K(int64_t k, const void* w, const void* x) { return kquant_dot<6>(k, w, x); }
void tile_q4_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy) {
  kquant_tile<4>(k, w, ws, nr, x, xs, nt, y, ldy);
}
void tile_q5_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy) {
  kquant_tile<5>(k, w, ws, nr, x, xs, nt, y, ldy);
}
void tile_q6_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy) {
  kquant_tile<6>(k, w, ws, nr, x, xs, nt, y, ldy);
}

// ---- elementwise ----

// exp for a vector: n = round(x log2 e), r = x - n ln2 (two-part constant), degree-7 polynomial
// on |r| <= ln2/2 (truncation < 1e-8 relative), scaled by 2^n in two steps so n = 128 is fine.
inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.72283935546875f), lo = _mm256_set1_ps(-87.33654022216797f);
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269502162933349609f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  res = _mm256_blendv_ps(res, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  res = _mm256_blendv_ps(res, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  return res;
}

void rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
  // squares rounded to float, summed in double, as ggml does
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 sq = _mm256_mul_ps(v, v);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  double buf[4];
  _mm256_storeu_pd(buf, _mm256_add_pd(s0, s1));
  double sum = (buf[0] + buf[1]) + (buf[2] + buf[3]);
  for (; i < n; i++) sum += (double)(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt((float)(sum / n) + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
  for (; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

void softmax(float* x, int n) {
  __m256 vm = _mm256_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(vm, 1), _mm256_castps256_ps128(vm));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float max = _mm_cvtss_f32(m4);
  for (; i < n; i++) max = std::fmax(max, x[i]);
  const __m256 vmax = _mm256_set1_ps(max);
  double sum = 0;
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(x + i, e);
    sum += (double)hsum8(e);
  }
  for (; i < n; i++) {
    x[i] = std::exp(x[i] - max);
    sum += (double)x[i];
  }
  const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; i++) x[i] *= (float)(1.0 / sum);
}

void silu_mul(float* gate, const float* up, int n) {
  const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_xor_ps(g, neg))));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; i++) gate[i] = (gate[i] / (1.0f + std::exp(-gate[i]))) * up[i];
}

template float legacy_dot<GgmlType::Q4_0>(int64_t, const void*, const void*);
template float legacy_dot<GgmlType::Q4_1>(int64_t, const void*, const void*);
template float legacy_dot<GgmlType::Q5_0>(int64_t, const void*, const void*);
template float legacy_dot<GgmlType::Q5_1>(int64_t, const void*, const void*);
template float legacy_dot<GgmlType::Q8_0>(int64_t, const void*, const void*);
template float legacy_dot<GgmlType::MXFP4>(int64_t, const void*, const void*);
template void legacy_tile<GgmlType::Q4_0>(int64_t, const uint8_t*, size_t, int, const uint8_t*, size_t, int, float*, size_t);
template void legacy_tile<GgmlType::Q4_1>(int64_t, const uint8_t*, size_t, int, const uint8_t*, size_t, int, float*, size_t);
template void legacy_tile<GgmlType::Q5_0>(int64_t, const uint8_t*, size_t, int, const uint8_t*, size_t, int, float*, size_t);
template void legacy_tile<GgmlType::Q5_1>(int64_t, const uint8_t*, size_t, int, const uint8_t*, size_t, int, float*, size_t);
template void legacy_tile<GgmlType::Q8_0>(int64_t, const uint8_t*, size_t, int, const uint8_t*, size_t, int, float*, size_t);
template void legacy_tile<GgmlType::MXFP4>(int64_t, const uint8_t*, size_t, int, const uint8_t*, size_t, int, float*, size_t);

}  // namespace avx2
}  // namespace kq
}  // namespace mb
