// AVX-512 VNNI GEMM for one group of up to 16 tokens of the K-quants (Q4_K, Q6_K): speculative
// verification rows and a few concurrent streams (the driver uses it from 6 (Q4_K) or 8 (Q6_K) to
// 16 tokens; see the entries at the end). The one-row tiles (kquant.cpp) read and unpack a row once
// per 4 tokens and spend a vpackssdw and a vpdpwssd per two vpdpbusd on the sub-block scales; here
// a strip of 4 rows is unpacked once per super-block for the whole group and the scales cost one
// vpmulld per sub-block and row. The price: a group costs the same for 2 tokens as for 8 (or for 9
// as for 16), so the tiles stay faster for a few.
//
// Dimension legend: K elements per row (nb = K / 256 super-blocks); L lanes of a vector (8: ymm,
// up to 8 tokens; 16: zmm, up to 16), lane t = token t; 4 rows r of a strip; g in [0, 64) the
// 4-element group of a super-block (elements 4g .. 4g + 3); s the sub-block (Q4_K: 8 of 32
// elements, Q6_K: 16 of 16).
//
// Layout: one vpdpbusd computes group g's 4 products for all L tokens of one row: the tokens'
// 4 bytes come packed (a vector load shared by the strip's 4 rows), the row's 4 bytes as an
// embedded broadcast from the super-block unpacked to bytes on the stack. vpdpbusd takes its
// broadcast operand as signed, so the weights (0 .. 15, 0 .. 63) go there and the activations
// enter as unsigned x + 128, which adds 128 * (the row's scaled weights) to every lane's sum: an
// exact integer that every lane then subtracts. With 9 .. 15 tokens in 16 lanes, lane 15 is a
// token whose activations are all 0 and sums exactly that (free); otherwise (CALC) it is computed
// per row and super-block with vpmaddubsw by the scales, so 8 tokens fit a ymm and 16 a zmm.
// (Zen 4 measured: a 16-lane group costs ~1.2x an 8-lane one, not 2x.)
//
// The arithmetic is the tiles' (and the AVX2 set's): per (row, token) and super-block an exact
// int32 sum, then per lane
//   Q4_K: acc = acc + fmsub(d_w * d_x, float(sumi), (dmin_w * d_x) * float(summ))
//   Q6_K: acc = fma(d_w * d_x, float(sumi - 32 * off), acc)
// so a token gets the same bits in a group as alone.
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "../blocks.h"
#include "avx512.h"

