// AVX2/FMA/F16C kernels. This file alone is compiled with -mavx2 -mfma -mf16c (and -O3);
// dispatch.cpp calls avx2_table_unchecked() only after checking the CPU. Integer block sums are
// exact (maddubs pair sums stay below 32767: |w| <= 128 and |x| <= 127 since our quantizers never
// write -128), so results differ from ref/ only in float rounding order. The legacy-quant dot products are the 1x1 case of the register-tiled kernels, which keeps
// a token's result identical whether it is computed alone or inside a batch.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "../blocks.h"
#include "../ref/ref.h"

namespace mb {
namespace kq {
namespace {

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
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
      wds[r] = scales_of(&b);
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

// 8 mins (6-bit) times the 8 pair sums of bsums
inline int kquant_min_term(uint64_t mins8, const int16_t* bsums) {
  const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i*)bsums), _mm_loadu_si128((const __m128i*)(bsums + 8)));
  const __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mins8));
  __m128i p = _mm_madd_epi16(bs, m);
  p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(1, 0, 3, 2)));
  p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(p);
}
// int16 lane j of s (in both 128-bit halves) broadcast across the vector: one in-lane shuffle
// instead of a scalar move plus a broadcast
inline __m256i bcast16(__m256i s, int j) {
  const __m256i ctrl = _mm256_set1_epi16((short)((2 * j) | ((2 * j + 1) << 8)));
  return _mm256_shuffle_epi8(s, ctrl);
}

float dot_q4_K(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q4_K*)vw;
  auto x = (const block_q8_K*)vx;
  float sumf = 0;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < k / QK_K; i++) {
    uint64_t sc, mn;
    unpack_scales_mins(w[i].scales, &sc, &mn);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      const __m256i q = _mm256_loadu_si256((const __m256i*)(w[i].qs + 32 * j));
      const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      const __m256i y0 = _mm256_loadu_si256((const __m256i*)(x[i].qs + 64 * j));
      const __m256i y1 = _mm256_loadu_si256((const __m256i*)(x[i].qs + 64 * j + 32));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), bcast16(sc16, 2 * j)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), bcast16(sc16, 2 * j + 1)));
    }
    const int sumi = hsum_i32_8(acc);
    const int summ = kquant_min_term(mn, x[i].bsums);
    const float d = fp16(w[i].d) * x[i].d, dmin = fp16(w[i].dmin) * x[i].d;
    sumf += d * sumi - dmin * summ;
  }
  return sumf;
}

float dot_q5_K(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q5_K*)vw;
  auto x = (const block_q8_K*)vx;
  float sumf = 0;
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < k / QK_K; i++) {
    uint64_t sc, mn;
    unpack_scales_mins(w[i].scales, &sc, &mn);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    const __m256i qh = _mm256_loadu_si256((const __m256i*)w[i].qh);
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      const __m256i q = _mm256_loadu_si256((const __m256i*)(w[i].qs + 32 * j));
      // bit (2j) of qh is the 5th bit of the low-nibble sub-block, bit (2j+1) of the high one
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
      const __m256i y0 = _mm256_loadu_si256((const __m256i*)(x[i].qs + 64 * j));
      const __m256i y1 = _mm256_loadu_si256((const __m256i*)(x[i].qs + 64 * j + 32));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), bcast16(sc16, 2 * j)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), bcast16(sc16, 2 * j + 1)));
    }
    const int sumi = hsum_i32_8(acc);
    const int summ = kquant_min_term(mn, x[i].bsums);
    const float d = fp16(w[i].d) * x[i].d, dmin = fp16(w[i].dmin) * x[i].d;
    sumf += d * sumi - dmin * summ;
  }
  return sumf;
}

float dot_q6_K(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q6_K*)vw;
  auto x = (const block_q8_K*)vx;
  float sumf = 0;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < k / QK_K; i++) {
    const uint8_t* ql = w[i].ql;
    const uint8_t* qh = w[i].qh;
    const int8_t* sc = w[i].scales;
    const int8_t* y = x[i].qs;
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128) {
      // the 8 scales of this half as int16, the same in both 128-bit lanes
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)sc)));
      const __m256i l0 = _mm256_loadu_si256((const __m256i*)ql);
      const __m256i l1 = _mm256_loadu_si256((const __m256i*)(ql + 32));
      const __m256i h = _mm256_loadu_si256((const __m256i*)qh);
      // values 0..63 (the -32 offset is applied through bsums below)
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4)),
      };
