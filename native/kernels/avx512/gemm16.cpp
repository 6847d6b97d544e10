// AVX-512 VNNI GEMM for the K-quants (Q4_K, Q6_K) and Q4_0, Q5_0, Q8_0 over blocks of 16 weight rows: the rows'
// values are unpacked once per call into the layout vpdpbusd wants with the weights as the
// register operand, and every token of the call then runs over them. Compiled with
// -mavx512f/bw/dq/vl/vnni; dispatch.cpp uses it only after checking the CPU.
//
// Dimension legend: K elements per row (nb = K / 256 super-blocks); 16 weight rows r (the lanes
// of a zmm); g in [0, 64) the 4-element group of a super-block (elements 4g .. 4g + 3); s the
// sub-block (Q4_K: 8 of 32 elements, Q6_K: 16 of 16); up to kTok tokens t per pass.
//
// Why this layout rather than gemm8's (vnni.cpp: lanes = 2 rows x 8 tokens, activations packed,
// weights broadcast): there each vpdpbusd reads 64 bytes of packed activations, which do not stay
// in L1 at the K-quants' widths, and every weight block is unpacked again for every 8 tokens.
// Here lane r holds row r's 4 bytes of group g, the token's 4 bytes come as an embedded
// broadcast straight from its q8_K row (no packing), one weight load serves kTok tokens, and a
// weight block is unpacked once per call.
//
// The arithmetic is the AVX2 tile's (avx2/dot.cpp), so a token gets the same bits here as alone:
// per (row, token) and super-block an exact int32 sum, each sub-block's sum times its 6-bit
// (Q4_K) or 8-bit (Q6_K) scale (vpmulld: the scale folded per sub-block), then
//   Q4_K: acc = acc + fmsub(d_w * d_x, sumi, (dmin_w * d_x) * summ)
//   Q6_K: acc = fma(d_w * d_x, sumi - 32 * off, acc)
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "avx512.h"

namespace mb {
namespace kq {
namespace avx512 {
namespace {

constexpr int kRows = 16;
constexpr int kTok = 8;

// Unpacked super-block of 16 rows, Q4_K: w[64][16] dwords, sc[8][16] int32 scales, mn[4][16]
// dwords (row r's mins of sub-blocks 2p, 2p+1 as int16), d[16], dmin[16] floats.
constexpr size_t kQ4W = 64 * 64, kQ4Sc = kQ4W, kQ4Mn = kQ4Sc + 8 * 64, kQ4D = kQ4Mn + 4 * 64, kQ4Dmin = kQ4D + 64,
                 kQ4Block = kQ4Dmin + 64;
// Q6_K: w[64][16] dwords (values 0..63), sc[16][16] int32 scales, sc2[8][16] dwords (scales of
// sub-blocks 2p, 2p+1 as int16), d[16] floats.
constexpr size_t kQ6W = 64 * 64, kQ6Sc = kQ6W, kQ6Sc2 = kQ6Sc + 16 * 64, kQ6D = kQ6Sc2 + 8 * 64, kQ6Block = kQ6D + 64;

// Transposes 16 rows of 16 dwords (a[r] dword c) into out[c] = (a[0][c], ..., a[15][c]).
inline void transpose16(__m512i a[16], __m512i* out) {
  __m512i t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]);
  }
  // u[4i + c], 128-bit lane L: column 4L + c of rows 4i .. 4i + 3
  __m512i u[16];
  for (int i = 0; i < 4; i++) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; c++) {
    const __m512i A = u[c], B = u[4 + c], C = u[8 + c], D = u[12 + c];
    const __m512i ab_lo = _mm512_shuffle_i32x4(A, B, 0x44), ab_hi = _mm512_shuffle_i32x4(A, B, 0xEE);
    const __m512i cd_lo = _mm512_shuffle_i32x4(C, D, 0x44), cd_hi = _mm512_shuffle_i32x4(C, D, 0xEE);
    _mm512_store_si512(out + 0 + c, _mm512_shuffle_i32x4(ab_lo, cd_lo, 0x88));
    _mm512_store_si512(out + 4 + c, _mm512_shuffle_i32x4(ab_lo, cd_lo, 0xDD));
    _mm512_store_si512(out + 8 + c, _mm512_shuffle_i32x4(ab_hi, cd_hi, 0x88));
    _mm512_store_si512(out + 12 + c, _mm512_shuffle_i32x4(ab_hi, cd_hi, 0xDD));
  }
}
inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

