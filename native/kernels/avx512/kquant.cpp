// Q4_K and Q6_K tiles for the AVX-512 VNNI set: one row at a time (the prefetched stream the AVX2
// tiles read) x up to 4 tokens, with vpdpbusd summing 4 products per int32 lane, the lanes of
// two sub-blocks narrowed to int16 (|lane| <= 4 * 63 * 128 = 32256 fits) and weighed by their
// scales with vpdpwssd. That is 3 multiplies per 64 weights and token where the AVX2 tiles
// (maddubs, madd, add per 32) take 4 and 2 adds: a few tokens are bound by the multiplies.
// The integer sum per super-block is exact in any order, so it equals the AVX2 kernels' and the
// float steps after it are theirs: the bits are the same in both sets, alone or in a batch.
// They take one token (decode) and the few tokens (below 6 for Q4_K, 8 for Q6_K) where they beat
// kquant_group.cpp's groups, which unpack a strip once for the whole group but pay for 8 or 16
// lanes whatever the count; Gemm16 takes 17 tokens and more.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "../blocks.h"
#include "avx512.h"

namespace mb {
namespace kq {
namespace avx512 {

namespace {

inline float fp16(half h) { return _cvtsh_ss(h); }
inline int hsum_i32_8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}
inline int hsum_i32_4(__m128i p) {
  p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(1, 0, 3, 2)));
  p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(p);
}
// The 8 pair sums of a q8_K block's 16 bsums (sub-blocks of 32), as int16.
inline __m128i bsum_pairs(const int16_t* bsums) {
  return _mm_hadd_epi16(_mm_loadu_si128((const __m128i*)bsums), _mm_loadu_si128((const __m128i*)(bsums + 8)));
}
// Lane t: the sum of v[t]'s int32 (as hsum_i32_8 / hsum_i32_4 give it), 4 vectors at once.
inline __m128i hsum4_i32_8(const __m256i* v) {
  const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}
inline __m128i hsum4_i32_4(const __m128i* v) { return _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3])); }
template <int NT> inline __m128 token_scales(const block_q8_K* const* xb) {
  alignas(16) float d[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
  for (int t = 0; t < NT; t++) d[t] = xb[t]->d;
  return _mm_load_ps(d);
}
// as the AVX2 tiles: every line of the super-block 1 KB ahead of the one being read
constexpr size_t kPrefetchAhead = 1024;
template <size_t BYTES> inline void prefetch_block(const void* b) {
  for (size_t o = 0; o < BYTES; o += 64) _mm_prefetch((const char*)b + kPrefetchAhead + o, _MM_HINT_T0);
}
// two dpbusd results (8 int32 each) as int16 for dpwssd: per 128-bit lane, a's 4 then b's 4
inline __m256i narrow(__m256i a, __m256i b) { return _mm256_packs_epi32(a, b); }

// One Q4_K row x NT tokens, of which the first NS are real and stored (NS < NT: the last real one
// repeated, whose lanes cost less than a shorter kernel's scalar steps). Sub-block 2j: low nibbles of qs[32j..], activations qs[64j..];
// 2j + 1: high nibbles, activations qs[64j + 32..].
template <int NT, int NS = NT>
void q4_K_row(int64_t k, const uint8_t* w, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  const int64_t nb = k / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float sumf[NT];
  __m128 sumv = _mm_setzero_ps();  // NT == 4: sumf[t] in lane t
#pragma GCC unroll 4
  for (int t = 0; t < NT; t++) sumf[t] = 0;
  for (int64_t i = 0; i < nb; i++) {
    const block_q4_K* b = (const block_q4_K*)w + i;
    prefetch_block<sizeof(block_q4_K)>(b);
    uint64_t sc, mn;
    unpack_scales_mins(b->scales, &sc, &mn);
    const __m128i s16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc));  // s0..s7
    const block_q8_K* xb[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) xb[t] = (const block_q8_K*)(x + std::min(t, NS - 1) * xs) + i;
    __m256i acc[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      // int16 [s(2j) x4, s(2j+1) x4] in both lanes, matching narrow()'s order
      const __m128i ctl = _mm_setr_epi8(4 * j, 4 * j + 1, 4 * j, 4 * j + 1, 4 * j, 4 * j + 1, 4 * j, 4 * j + 1,
                                        4 * j + 2, 4 * j + 3, 4 * j + 2, 4 * j + 3, 4 * j + 2, 4 * j + 3, 4 * j + 2, 4 * j + 3);
      const __m256i s = _mm256_broadcastsi128_si256(_mm_shuffle_epi8(s16, ctl));
      const __m256i q = _mm256_loadu_si256((const __m256i*)(b->qs + 32 * j));
      const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
#pragma GCC unroll 4
      for (int t = 0; t < NT; t++) {
        const __m256i y0 = _mm256_loadu_si256((const __m256i*)(xb[t]->qs + 64 * j));
        const __m256i y1 = _mm256_loadu_si256((const __m256i*)(xb[t]->qs + 64 * j + 32));
        const __m256i a = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, y0);
        const __m256i c = _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi, y1);
        acc[t] = _mm256_dpwssd_epi32(acc[t], narrow(a, c), s);
      }
    }
    const __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
    if constexpr (NT == 4) {
      __m128i p[4];
#pragma GCC unroll 4
      for (int t = 0; t < 4; t++) p[t] = _mm_madd_epi16(bsum_pairs(xb[t]->bsums), m);
      const __m128 xd = token_scales<NT>(xb);
      const __m128 d = _mm_mul_ps(_mm_set1_ps(fp16(b->d)), xd), dmin = _mm_mul_ps(_mm_set1_ps(fp16(b->dmin)), xd);
      sumv = _mm_add_ps(sumv, _mm_fmsub_ps(d, _mm_cvtepi32_ps(hsum4_i32_8(acc)),
                                           _mm_mul_ps(dmin, _mm_cvtepi32_ps(hsum4_i32_4(p)))));
    } else {
#pragma GCC unroll 4
      for (int t = 0; t < NT; t++) {
        const int summ = hsum_i32_4(_mm_madd_epi16(bsum_pairs(xb[t]->bsums), m));
        const int sumi = hsum_i32_8(acc[t]);
        const float d = fp16(b->d) * xb[t]->d, dmin = fp16(b->dmin) * xb[t]->d;
        sumf[t] = sumf[t] + std::fma(d, (float)sumi, -(dmin * (float)summ));
      }
    }
  }
  if constexpr (NT == 4) _mm_storeu_ps(sumf, sumv);