#pragma GCC unroll 4
      for (int u = 0; u < 4; u++) {
        const __m256i yy = _mm256_loadu_si256((const __m256i*)(y + 32 * u));
        // elements 0..15 of this 32 use scale sc[2u] (low lane), 16..31 use sc[2u+1] (high lane)
        const short lo_sel = (short)((4 * u) | ((4 * u + 1) << 8)), hi_sel = (short)((4 * u + 2) | ((4 * u + 3) << 8));
        const __m256i s = _mm256_shuffle_epi8(sc16, _mm256_set_m128i(_mm_set1_epi16(hi_sel), _mm_set1_epi16(lo_sel)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q[u], yy), s));
      }
    }
    // subtract 32 * sum_g scale_g * bsum_g
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)w[i].scales));
    const __m256i bs = _mm256_loadu_si256((const __m256i*)x[i].bsums);
    const int off = hsum_i32_8(_mm256_madd_epi16(s16, bs));
    const int sumi = hsum_i32_8(acc) - 32 * off;
    sumf += fp16(w[i].d) * x[i].d * sumi;
  }
  return sumf;
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


// ---- attention (see mb::attention for the contract, blocks.h for the scratch layout) ----
//
// Bit for bit the arithmetic of ref::attention (llama.cpp's, see there), in three sweeps over the
// keys:
//  1. keys, by blocks of kAttnKeyBlock: the query rows go by in groups of up to 3; their scores
//     against the block go to scratch, masked past each row's position, and each row's running
//     max is updated;
//  2. per block and row, e = exp(s - max) in place, summed per row;
//  3. values, by blocks of kPvKeys: per group of up to 6 rows, probabilities f16(e * (1 / sum)),
//     then each output's 16 chains (key j feeds chain j % 16) += p * v, one chain at a time over
//     tiles of 6 rows x 16 dims; the chains are folded into the outputs at the end.
// The reference's 16-lane sums are held as two 8-lane halves (scores with the dims in the lanes),
// as 16 vectors with the keys in the lanes (scores from transposed keys) or as 16 vectors with the
// dims in the lanes (output chains); each is folded in the reference's order.
// With many rows a block of K or V is converted to f32 once (K transposed) and reused by every
// group; with one group (decode: the G heads of one token) it is read as f16 in place, since each
// element then serves that group alone. Either way every score and output sees the same
// operations in the same order whatever the number of rows, the row's place in its group or where
// the call's last block ends: that is what makes a row independent of its batch.

constexpr int kAttnRows = 3;                  // rows per group in the key sweep (tiles of 3 rows x 16 keys)
constexpr int kPvRows = 6;                    // rows per group in the value sweep (tiles of 6 rows x 16 dims)
constexpr int kPvKeys = 2 * kAttnKeyBlock;    // keys per value block: 8 per chain between visits to its sum

inline __m256 ld8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 ld8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

// [hsum8(a), hsum8(b), hsum8(c), hsum8(d)], each summed by hsum8's tree ((0+4)+(2+6)) +
// ((1+5)+(3+7)), the reference's fold from 8 lanes: the permutation makes the first hadd add
// lanes l and l+4.
inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256i perm = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
  a = _mm256_permutevar8x32_ps(a, perm);
  b = _mm256_permutevar8x32_ps(b, perm);
  c = _mm256_permutevar8x32_ps(c, perm);
  d = _mm256_permutevar8x32_ps(d, perm);
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}
inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
inline __m256 round_f16(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

// ref::ggml_expf on 8 lanes (x <= 0)
inline __m256 exp8_ggml(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
  // 2^n from z's low bits (z = 1.5 * 2^23 + n)
  const __m256 k = _mm256_castsi256_ps(
      _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(z), 23), _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 normal = _mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);  // false for -inf and NaN too
  return _mm256_and_ps(_mm256_mul_ps(j, k), normal);
}