size_t unpacked_bytes_q4_K(int64_t k) { return (size_t)(k / QK_K) * kQ4Block; }
size_t unpacked_bytes_q6_K(int64_t k) { return (size_t)(k / QK_K) * kQ6Block; }

// nr < 16: the missing rows repeat row 0 (their results are never stored).
void unpack_q4_K(int64_t k, const uint8_t* w, size_t ws, int nr, uint8_t* out) {
  const int64_t nb = k / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < nb; i++) {
    uint8_t* o = out + i * kQ4Block;
    const block_q4_K* b[kRows];
    for (int r = 0; r < kRows; r++) b[r] = (const block_q4_K*)(w + (r < nr ? r : 0) * ws) + i;
    for (int j = 0; j < 4; j++) {  // elements 64j .. 64j + 63: low nibbles of qs[32j..], then high
      __m512i a[kRows];
      for (int r = 0; r < kRows; r++) {
        const __m256i q = _mm256_loadu_si256((const __m256i*)(b[r]->qs + 32 * j));
        a[r] = join(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
      }
      transpose16(a, (__m512i*)o + 16 * j);
    }
    int32_t* sc = (int32_t*)(o + kQ4Sc);
    uint32_t* mn = (uint32_t*)(o + kQ4Mn);
    float* d = (float*)(o + kQ4D);
    float* dmin = (float*)(o + kQ4Dmin);
    for (int r = 0; r < kRows; r++) {
      uint64_t s8, m8;
      unpack_scales_mins(b[r]->scales, &s8, &m8);
      for (int s = 0; s < 8; s++) sc[s * kRows + r] = (int32_t)((s8 >> (8 * s)) & 0xff);
      for (int p = 0; p < 4; p++)
        mn[p * kRows + r] = (uint32_t)((m8 >> (16 * p)) & 0xff) | (uint32_t)((m8 >> (16 * p + 8)) & 0xff) << 16;
      d[r] = _cvtsh_ss(b[r]->d);
      dmin[r] = _cvtsh_ss(b[r]->dmin);
    }
  }
}

void unpack_q6_K(int64_t k, const uint8_t* w, size_t ws, int nr, uint8_t* out) {
  const int64_t nb = k / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < nb; i++) {
    uint8_t* o = out + i * kQ6Block;
    const block_q6_K* b[kRows];
    for (int r = 0; r < kRows; r++) b[r] = (const block_q6_K*)(w + (r < nr ? r : 0) * ws) + i;
    for (int n = 0; n < 2; n++) {
      __m512i a[2][kRows];  // elements 128n .. 128n + 63, then 128n + 64 .. 128n + 127
      for (int r = 0; r < kRows; r++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i*)(b[r]->ql + 64 * n));
        const __m256i l1 = _mm256_loadu_si256((const __m256i*)(b[r]->ql + 64 * n + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i*)(b[r]->qh + 32 * n));
        __m256i q[4];
        for (int u = 0; u < 4; u++) {  // elements 128n + 32u .. +31
          const __m256i l = u & 1 ? l1 : l0;
          q[u] = _mm256_or_si256(_mm256_and_si256(u < 2 ? l : _mm256_srli_epi16(l, 4), m4),
                                 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * u), m2), 4));
        }
        a[0][r] = join(q[0], q[1]);
        a[1][r] = join(q[2], q[3]);
      }
      transpose16(a[0], (__m512i*)o + 32 * n);
      transpose16(a[1], (__m512i*)o + 32 * n + 16);
    }
    int32_t* sc = (int32_t*)(o + kQ6Sc);
    uint32_t* sc2 = (uint32_t*)(o + kQ6Sc2);
    float* d = (float*)(o + kQ6D);
    for (int r = 0; r < kRows; r++) {
      for (int s = 0; s < 16; s++) sc[s * kRows + r] = b[r]->scales[s];
      for (int p = 0; p < 8; p++)
        sc2[p * kRows + r] =
            (uint32_t)(uint16_t)(int16_t)b[r]->scales[2 * p] | (uint32_t)(uint16_t)(int16_t)b[r]->scales[2 * p + 1] << 16;
      d[r] = _cvtsh_ss(b[r]->d);
    }
  }
}

inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline void store_rows(__m512 v, int nr, float* y) {
  _mm512_mask_storeu_ps(y, (__mmask16)((1u << nr) - 1), v);
}