#pragma GCC unroll 4
  for (int t = 0; t < NS; t++) y[t * ldy] = sumf[t];
}

// One Q6_K row x NT tokens. The 32 values 128n + 32u .. +31 take scales 8n + 2u (low lane) and
// 8n + 2u + 1 (high lane); the -32 offset goes through the bsums, as in the AVX2 kernel.
template <int NT, int NS = NT>
void q6_K_row(int64_t k, const uint8_t* w, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  const int64_t nb = k / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  // narrow(u = 0, u = 1) holds, per lane, sub-blocks (0, 2) low and (1, 3) high; (2, 3): 4..7
  const __m256i ctl01 = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 4, 5, 4, 5, 4, 5, 4, 5,  //
                                         2, 3, 2, 3, 2, 3, 2, 3, 6, 7, 6, 7, 6, 7, 6, 7);
  const __m256i ctl23 = _mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 12, 13, 12, 13, 12, 13, 12, 13,  //
                                         10, 11, 10, 11, 10, 11, 10, 11, 14, 15, 14, 15, 14, 15, 14, 15);
  float sumf[NT];
  __m128 sumv = _mm_setzero_ps();
#pragma GCC unroll 4
  for (int t = 0; t < NT; t++) sumf[t] = 0;
  for (int64_t i = 0; i < nb; i++) {
    const block_q6_K* b = (const block_q6_K*)w + i;
    prefetch_block<sizeof(block_q6_K)>(b);
    const block_q8_K* xb[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) xb[t] = (const block_q8_K*)(x + std::min(t, NS - 1) * xs) + i;
    __m256i acc[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
      const uint8_t* ql = b->ql + 64 * n;
      const uint8_t* qh = b->qh + 32 * n;
      const __m256i s8 =
          _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)(b->scales + 8 * n))));
      const __m256i sp[2] = {_mm256_shuffle_epi8(s8, ctl01), _mm256_shuffle_epi8(s8, ctl23)};
      const __m256i l0 = _mm256_loadu_si256((const __m256i*)ql);
      const __m256i l1 = _mm256_loadu_si256((const __m256i*)(ql + 32));
      const __m256i h = _mm256_loadu_si256((const __m256i*)qh);