// s[r][0..4) = scale * qt[r] . key[0..4) for r < RM (rows kAttnKeyBlock apart); keys are Dh apart
// from kp (f32 or f16). Lanes 0-7 and 8-15 of the reference's 16 are accumulated one half after
// the other (12 accumulators each), the first half parked, then added lane by lane (the fold to
// 8) and reduced.
template <int RM, int DH, typename KT>
inline void attn_qk(const float* qt, int dh, const KT* kp, float scale, float* s) {
  const int Dh = DH ? DH : dh;
  __m256 part[RM][4];
  for (int half = 0; half < 2; half++) {
    __m256 acc[RM][4];
#pragma GCC unroll 3
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
      for (int c = 0; c < 4; c++) acc[r][c] = _mm256_setzero_ps();
    for (int d = 8 * half; d < Dh; d += 16) {
      const __m256 k0 = ld8(kp + d), k1 = ld8(kp + Dh + d), k2 = ld8(kp + 2 * Dh + d), k3 = ld8(kp + 3 * Dh + d);
#pragma GCC unroll 3
      for (int r = 0; r < RM; r++) {
        const __m256 qv = _mm256_loadu_ps(qt + r * Dh + d);
        acc[r][0] = _mm256_fmadd_ps(qv, k0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(qv, k1, acc[r][1]);
        acc[r][2] = _mm256_fmadd_ps(qv, k2, acc[r][2]);
        acc[r][3] = _mm256_fmadd_ps(qv, k3, acc[r][3]);
      }
    }
#pragma GCC unroll 3
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
      for (int c = 0; c < 4; c++) part[r][c] = half ? _mm256_add_ps(part[r][c], acc[r][c]) : acc[r][c];
  }
  const __m128 sc = _mm_set1_ps(scale);
#pragma GCC unroll 3
  for (int r = 0; r < RM; r++)
    _mm_storeu_ps(s + r * kAttnKeyBlock, _mm_mul_ps(reduce4(part[r][0], part[r][1], part[r][2], part[r][3]), sc));
}

// The same scores with the keys in the lanes, from the block's keys transposed (kt [Dh][Bk], so
// no horizontal sums): s[r][0..16) for r < RM, keys kt[.][0..16). Each of the reference's 16
// chains (dims l, l+16, ...) is an fma chain over broadcast q and a row of kt; chains l and l+8
// are added (the fold to 8) as soon as both are done, then the 8 results folded 4, 2, 1.
template <int RM, int DH>
inline void attn_qk_t(const float* qt, int dh, const float* kt, float scale, float* s) {
  const int Dh = DH ? DH : dh;
  __m256 t3[8][RM][2];  // chain l + chain l+8, per row and 8 keys
  for (int l = 0; l < 8; l++) {
    __m256 acc[RM][2][2];  // [row][keys 0-7, 8-15][chain l, l+8]
#pragma GCC unroll 3
    for (int r = 0; r < RM; r++)
      for (int c = 0; c < 4; c++) acc[r][c / 2][c % 2] = _mm256_setzero_ps();
    for (int d = l; d < Dh; d += 16) {
      const float* k0 = kt + (size_t)d * kAttnKeyBlock;
      const float* k8 = k0 + (size_t)8 * kAttnKeyBlock;  // dim d + 8
#pragma GCC unroll 3
      for (int r = 0; r < RM; r++) {
        const __m256 q0 = _mm256_broadcast_ss(qt + r * Dh + d);
        acc[r][0][0] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k0), acc[r][0][0]);
        acc[r][1][0] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + 8), acc[r][1][0]);
        if (d + 8 < Dh) {  // Dh % 16 == 8: the last 8 dims belong to chains 0-7 only
          const __m256 q8 = _mm256_broadcast_ss(qt + r * Dh + d + 8);
          acc[r][0][1] = _mm256_fmadd_ps(q8, _mm256_loadu_ps(k8), acc[r][0][1]);
          acc[r][1][1] = _mm256_fmadd_ps(q8, _mm256_loadu_ps(k8 + 8), acc[r][1][1]);
        }
      }
    }
#pragma GCC unroll 3
    for (int r = 0; r < RM; r++)
      for (int h = 0; h < 2; h++) t3[l][r][h] = _mm256_add_ps(acc[r][h][1], acc[r][h][0]);
  }
  const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 3
  for (int r = 0; r < RM; r++)
    for (int h = 0; h < 2; h++) {
      const __m256 t60 = _mm256_add_ps(t3[4][r][h], t3[0][r][h]), t61 = _mm256_add_ps(t3[5][r][h], t3[1][r][h]);
      const __m256 t62 = _mm256_add_ps(t3[6][r][h], t3[2][r][h]), t63 = _mm256_add_ps(t3[7][r][h], t3[3][r][h]);
      const __m256 f = _mm256_add_ps(_mm256_add_ps(t60, t62), _mm256_add_ps(t61, t63));
      _mm256_storeu_ps(s + r * kAttnKeyBlock + 8 * h, _mm256_mul_ps(f, sc));
    }
}