// NT tokens (x rows xs bytes apart) against an unpacked block of 16 rows.
template <int NT>
void run_q4_K(int64_t k, const uint8_t* up, int nr, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  const int64_t nb = k / QK_K;
  __m512 acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* o = up + i * kQ4Block;
    const __m512i* W = (const __m512i*)o;
    const block_q8_K* xb[NT];
    for (int t = 0; t < NT; t++) xb[t] = (const block_q8_K*)(x + t * xs) + i;
    __m512i sumi[NT];
    for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
    for (int s = 0; s < 8; s++) {
      __m512i sub[NT];
      for (int t = 0; t < NT; t++) sub[t] = _mm512_setzero_si512();
      for (int g = 0; g < 8; g++) {
        const __m512i wv = _mm512_load_si512(W + 8 * s + g);
        for (int t = 0; t < NT; t++) sub[t] = _mm512_dpbusd_epi32(sub[t], wv, bcast32(xb[t]->qs + 32 * s + 4 * g));
      }
      const __m512i scv = _mm512_load_si512((const __m512i*)(o + kQ4Sc) + s);
      for (int t = 0; t < NT; t++) sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(sub[t], scv));
    }
    const __m512 dw = _mm512_load_ps((const float*)(o + kQ4D)), mw = _mm512_load_ps((const float*)(o + kQ4Dmin));
    for (int t = 0; t < NT; t++) {
      // the 8 sums of 32 activations as int16 pairs (sub-blocks 2p, 2p + 1 in dword p)
      const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i*)xb[t]->bsums),
                                        _mm_loadu_si128((const __m128i*)(xb[t]->bsums + 8)));
      __m512i summ = _mm512_setzero_si512();
      summ = _mm512_dpwssd_epi32(summ, _mm512_load_si512((const __m512i*)(o + kQ4Mn) + 0),
                                 _mm512_set1_epi32(_mm_extract_epi32(bs, 0)));
      summ = _mm512_dpwssd_epi32(summ, _mm512_load_si512((const __m512i*)(o + kQ4Mn) + 1),
                                 _mm512_set1_epi32(_mm_extract_epi32(bs, 1)));
      summ = _mm512_dpwssd_epi32(summ, _mm512_load_si512((const __m512i*)(o + kQ4Mn) + 2),
                                 _mm512_set1_epi32(_mm_extract_epi32(bs, 2)));
      summ = _mm512_dpwssd_epi32(summ, _mm512_load_si512((const __m512i*)(o + kQ4Mn) + 3),
                                 _mm512_set1_epi32(_mm_extract_epi32(bs, 3)));
      const __m512 xd = _mm512_set1_ps(xb[t]->d);
      const __m512 d = _mm512_mul_ps(dw, xd), dmin = _mm512_mul_ps(mw, xd);
      acc[t] = _mm512_add_ps(acc[t], _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(sumi[t]),
                                                     _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(summ))));
    }
  }
  for (int t = 0; t < NT; t++) store_rows(acc[t], nr, y + t * ldy);
}

template <int NT>
void run_q6_K(int64_t k, const uint8_t* up, int nr, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  const int64_t nb = k / QK_K;
  __m512 acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* o = up + i * kQ6Block;
    const __m512i* W = (const __m512i*)o;
    const block_q8_K* xb[NT];
    for (int t = 0; t < NT; t++) xb[t] = (const block_q8_K*)(x + t * xs) + i;
    __m512i sumi[NT];
    for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
    for (int s = 0; s < 16; s++) {
      __m512i sub[NT];
      for (int t = 0; t < NT; t++) sub[t] = _mm512_setzero_si512();
      for (int g = 0; g < 4; g++) {
        const __m512i wv = _mm512_load_si512(W + 4 * s + g);
        for (int t = 0; t < NT; t++) sub[t] = _mm512_dpbusd_epi32(sub[t], wv, bcast32(xb[t]->qs + 16 * s + 4 * g));
      }
      const __m512i scv = _mm512_load_si512((const __m512i*)(o + kQ6Sc) + s);
      for (int t = 0; t < NT; t++) sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(sub[t], scv));
    }
    const __m512 dw = _mm512_load_ps((const float*)(o + kQ6D));
    for (int t = 0; t < NT; t++) {
      __m512i off = _mm512_setzero_si512();
      for (int p = 0; p < 8; p++)
        off = _mm512_dpwssd_epi32(off, _mm512_load_si512((const __m512i*)(o + kQ6Sc2) + p), bcast32(xb[t]->bsums + 2 * p));
      const __m512i si = _mm512_sub_epi32(sumi[t], _mm512_slli_epi32(off, 5));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb[t]->d)), _mm512_cvtepi32_ps(si), acc[t]);
    }
  }
  for (int t = 0; t < NT; t++) store_rows(acc[t], nr, y + t * ldy);
}