#pragma GCC unroll 2
      for (int up = 0; up < 2; up++) {
        __m256i q[2];
#pragma GCC unroll 2
        for (int e = 0; e < 2; e++) {
          const int u = 2 * up + e;
          const __m256i l = u & 1 ? l1 : l0;
          q[e] = _mm256_or_si256(_mm256_and_si256(u < 2 ? l : _mm256_srli_epi16(l, 4), m4),
                                 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * u), m2), 4));
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
          const int8_t* yq = xb[t]->qs + 128 * n + 64 * up;
          const __m256i a = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q[0], _mm256_loadu_si256((const __m256i*)yq));
          const __m256i c =
              _mm256_dpbusd_epi32(_mm256_setzero_si256(), q[1], _mm256_loadu_si256((const __m256i*)(yq + 32)));
          acc[t] = _mm256_dpwssd_epi32(acc[t], narrow(a, c), sp[up]);
        }
      }
    }
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b->scales));
    if constexpr (NT == 4) {
      __m256i o[4];
#pragma GCC unroll 4
      for (int t = 0; t < 4; t++) o[t] = _mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i*)xb[t]->bsums));
      const __m128i sumi = _mm_sub_epi32(hsum4_i32_8(acc), _mm_slli_epi32(hsum4_i32_8(o), 5));
      const __m128 d = _mm_mul_ps(_mm_set1_ps(fp16(b->d)), token_scales<NT>(xb));
      sumv = _mm_fmadd_ps(d, _mm_cvtepi32_ps(sumi), sumv);
    } else {
#pragma GCC unroll 4
      for (int t = 0; t < NT; t++) {
        const __m256i bs = _mm256_loadu_si256((const __m256i*)xb[t]->bsums);
        const int off = hsum_i32_8(_mm256_madd_epi16(s16, bs));
        const int sumi = hsum_i32_8(acc[t]) - 32 * off;
        sumf[t] = std::fma(fp16(b->d) * xb[t]->d, (float)sumi, sumf[t]);
      }
    }
  }
  if constexpr (NT == 4) _mm_storeu_ps(sumf, sumv);
#pragma GCC unroll 4
  for (int t = 0; t < NS; t++) y[t * ldy] = sumf[t];
}

template <void (*ROW1)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, size_t),
          void (*ROW2)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, size_t),
          void (*ROW3)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, size_t),
          void (*ROW4)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, size_t)>
void rows(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y, size_t ldy) {
  for (int r = 0; r < nr; r++) {
    const uint8_t* wr = w + r * ws;
    switch (nt) {
      case 4: ROW4(k, wr, x, xs, y + r, ldy); break;
      case 3: ROW3(k, wr, x, xs, y + r, ldy); break;
      case 2: ROW2(k, wr, x, xs, y + r, ldy); break;
      default: ROW1(k, wr, x, xs, y + r, ldy); break;
    }
  }
}

}  // namespace

void tile_q4_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy) {
  rows<q4_K_row<1>, q4_K_row<2>, q4_K_row<4, 3>, q4_K_row<4>>(k, w, ws, nr, x, xs, nt, y, ldy);
}
void tile_q6_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy) {
  rows<q6_K_row<1>, q6_K_row<2>, q6_K_row<4, 3>, q6_K_row<4>>(k, w, ws, nr, x, xs, nt, y, ldy);
}

}  // namespace avx512
}  // namespace kq
}  // namespace mb