// 8 vectors of 8 -> their transpose
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// kt[d][j] = key j's dim d as f32 for j < nk, 0 up to the next 16 keys; kt is [Dh][kAttnKeyBlock]
inline void f16_keys_transposed(const uint16_t* src, int nk, int Dh, float* kt) {
  const int nk16 = (nk + 15) & ~15;
  for (int j0 = 0; j0 < nk16; j0 += 8)
    for (int d0 = 0; d0 < Dh; d0 += 8) {
      __m256 r[8];
      for (int x = 0; x < 8; x++)
        r[x] = j0 + x < nk ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + (size_t)(j0 + x) * Dh + d0)))
                           : _mm256_setzero_ps();
      transpose8(r);
      for (int x = 0; x < 8; x++) _mm256_storeu_ps(kt + (size_t)(d0 + x) * kAttnKeyBlock + j0, r[x]);
    }
}

// Output chains of rows r < RM, dims [d0, d0 + 8*NV): chain c (0..15) of an output accumulates
// p[j] * v[j] over the keys j < nk of a value block with j % 16 == c, in key order (blocks start at
// multiples of 16). p is [RM][kPvKeys]; ch points at row 0's chains for dim vector d0/8, rows
// attn_ch_row(Dh) floats apart. Values are ldv apart from v (f32 or f16).
template <int RM, int NV, int DH, typename VT>
inline void attn_pv(const float* p, const VT* v, size_t ldv, int nk, int dh, int d0, float* ch) {
  const int Dh = DH ? DH : dh;
  const size_t row_stride = attn_ch_row(Dh);
  for (int c = 0; c < 16 && c < nk; c++) {
    __m256 acc[RM][NV];
#pragma GCC unroll 6
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 2
      for (int x = 0; x < NV; x++) acc[r][x] = _mm256_loadu_ps(ch + r * row_stride + (size_t)(x * 16 + c) * 8);
    for (int j = c; j < nk; j += 16) {
      const VT* vj = v + (size_t)j * ldv + d0;
      __m256 vv[NV];
#pragma GCC unroll 2
      for (int x = 0; x < NV; x++) vv[x] = ld8(vj + 8 * x);
#pragma GCC unroll 6
      for (int r = 0; r < RM; r++) {
        const __m256 pr = _mm256_broadcast_ss(p + r * kPvKeys + j);
#pragma GCC unroll 2
        for (int x = 0; x < NV; x++) acc[r][x] = _mm256_fmadd_ps(pr, vv[x], acc[r][x]);
      }
    }
#pragma GCC unroll 6
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 2
      for (int x = 0; x < NV; x++) _mm256_storeu_ps(ch + r * row_stride + (size_t)(x * 16 + c) * 8, acc[r][x]);
  }
}

struct AttnCall {
  const float* qt;          // [R][Dh]
  float* e;                 // [nb][R][kAttnKeyBlock] scores, then exp(s - max)
  float* rmax;              // [R] running max, then the max
  float* rinv;              // [R] (float)(1 / sum)
  float* p;                 // [kPvRows][kPvKeys] a group's probabilities
  float* ch;                // [R][Dh/8][16][8] output chains
  const float* kb;          // this block's keys as f32, transposed: [Dh][kAttnKeyBlock] (buffered mode)
  const uint16_t* kh;       // this block's keys in the cache (direct mode)
  const float* tail;        // [4][Dh] keys [nk & ~3, nk) of this block, padded (direct mode)
  int R, Dh, G, p0, N, nb, blk, k0, nk;
  float scale;
  bool direct;
  float* e_at(int r) const { return e + ((size_t)blk * R + r) * kAttnKeyBlock; }
  int last(int r) const { return p0 + r / G - k0; }  // row r's own position, as an index in the block
};