namespace mb {
namespace kq {
namespace avx512 {
namespace {

inline int32_t ld32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The few vector operations the strips use, at 8 (ymm) and 16 (zmm) lanes.
template <int L> struct V;
template <> struct V<8> {
  using I = __m256i;
  using F = __m256;
  static I zero() { return _mm256_setzero_si256(); }
  static I load(const uint8_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
  static I dpbusd(I acc, I u, const uint8_t* s4) {
    asm("vpdpbusd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t*)s4));
    return acc;
  }
  static I dpwssd(I acc, I a, uint32_t b) { return _mm256_dpwssd_epi32(acc, a, _mm256_set1_epi32((int)b)); }
  static I mullo(I a, int32_t b) { return _mm256_mullo_epi32(a, _mm256_set1_epi32(b)); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I shl5(I a) { return _mm256_slli_epi32(a, 5); }
  static I last(I a) { return _mm256_permutevar8x32_epi32(a, _mm256_set1_epi32(7)); }
  static I set1(int32_t a) { return _mm256_set1_epi32(a); }
  static F zerof() { return _mm256_setzero_ps(); }
  static F loadf(const uint8_t* p) { return _mm256_loadu_ps((const float*)p); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F addf(F a, F b) { return _mm256_add_ps(a, b); }
  static F fmsub(F a, F b, F c) { return _mm256_fmsub_ps(a, b, c); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
};
template <> struct V<16> {
  using I = __m512i;
  using F = __m512;
  static I zero() { return _mm512_setzero_si512(); }
  static I load(const uint8_t* p) { return _mm512_loadu_si512((const void*)p); }
  static I dpbusd(I acc, I u, const uint8_t* s4) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t*)s4));
    return acc;
  }
  static I dpwssd(I acc, I a, uint32_t b) { return _mm512_dpwssd_epi32(acc, a, _mm512_set1_epi32((int)b)); }
  static I mullo(I a, int32_t b) { return _mm512_mullo_epi32(a, _mm512_set1_epi32(b)); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I shl5(I a) { return _mm512_slli_epi32(a, 5); }
  static I last(I a) { return _mm512_permutexvar_epi32(_mm512_set1_epi32(15), a); }
  static I set1(int32_t a) { return _mm512_set1_epi32(a); }
  static F zerof() { return _mm512_setzero_ps(); }
  static F loadf(const uint8_t* p) { return _mm512_loadu_ps((const void*)p); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F addf(F a, F b) { return _mm512_add_ps(a, b); }
  static F fmsub(F a, F b, F c) { return _mm512_fmsub_ps(a, b, c); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
};

constexpr int kRows = 4;       // rows per strip (the driver's strips; Gemm8::run's nr <= 4)
constexpr int kMaxTokens = 16;
inline int lanes(int nt) { return nt <= 8 ? 8 : 16; }

// Packed super-block of L tokens: q[64][L] dwords (group g of token t, each byte + 128; tokens
// past the group's last, lane 15 among them when L = 16, are x = 0), p[NP][L] dwords (int16 pairs of the
// token's bsums: Q4_K the sums of sub-blocks 2p, 2p + 1 (NP = 4), Q6_K those of the 16-element
// sub-blocks 2p, 2p + 1 (NP = 8)), d[L] floats.
template <bool Q6> constexpr int kPairs = Q6 ? 8 : 4;
template <bool Q6> constexpr size_t block_bytes(int L) { return (size_t)(64 + kPairs<Q6> + 1) * 4 * L; }
template <bool Q6> size_t packed_bytes(int64_t k) { return (size_t)(k / QK_K) * block_bytes<Q6>(16); }

template <bool Q6>
void pack(const uint8_t* xq, size_t xs, int nt, int64_t k, uint8_t* out) {
  const int64_t nb = k / QK_K;
  const int L = lanes(nt);
  const size_t bb = block_bytes<Q6>(L);
  // L = 16: lanes nt .. 15, the correction's among them, are x = 0
  for (int64_t i = 0; i < nb; i++) {
    uint32_t* q = (uint32_t*)(out + i * bb);
    uint32_t* p = q + 64 * L;
    float* d = (float*)(p + kPairs<Q6> * L);
    for (int t = 0; t < L; t++) {
      if (t >= nt) {
        for (int g = 0; g < 64; g++) q[g * L + t] = 0x80808080u;
        for (int j = 0; j < kPairs<Q6>; j++) p[j * L + t] = 0;
        d[t] = 0;
        continue;
      }
      const block_q8_K* xb = (const block_q8_K*)(xq + t * xs) + i;
      for (int g = 0; g < 64; g++) q[g * L + t] = (uint32_t)ld32(xb->qs + 4 * g) ^ 0x80808080u;
      const int16_t* bs = xb->bsums;
      for (int j = 0; j < kPairs<Q6>; j++) {
        // int16 wrap-around as the tiles' vphaddw (the sums fit: |pair| <= 2 * 16 * 128)
        const uint16_t a = Q6 ? (uint16_t)bs[2 * j] : (uint16_t)(bs[4 * j] + bs[4 * j + 1]);
        const uint16_t b = Q6 ? (uint16_t)bs[2 * j + 1] : (uint16_t)(bs[4 * j + 2] + bs[4 * j + 3]);
        p[j * L + t] = (uint32_t)a | (uint32_t)b << 16;
      }
      d[t] = xb->d;
    }
  }
}

// The same super-block of the strip's rows two strips ahead, as gemm4_strip and the one-token
// tiles do: a matrix streamed from memory needs that distance.
template <size_t BYTES> inline void prefetch_ahead(const void* b, size_t ws) {
  const char* p = (const char*)b + 2 * kRows * ws;
  for (size_t o = 0; o < BYTES; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  _mm_prefetch(p + BYTES - 1, _MM_HINT_T0);
}

inline int32_t hsum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}
// What x + 128 added to every lane of sumi: the computed corr (CALC: every lane a token), else
// the last lane's sum.
template <int L, bool CALC> inline typename V<L>::I correction(typename V<L>::I sumi, int32_t corr) {
  if constexpr (CALC) return V<L>::set1(corr);
  else return V<L>::last(sumi);
}

// One sub-block of G groups (pk: its first packed group) for the strip's rows: sumi[r] +=
// sc[r][s] * (the exact sum of the sub-block's products), each row's products in two chains (even
// and odd groups) so that vpdpbusd's latency does not bound 4 rows.
template <int L, int G, class SC>
inline void sub_block(const uint8_t* pk, const uint8_t (*wq)[QK_K], int e0, const SC& sc, int s,
                      typename V<L>::I* sumi) {
  using v = V<L>;
  typename v::I even[kRows], odd[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; r++) even[r] = odd[r] = v::zero();
#pragma GCC unroll 8
  for (int g = 0; g < G; g += 2) {
    const typename v::I x0 = v::load(pk + (size_t)g * 4 * L), x1 = v::load(pk + (size_t)(g + 1) * 4 * L);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; r++) {
      even[r] = v::dpbusd(even[r], x0, wq[r] + e0 + 4 * g);
      odd[r] = v::dpbusd(odd[r], x1, wq[r] + e0 + 4 * g + 4);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; r++) sumi[r] = v::add(sumi[r], v::mullo(v::add(even[r], odd[r]), sc[r][s]));
}

template <int L> inline void store_strip(const typename V<L>::F* acc, int nr, int nt, float* y, size_t ldy) {
  for (int r = 0; r < nr; r++) {
    alignas(64) float out[L];
    V<L>::storef(out, acc[r]);
    for (int t = 0; t < nt; t++) y[(size_t)t * ldy + r] = out[t];
  }
}

template <int L, bool CALC>
void strip_q4_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y, size_t ldy) {
  using v = V<L>;
  const int64_t nb = k / QK_K;
  const size_t bb = block_bytes<false>(L);
  const block_q4_K* rows[kRows];
  for (int r = 0; r < kRows; r++) rows[r] = (const block_q4_K*)(w + (size_t)(r < nr ? r : 0) * ws);  // past nr: unstored
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  // wq[r][256]: row r's values of the super-block in element order; sc[r][8] its sub-block
  // scales; mn[r][4] its mins of sub-blocks 2p, 2p + 1 as int16 pairs
  alignas(64) uint8_t wq[kRows][QK_K];
  alignas(32) int32_t sc[kRows][8];
  alignas(16) uint32_t mn[kRows][4];
  float dw[kRows], dm[kRows];
  int32_t corr[kRows];  // CALC: 128 * the row's scaled weights
  typename v::F acc[kRows];
  for (int r = 0; r < kRows; r++) acc[r] = v::zerof();
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* pk = packed + i * bb;
#pragma GCC unroll 4
    for (int r = 0; r < kRows; r++) {
      const block_q4_K* b = rows[r] + i;
      prefetch_ahead<sizeof(block_q4_K)>(b, ws);
      uint64_t s8, m8;
      unpack_scales_mins(b->scales, &s8, &m8);
      __m256i c16 = _mm256_setzero_si256();  // int16: |sum| <= 8 * 2 * 15 * 63
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {  // sub-block 2j: low nibbles of qs[32j..], 2j + 1: high
        const __m256i q = _mm256_loadu_si256((const __m256i*)(b->qs + 32 * j));
        const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        _mm256_store_si256((__m256i*)(wq[r] + 64 * j), lo);
        _mm256_store_si256((__m256i*)(wq[r] + 64 * j + 32), hi);
        if constexpr (CALC) {
          c16 = _mm256_add_epi16(c16, _mm256_maddubs_epi16(lo, _mm256_set1_epi8((char)(s8 >> (16 * j)))));
          c16 = _mm256_add_epi16(c16, _mm256_maddubs_epi16(hi, _mm256_set1_epi8((char)(s8 >> (16 * j + 8)))));
        }
      }
      if constexpr (CALC) corr[r] = 128 * hsum8(_mm256_madd_epi16(c16, _mm256_set1_epi16(1)));
      _mm256_store_si256((__m256i*)sc[r], _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s8)));
      _mm_store_si128((__m128i*)mn[r], _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m8)));
      dw[r] = _cvtsh_ss(b->d);
      dm[r] = _cvtsh_ss(b->dmin);
    }
    typename v::I sumi[kRows];
    for (int r = 0; r < kRows; r++) sumi[r] = v::zero();
    for (int s = 0; s < 8; s++) sub_block<L, 8>(pk + (size_t)8 * s * 4 * L, wq, 32 * s, sc, s, sumi);
    const typename v::F xd = v::loadf(pk + (size_t)(64 + 4) * 4 * L);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; r++) {
      typename v::I summ = v::zero();
#pragma GCC unroll 4
      for (int p = 0; p < 4; p++) summ = v::dpwssd(summ, v::load(pk + (size_t)(64 + p) * 4 * L), mn[r][p]);
      const typename v::I si = v::sub(sumi[r], correction<L, CALC>(sumi[r], corr[r]));
      const typename v::F d = v::mul(v::set1f(dw[r]), xd), dmin = v::mul(v::set1f(dm[r]), xd);
      acc[r] = v::addf(acc[r], v::fmsub(d, v::cvt(si), v::mul(dmin, v::cvt(summ))));
    }
  }
  store_strip<L>(acc, nr, nt, y, ldy);
}

// Q6_K: the values 0 .. 63 (ql's nibble, qh's 2 bits above), scales signed; the -32 offset goes
// through the bsums as in the tiles.
template <int L, bool CALC>
void strip_q6_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y, size_t ldy) {
  using v = V<L>;
  const int64_t nb = k / QK_K;
  const size_t bb = block_bytes<true>(L);
  const block_q6_K* rows[kRows];
  for (int r = 0; r < kRows; r++) rows[r] = (const block_q6_K*)(w + (size_t)(r < nr ? r : 0) * ws);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  // wq[r][256]: row r's values in element order; sc[r][16] its scales; sc2[r][8] scales 2p, 2p + 1
  // as int16 pairs
  alignas(64) uint8_t wq[kRows][QK_K];
  alignas(64) int32_t sc[kRows][16];
  alignas(32) uint32_t sc2[kRows][8];
  float dw[kRows];
  int32_t corr[kRows];  // CALC: 128 * the row's scaled weights
  typename v::F acc[kRows];
  for (int r = 0; r < kRows; r++) acc[r] = v::zerof();
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* pk = packed + i * bb;
#pragma GCC unroll 4
    for (int r = 0; r < kRows; r++) {
      const block_q6_K* b = rows[r] + i;
      prefetch_ahead<sizeof(block_q6_K)>(b, ws);
      const __m128i s8 = _mm_loadu_si128((const __m128i*)b->scales);
      const __m256i s8x2 = _mm256_broadcastsi128_si256(s8);
      __m256i c32 = _mm256_setzero_si256();
#pragma GCC unroll 2
      for (int n = 0; n < 2; n++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i*)(b->ql + 64 * n));
        const __m256i l1 = _mm256_loadu_si256((const __m256i*)(b->ql + 64 * n + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i*)(b->qh + 32 * n));
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {  // elements 128n + 32u .. +31
          const __m256i l = u & 1 ? l1 : l0;
          const __m256i q = _mm256_or_si256(_mm256_and_si256(u < 2 ? l : _mm256_srli_epi16(l, 4), m4),
                                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * u), m2), 4));
          _mm256_store_si256((__m256i*)(wq[r] + 128 * n + 32 * u), q);
          if constexpr (CALC) {
            // scale 8n + 2u for the low 16 values, 8n + 2u + 1 for the high; |int16| <= 2 * 63 * 128
            const __m256i ms = _mm256_shuffle_epi8(
                s8x2, _mm256_setr_m128i(_mm_set1_epi8((char)(8 * n + 2 * u)), _mm_set1_epi8((char)(8 * n + 2 * u + 1))));
            c32 = _mm256_add_epi32(c32, _mm256_madd_epi16(_mm256_maddubs_epi16(q, ms), _mm256_set1_epi16(1)));
          }
        }
      }
      if constexpr (CALC) corr[r] = 128 * hsum8(c32);
      _mm512_store_si512((__m512i*)sc[r], _mm512_cvtepi8_epi32(s8));
      _mm256_store_si256((__m256i*)sc2[r], _mm256_cvtepi8_epi16(s8));
      dw[r] = _cvtsh_ss(b->d);
    }
    typename v::I sumi[kRows];
    for (int r = 0; r < kRows; r++) sumi[r] = v::zero();
    for (int s = 0; s < 16; s++) sub_block<L, 4>(pk + (size_t)4 * s * 4 * L, wq, 16 * s, sc, s, sumi);
    const typename v::F xd = v::loadf(pk + (size_t)(64 + 8) * 4 * L);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; r++) {
      typename v::I off = v::zero();
#pragma GCC unroll 8
      for (int p = 0; p < 8; p++) off = v::dpwssd(off, v::load(pk + (size_t)(64 + p) * 4 * L), sc2[r][p]);
      const typename v::I si = v::sub(v::sub(sumi[r], correction<L, CALC>(sumi[r], corr[r])), v::shl5(off));
      acc[r] = v::fmadd(v::mul(v::set1f(dw[r]), xd), v::cvt(si), acc[r]);
    }
  }
  store_strip<L>(acc, nr, nt, y, ldy);
}