template <void (*R1)(int64_t, const uint8_t*, int, const uint8_t*, size_t, float*, size_t),
          void (*R2)(int64_t, const uint8_t*, int, const uint8_t*, size_t, float*, size_t),
          void (*R3)(int64_t, const uint8_t*, int, const uint8_t*, size_t, float*, size_t),
          void (*R4)(int64_t, const uint8_t*, int, const uint8_t*, size_t, float*, size_t),
          void (*R8)(int64_t, const uint8_t*, int, const uint8_t*, size_t, float*, size_t)>
void run_any(int64_t k, const uint8_t* up, int nr, const uint8_t* x, size_t xs, const uint8_t*, size_t, int nt,
             float* y, size_t ldy) {
  // nt in (4, 8): the 8-token kernel on the call's tokens with the last one repeated would read
  // nothing past x, but costs as much as 8; a 4 and the rest are no slower
  while (nt > 0) {
    const int n = nt >= 8 ? 8 : nt >= 4 ? 4 : nt;
    switch (n) {
      case 8: R8(k, up, nr, x, xs, y, ldy); break;
      case 4: R4(k, up, nr, x, xs, y, ldy); break;
      case 3: R3(k, up, nr, x, xs, y, ldy); break;
      case 2: R2(k, up, nr, x, xs, y, ldy); break;
      default: R1(k, up, nr, x, xs, y, ldy); break;
    }
    x += n * xs;
    y += n * ldy;
    nt -= n;
  }
}
static_assert(kTok == 8, "run_any covers up to 8 tokens");

// ---- Q4_0, Q5_0, Q8_0 (activations q8_0) ----
// The same layout per pair of 32-element blocks: w[16][16] dwords (groups of block 2p, then of
// block 2p + 1; a missing last block is zero), d[2][16] floats. The arithmetic is vnni.cpp's for
// these types (its tile, dot and gemm8 give the same bits): per (row, token, block) an exact
// integer sum of the unsigned weights (value + C) against the activations, started at -C times
// the sum of the block's activations, then acc = fma(d_w * d_x, float(sum), acc). That start and
// d_x are each token's aux, computed once per call.
constexpr size_t kLW = 16 * 64, kLD = kLW, kLPair = kLD + 2 * 64;

template <GgmlType WT> struct Legacy16;
template <> struct Legacy16<GgmlType::Q4_0> {
  using W = block_q4_0; static constexpr int C = 8;
  static __m256i values(const W& b) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)b.qs));
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
  }
};
template <> struct Legacy16<GgmlType::Q5_0> {
  using W = block_q5_0; static constexpr int C = 16;
  static __m256i values(const W& b) {
    uint32_t h;
    std::memcpy(&h, b.qh, 4);
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)b.qs));
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
    return _mm256_or_si256(lo, _mm256_maskz_set1_epi8((__mmask32)h, 0x10));
  }
};
template <> struct Legacy16<GgmlType::Q8_0> {
  using W = block_q8_0; static constexpr int C = 128;
  static __m256i values(const W& b) {
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b.qs), _mm256_set1_epi8((char)0x80));
  }
};

template <GgmlType WT> size_t unpacked_bytes_legacy(int64_t k) { return (size_t)((k / QK + 1) / 2) * kLPair; }

template <GgmlType WT>
void unpack_legacy(int64_t k, const uint8_t* w, size_t ws, int nr, uint8_t* out) {
  using L = Legacy16<WT>;
  using W = typename L::W;
  const int64_t nb = k / QK;
  for (int64_t p = 0; p < (nb + 1) / 2; p++) {
    uint8_t* o = out + p * kLPair;
    float* d = (float*)(o + kLD);
    const bool two = 2 * p + 1 < nb;
    __m512i a[kRows];
    for (int r = 0; r < kRows; r++) {
      const W* b = (const W*)(w + (r < nr ? r : 0) * ws) + 2 * p;
      a[r] = join(L::values(b[0]), two ? L::values(b[1]) : _mm256_setzero_si256());
      d[r] = _cvtsh_ss(b[0].d);
      d[kRows + r] = two ? _cvtsh_ss(b[1].d) : 0.0f;
    }
    transpose16(a, (__m512i*)o);
  }
}