// sweep 1 for a group of rows: masked scores into e, running maxes
template <int RM, int DH>
inline void attn_group_keys(const AttnCall& c, int r0) {
  const int Dh = DH ? DH : c.Dh, nk = c.nk, nk4 = nk & ~3, nk16 = (nk + 15) & ~15;
  const float* qt = c.qt + (size_t)r0 * Dh;
  float* s = c.e_at(r0);
  if (c.direct) {
    for (int j = 0; j < nk4; j += 4) attn_qk<RM, DH>(qt, Dh, c.kh + (size_t)j * Dh, c.scale, s + j);
    if (nk4 < nk) attn_qk<RM, DH>(qt, Dh, c.tail, c.scale, s + nk4);
  } else {
    for (int j = 0; j < nk; j += 16) attn_qk_t<RM, DH>(qt, Dh, c.kb + j, c.scale, s + j);
  }
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
#pragma GCC unroll 3
  for (int x = 0; x < RM; x++) {
    float* sr = s + x * kAttnKeyBlock;
    const int last = c.last(r0 + x);
    if (last < nk16 - 1) {  // keys past the row's position (and past the block's end) count as -inf
      const __m256i lim = _mm256_set1_epi32(last);
      const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      for (int j = 0; j < nk16; j += 8) {
        const __m256 masked =
            _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_add_epi32(iota, _mm256_set1_epi32(j)), lim));
        _mm256_storeu_ps(sr + j, _mm256_blendv_ps(_mm256_loadu_ps(sr + j), ninf, masked));
      }
    }
    __m256 vmax = ninf;
    for (int j = 0; j < nk16; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(sr + j));
    c.rmax[r0 + x] = std::fmax(c.rmax[r0 + x], hmax8(vmax));
  }
}

// sweep 3 for a group of rows and the value block of keys [k0, k0 + nk) (blocks blk, blk + 1 of
// the key sweep): probabilities rounded to f16 (0 in a key block the row does not reach), then the
// output chains. v: the block's values, f32 or f16.
template <int RM, int DH, typename VT>
inline void attn_group_values(const AttnCall& c, int r0, int blk, int nk, const VT* v, size_t ldv) {
  const int Dh = DH ? DH : c.Dh;
#pragma GCC unroll 6
  for (int x = 0; x < RM; x++) {
    const int r = r0 + x;
    const __m256 inv = _mm256_set1_ps(c.rinv[r]);
    for (int sb = 0; sb * kAttnKeyBlock < nk; sb++) {
      const int b = blk + sb, nk8 = (std::min(kAttnKeyBlock, c.N - b * kAttnKeyBlock) + 7) & ~7;
      float* pr = c.p + x * kPvKeys + sb * kAttnKeyBlock;
      if (c.p0 + r / c.G < b * kAttnKeyBlock) {
        std::memset(pr, 0, sizeof(float) * nk8);
        continue;
      }
      const float* er = c.e + ((size_t)b * c.R + r) * kAttnKeyBlock;
      for (int j = 0; j < nk8; j += 8) _mm256_storeu_ps(pr + j, round_f16(_mm256_mul_ps(_mm256_loadu_ps(er + j), inv)));
    }
  }
  float* ch = c.ch + (size_t)r0 * attn_ch_row(Dh);
  int d0 = 0;
  for (; d0 + 16 <= Dh; d0 += 16) attn_pv<RM, 2, DH>(c.p, v, ldv, nk, Dh, d0, ch + (size_t)d0 * 16);
  if (d0 < Dh) attn_pv<RM, 1, DH>(c.p, v, ldv, nk, Dh, d0, ch + (size_t)d0 * 16);
}

template <int DH, typename VT>
inline void attn_values(const AttnCall& c, int r0, int rm, int blk, int nk, const VT* v, size_t ldv) {
  switch (rm) {
    case 6: attn_group_values<6, DH>(c, r0, blk, nk, v, ldv); break;
    case 5: attn_group_values<5, DH>(c, r0, blk, nk, v, ldv); break;
    case 4: attn_group_values<4, DH>(c, r0, blk, nk, v, ldv); break;
    case 3: attn_group_values<3, DH>(c, r0, blk, nk, v, ldv); break;
    case 2: attn_group_values<2, DH>(c, r0, blk, nk, v, ldv); break;
    default: attn_group_values<1, DH>(c, r0, blk, nk, v, ldv); break;
  }
}

inline void f16_rows_to_f32(const uint16_t* src, int rows, int Dh, float* dst) {
  for (size_t i = 0; i < (size_t)rows * Dh; i += 8) _mm256_storeu_ps(dst + i, ld8(src + i));
}