template <bool Q6>
void run(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y, size_t ldy) {
  if (lanes(nt) == 8) Q6 ? strip_q6_K<8, true>(k, w, ws, nr, packed, nt, y, ldy) : strip_q4_K<8, true>(k, w, ws, nr, packed, nt, y, ldy);
  else if (nt == 16) Q6 ? strip_q6_K<16, true>(k, w, ws, nr, packed, nt, y, ldy) : strip_q4_K<16, true>(k, w, ws, nr, packed, nt, y, ldy);
  else Q6 ? strip_q6_K<16, false>(k, w, ws, nr, packed, nt, y, ldy) : strip_q4_K<16, false>(k, w, ws, nr, packed, nt, y, ldy);
}

}  // namespace

// One group of up to 16 tokens, from where it beats the one-row tiles (whose cost grows with every
// 4 tokens, where a group costs the same for 2 tokens as for 8) to 16 tokens; Gemm16 from 17 (the
// group takes 16 tokens in 0.55-0.9x Gemm16's time). Measured on Zen 4 with bench_kernels --cold,
// 1 thread, Qwen2.5-Coder-1.5B's shapes, group / tiles, medians of 3 runs: Q4_K at 5 tokens
// 0.87-1.15, at 6 0.78-1.01 (k/v 1536->256 1.00), from 7 0.69-0.92; Q6_K at 6-7 0.77-1.19 (the
// 151936-row output matrix 1.07-1.09), at 8 0.70-1.06 (k/v 1536->256 1.03-1.06, output 0.94-0.97,
// 1536x1536 0.93, ffn_down 0.70-0.74), from 12 0.49-0.94.
constexpr int kQ4KFrom = 6, kQ6KFrom = 8, kBelow = 17;
extern const Gemm8 gemmk_q4_K = {packed_bytes<false>, pack<false>, run<false>, nullptr, 2, kMaxTokens, kQ4KFrom, kBelow};
extern const Gemm8 gemmk_q6_K = {packed_bytes<true>, pack<true>, run<true>, nullptr, 2, kMaxTokens, kQ6KFrom, kBelow};

}  // namespace avx512
}  // namespace kq
}  // namespace mb