// aux per block: the sum's start (int32) and d_x (float)
size_t aux_bytes_legacy(int64_t k) { return (size_t)(k / QK) * 8; }
template <GgmlType WT>
void prepare_legacy(const uint8_t* xq, int64_t k, uint8_t* aux) {
  const block_q8_0* x = (const block_q8_0*)xq;
  for (int64_t i = 0; i < k / QK; i++) {
    int32_t sum = 0;
    for (int e = 0; e < QK; e++) sum += x[i].qs[e];
    const int32_t start = -Legacy16<WT>::C * sum;
    const float dx = _cvtsh_ss(x[i].d);
    std::memcpy(aux + 8 * i, &start, 4);
    std::memcpy(aux + 8 * i + 4, &dx, 4);
  }
}

template <int NT>
void run_legacy(int64_t k, const uint8_t* up, int nr, const uint8_t* x, size_t xs, const uint8_t* aux, size_t as,
                float* y, size_t ldy) {
  const int64_t nb = k / QK;
  __m512 acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* o = up + (i / 2) * kLPair;
    const __m512i* W = (const __m512i*)o + 8 * (i & 1);
    const __m512 dw = _mm512_load_ps((const float*)(o + kLD) + kRows * (i & 1));
    __m512i sum[NT];
    for (int t = 0; t < NT; t++) sum[t] = bcast32(aux + t * as + 8 * i);
    for (int g = 0; g < 8; g++) {
      const __m512i wv = _mm512_load_si512(W + g);
      for (int t = 0; t < NT; t++) {
        const block_q8_0* xb = (const block_q8_0*)(x + t * xs) + i;
        sum[t] = _mm512_dpbusd_epi32(sum[t], wv, bcast32(xb->qs + 4 * g));
      }
    }
    for (int t = 0; t < NT; t++) {
      float dx;
      std::memcpy(&dx, aux + t * as + 8 * i + 4, 4);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(sum[t]), acc[t]);
    }
  }
  for (int t = 0; t < NT; t++) store_rows(acc[t], nr, y + t * ldy);
}

template <int NT>
void run_legacy_n(int64_t k, const uint8_t* up, int nr, const uint8_t* x, size_t xs, const uint8_t* aux, size_t as,
                  int nt, float* y, size_t ldy) {
  (void)NT;
  while (nt > 0) {
    const int n = nt >= 8 ? 8 : nt >= 4 ? 4 : nt;
    switch (n) {
      case 8: run_legacy<8>(k, up, nr, x, xs, aux, as, y, ldy); break;
      case 4: run_legacy<4>(k, up, nr, x, xs, aux, as, y, ldy); break;
      case 3: run_legacy<3>(k, up, nr, x, xs, aux, as, y, ldy); break;
      case 2: run_legacy<2>(k, up, nr, x, xs, aux, as, y, ldy); break;
      default: run_legacy<1>(k, up, nr, x, xs, aux, as, y, ldy); break;
    }
    x += n * xs;
    aux += n * as;
    y += n * ldy;
    nt -= n;
  }
}

}  // namespace

extern const Gemm16 gemm16_q4_K = {unpacked_bytes_q4_K, unpack_q4_K, nullptr, nullptr,
                                   run_any<run_q4_K<1>, run_q4_K<2>, run_q4_K<3>, run_q4_K<4>, run_q4_K<8>>};
extern const Gemm16 gemm16_q6_K = {unpacked_bytes_q6_K, unpack_q6_K, nullptr, nullptr,
                                   run_any<run_q6_K<1>, run_q6_K<2>, run_q6_K<3>, run_q6_K<4>, run_q6_K<8>>};
#define MB_GEMM16_LEGACY(name, T)                                                                              \
  extern const Gemm16 name = {unpacked_bytes_legacy<GgmlType::T>, unpack_legacy<GgmlType::T>, aux_bytes_legacy, \
                              prepare_legacy<GgmlType::T>, run_legacy_n<8>};
MB_GEMM16_LEGACY(gemm16_q4_0, Q4_0)
MB_GEMM16_LEGACY(gemm16_q5_0, Q5_0)
MB_GEMM16_LEGACY(gemm16_q8_0, Q8_0)
#undef MB_GEMM16_LEGACY

}  // namespace avx512
}  // namespace kq
}  // namespace mb