// DH: the head dim when it is one of the common ones (the loops over it then unroll), else 0
template <int DH>
void attention_dh(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n,
                  int G, int dh, int p0, float scale, float* scratch) {
  const int Dh = DH ? DH : dh;
  constexpr int Bk = kAttnKeyBlock;
  const int R = n * G, N = p0 + n, nb = (N + Bk - 1) / Bk;
  float* qt = scratch;                                 // [R][Dh]
  float* ch = qt + attn_part((size_t)R * Dh);          // [R][attn_ch_row(Dh)]: [Dh/8][16][8] and padding
  float* e = ch + attn_part((size_t)R * attn_ch_row(Dh));  // [nb][R][Bk]: written and read in one stream
  float* rmax = e + attn_part((size_t)R * nb * Bk);    // [R]
  float* rinv = rmax + attn_part((size_t)R);           // [R]
  double* rsum = reinterpret_cast<double*>(rinv + attn_part((size_t)R));  // [R]
  float* kb = rinv + attn_part((size_t)R) + attn_part(2 * (size_t)R);     // [Dh][Bk]
  const size_t ldvb = attn_vb_row(Dh);
  float* vb = kb + attn_part((size_t)Bk * Dh);         // [kPvKeys][ldvb]
  float* pg = vb + attn_part((size_t)kPvKeys * ldvb);  // [kPvRows][kPvKeys]
  float* tail = pg + attn_part((size_t)kPvRows * kPvKeys);  // [4][Dh]

  // q rounded to f16, as ggml converts it for the f16 K product
  for (int i = 0; i < n; i++)
    for (int h = 0; h < G; h++) {
      const float* src = q + (size_t)i * ldq + (size_t)h * Dh;
      float* dst = qt + ((size_t)i * G + h) * Dh;
      for (int d = 0; d < Dh; d += 8) _mm256_storeu_ps(dst + d, round_f16(_mm256_loadu_ps(src + d)));
    }
  for (int r = 0; r < R; r++) {
    rmax[r] = -INFINITY;
    rsum[r] = 0.0;
  }

  AttnCall c;
  c.qt = qt; c.e = e; c.rmax = rmax; c.rinv = rinv; c.p = pg; c.ch = ch; c.kb = kb; c.tail = tail;
  c.R = R; c.Dh = Dh; c.G = G; c.p0 = p0; c.N = N; c.nb = nb; c.scale = scale;
  c.direct = R <= kAttnRows;
  auto at_block = [&](int blk) {
    c.blk = blk;
    c.k0 = blk * Bk;
    c.nk = std::min(Bk, N - c.k0);
    c.kh = k + (size_t)c.k0 * Dh;
    // rows whose position is before this block see none of it (rows are in position order)
    return std::max(0, c.k0 - p0) * G;
  };

  // sweep 1: scores and maxes
  for (int blk = 0; blk < nb; blk++) {
    const int r_lo = at_block(blk), nk = c.nk, nk4 = nk & ~3;
    if (c.direct) {
      if (nk4 < nk) {
        f16_rows_to_f32(c.kh + (size_t)nk4 * Dh, nk - nk4, Dh, tail);
        std::memset(tail + (size_t)(nk - nk4) * Dh, 0, sizeof(float) * (size_t)(4 - (nk - nk4)) * Dh);
      }
    } else {
      f16_keys_transposed(c.kh, nk, Dh, kb);
    }
    for (int r0 = r_lo; r0 < R; r0 += kAttnRows) {
      switch (std::min(kAttnRows, R - r0)) {
        case 3: attn_group_keys<3, DH>(c, r0); break;
        case 2: attn_group_keys<2, DH>(c, r0); break;
        default: attn_group_keys<1, DH>(c, r0); break;
      }
    }
  }

  // sweep 2: e = exp(s - max) and the sums, 16 keys at a time (masked keys add exact zeros, so
  // the row's length does not matter)
  for (int blk = 0; blk < nb; blk++) {
    const int r_lo = at_block(blk), nk16 = (c.nk + 15) & ~15;
    for (int r = r_lo; r < R; r++) {
      float* er = c.e_at(r);
      const __m256 vm = _mm256_set1_ps(rmax[r]);
      double sum = rsum[r];
      for (int j = 0; j < nk16; j += 16) {
        const __m256 x0 = exp8_ggml(_mm256_sub_ps(_mm256_loadu_ps(er + j), vm));
        const __m256 x1 = exp8_ggml(_mm256_sub_ps(_mm256_loadu_ps(er + j + 8), vm));
        _mm256_storeu_ps(er + j, x0);
        _mm256_storeu_ps(er + j + 8, x1);
        sum += (double)hsum8(_mm256_add_ps(x1, x0));
      }
      rsum[r] = sum;
    }
  }
  for (int r = 0; r < R; r++) rinv[r] = (float)(1.0 / rsum[r]);

  // sweep 3: probabilities rounded to f16, times V, into the chains, kPvKeys keys at a time
  std::memset(ch, 0, sizeof(float) * (size_t)R * attn_ch_row(Dh));
  for (int blk = 0; blk < nb; blk += kPvKeys / Bk) {
    const int k0 = blk * Bk, nk = std::min(kPvKeys, N - k0);
    const uint16_t* vh = v + (size_t)k0 * Dh;
    if (!c.direct)
      for (int j = 0; j < nk; j++) f16_rows_to_f32(vh + (size_t)j * Dh, 1, Dh, vb + (size_t)j * ldvb);
    for (int r0 = std::max(0, k0 - p0) * G; r0 < R; r0 += kPvRows) {
      const int rm = std::min(kPvRows, R - r0);
      if (c.direct) attn_values<DH>(c, r0, rm, blk, nk, vh, (size_t)Dh);
      else attn_values<DH>(c, r0, rm, blk, nk, (const float*)vb, ldvb);
    }
  }
  // each output's 16 chains folded as the reference folds them
  for (int r = 0; r < R; r++) {
    float* dst = out + (size_t)(r / G) * ldo + (size_t)(r % G) * Dh;
    for (int d = 0; d < Dh; d += 8) {
      const float* cv = ch + (size_t)r * attn_ch_row(Dh) + (size_t)d * 16;  // [16][8]
      __m256 t[8];
      for (int l = 0; l < 8; l++) t[l] = _mm256_add_ps(_mm256_loadu_ps(cv + (l + 8) * 8), _mm256_loadu_ps(cv + l * 8));
      for (int l = 0; l < 4; l++) t[l] = _mm256_add_ps(t[l + 4], t[l]);
      for (int l = 0; l < 2; l++) t[l] = _mm256_add_ps(t[l], t[l + 2]);
      _mm256_storeu_ps(dst + d, _mm256_add_ps(t[0], t[1]));
    }
  }
}

void attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int Dh, int p0, float scale, float* scratch) {
  switch (Dh) {
    case 64: attention_dh<64>(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, scratch); return;
    case 128: attention_dh<128>(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, scratch); return;
    default: break;
  }
  if (Dh % 8 != 0) {  // no model we load has such a head; keep the contract anyway
    ref::attention(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, scratch);
    return;
  }
  attention_dh<0>(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, scratch);
}

}  // namespace

const KernelTable* avx2_table_unchecked() {
  static const KernelTable t = [] {
    KernelTable k{};
    k.name = "avx2";
    k.quantize_q8_0 = quantize_q8_0;
    k.quantize_q8_1 = quantize_q8_1;
    k.quantize_q8_K = quantize_q8_K;
    k.to_f16 = to_f16;
    k.to_bf16 = ref::to_bf16;  // conversion only; never on a hot path (BF16 weights are rare here)
    k.dot[S_F32] = dot_f32;
    k.dot[S_F16] = dot_f16;
    k.dot[S_BF16] = dot_bf16;
    k.dot[S_Q4_0] = legacy_dot<GgmlType::Q4_0>;
    k.dot[S_Q4_1] = legacy_dot<GgmlType::Q4_1>;
    k.dot[S_Q5_0] = legacy_dot<GgmlType::Q5_0>;
    k.dot[S_Q5_1] = legacy_dot<GgmlType::Q5_1>;
    k.dot[S_Q8_0] = legacy_dot<GgmlType::Q8_0>;
    k.tile[S_Q4_0] = legacy_tile<GgmlType::Q4_0>;
    k.tile[S_Q4_1] = legacy_tile<GgmlType::Q4_1>;
    k.tile[S_Q5_0] = legacy_tile<GgmlType::Q5_0>;
    k.tile[S_Q5_1] = legacy_tile<GgmlType::Q5_1>;
    k.tile[S_Q8_0] = legacy_tile<GgmlType::Q8_0>;
    k.dot[S_Q4_K] = dot_q4_K;
    k.dot[S_Q5_K] = dot_q5_K;
    k.dot[S_Q6_K] = dot_q6_K;
    k.rmsnorm = rmsnorm;
    k.softmax = softmax;
    k.silu_mul = silu_mul;
    k.attention = attention;
    return k;
  }();
  return &t;
}

}  // namespace kq
}  // namespace mb
