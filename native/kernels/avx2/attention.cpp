// AVX2/FMA/F16C attention over the f16 KV cache (see mb::attention for the contract): bit for
// bit the arithmetic of ref::attention (llama.cpp's, see there), in three sweeps over the keys:
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
// A sliding window masks the keys before each row's first like those past its position (exact
// zeros in every sum), and the blocks before the first row's window are skipped: their zeros would
// change no bit. A sink joins each row's max after sweep 1 and its sum after sweep 2, as ggml's
// soft_max does.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../ref/ref.h"
#include "avx2.h"
#include "simd.h"

namespace mb {
namespace kq {
namespace avx2 {
namespace {

// Keys per block of the tiled attention: a block of K or V in f32 (64 * Dh * 4 bytes, 16 KB for
// Dh = 64) stays in L1 while every query row of the call passes over it. Blocks start at
// multiples of kAttnKeyBlock (a multiple of 16) from key 0 whatever the call, so each block holds
// whole 16-key chunks of the reference's softmax sums and output chains.
constexpr int kAttnKeyBlock = 64;
static_assert(kAttentionKeyAlign % kAttnKeyBlock == 0, "a caller's aligned start must start a block");
// Scratch of the tiled attention for R query rows over N keys, nb = ceil(N / kAttnKeyBlock)
// blocks, in floats:
//   qt [R][Dh] rows rounded to f16      ch [R][attn_ch_row] each output's 16 partial sums ([Dh/8][16][8])
//   e [nb][R][kAttnKeyBlock] scores, then exp(score - row max), block by block
//   rmax, rinv [R] row max, (float)(1 / row sum)       rsum [R] row sum (double)
//   kb [Dh][kAttnKeyBlock] one key block in f32, transposed    vb [2 * kAttnKeyBlock][attn_vb_row] values
//   p [6][2 * kAttnKeyBlock] a row group's f16-rounded probabilities
//   tail [4][Dh] the last, partial group of 4 keys, zero padded
// Each part starts on a 16-float (64-byte) boundary relative to the base. Rows of ch and vb are
// padded by 64 bytes: unpadded, rows of ch (and every 16th row of vb, the keys of one chain) sit
// 4 KB apart, where loads alias earlier stores and share L1 sets.
inline size_t attn_part(size_t floats) { return (floats + 15) / 16 * 16; }
inline size_t attn_ch_row(int Dh) { return (size_t)Dh * 16 + 16; }
inline size_t attn_vb_row(int Dh) { return (size_t)Dh + 16; }
inline size_t tiled_scratch_floats(int R, int Dh, int N) {
  const size_t nb = ((size_t)N + kAttnKeyBlock - 1) / kAttnKeyBlock;
  const size_t tiled = attn_part((size_t)R * Dh) + attn_part((size_t)R * attn_ch_row(Dh)) +
                       attn_part((size_t)R * nb * kAttnKeyBlock) + 2 * attn_part((size_t)R) + attn_part(2 * (size_t)R) +
                       attn_part((size_t)kAttnKeyBlock * Dh) + attn_part(2 * (size_t)kAttnKeyBlock * attn_vb_row(Dh)) +
                       attn_part(12 * (size_t)kAttnKeyBlock) + attn_part(4 * (size_t)Dh);
  return tiled;
}

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
  int window;               // W, 0 for none
  float scale;
  bool direct;
  float* e_at(int r) const { return e + ((size_t)blk * R + r) * kAttnKeyBlock; }
  int last(int r) const { return p0 + r / G - k0; }  // row r's own position, as an index in the block
  // row r's first key (its window's start), as an index in the block (<= 0 when it precedes it)
  int first(int r) const { return window > 0 ? std::max(0, p0 + r / G - window + 1) - k0 : -k0; }
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
    const int last = c.last(r0 + x), first = c.first(r0 + x);
    // keys past the row's position (and past the block's end) or before its window count as -inf
    if (last < nk16 - 1 || first > 0) {
      const __m256i lim = _mm256_set1_epi32(last), lo = _mm256_set1_epi32(first);
      const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      for (int j = 0; j < nk16; j += 8) {
        const __m256i idx = _mm256_add_epi32(iota, _mm256_set1_epi32(j));
        const __m256 masked =
            _mm256_castsi256_ps(_mm256_or_si256(_mm256_cmpgt_epi32(idx, lim), _mm256_cmpgt_epi32(lo, idx)));
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
                  int G, int dh, int p0, float scale, int window, const float* sinks, float* scratch) {
  const int Dh = DH ? DH : dh;
  constexpr int Bk = kAttnKeyBlock;
  const int R = n * G, N = p0 + n, nb = (N + Bk - 1) / Bk;
  // the first block any row sees: the one holding the first row's window start
  const int blk_lo = window > 0 ? std::max(0, p0 - window + 1) / Bk : 0;
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
  c.R = R; c.Dh = Dh; c.G = G; c.p0 = p0; c.N = N; c.nb = nb; c.window = window; c.scale = scale;
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
  for (int blk = blk_lo; blk < nb; blk++) {
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

  if (sinks)
    for (int r = 0; r < R; r++) rmax[r] = std::fmax(rmax[r], sinks[r % G]);

  // sweep 2: e = exp(s - max) and the sums, 16 keys at a time (masked keys add exact zeros, so
  // the row's length does not matter)
  for (int blk = blk_lo; blk < nb; blk++) {
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
  if (sinks)
    for (int r = 0; r < R; r++) rsum[r] += (double)std::exp(sinks[r % G] - rmax[r]);
  for (int r = 0; r < R; r++) rinv[r] = (float)(1.0 / rsum[r]);

  // sweep 3: probabilities rounded to f16, times V, into the chains, kPvKeys keys at a time
  std::memset(ch, 0, sizeof(float) * (size_t)R * attn_ch_row(Dh));
  for (int blk = blk_lo; blk < nb; blk += kPvKeys / Bk) {
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

}  // namespace

void attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int Dh, int p0, float scale, int window, const float* sinks, float* scratch) {
  switch (Dh) {
    case 64: attention_dh<64>(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, window, sinks, scratch); return;
    case 128: attention_dh<128>(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, window, sinks, scratch); return;
    default: break;
  }
  if (Dh % 8 != 0) {  // no model we load has such a head; keep the contract anyway
    ref::attention(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, window, sinks, scratch);
    return;
  }
  attention_dh<0>(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, window, sinks, scratch);
}

size_t attention_scratch_floats(int R, int Dh, int N) {
  // heads that are not a multiple of 8 go to ref::attention
  return std::max(tiled_scratch_floats(R, Dh, N), ref::attention_scratch_floats(R, Dh, N));
}

}  // namespace avx2
}  // namespace kq
}  // namespace mb
