// Flash attention over the f16 KV cache with AVX-512 (see mb::attention for the contract and
// ref::flash_attention for the arithmetic it follows). Included by flash_f32.cpp (AVX-512 F) and
// flash_bf16.cpp (AVX-512 BF16), each compiled with its own flags; everything here has internal
// linkage so neither file's code can end up serving the other.
//
// Dimension legend: n query positions from p0; G query heads per KV head; DH head dim; R = n * G
// query rows, row r = i * G + h at position p0 + i; N = p0 + n keys; Bk = kFlashKeyBlock keys per
// block; RM rows per group.
//
// One pass over the keys, a block at a time. With many rows (a prefill chunk) each block is first
// converted once for every row of the call: K to f32 transposed, so the scores of 16 keys sit in
// one register with no horizontal sums; V to f32, or to bf16 key pairs for vdpbf16ps. With one
// group of rows (a decode step) keys and values are read from the cache as they are, since each
// element then serves that group alone. Each group of RM rows then goes through
//   1. scores q . k (8 partial sums over the dims, folded in one fixed order that both layouts
//      compute, see scores_transposed), times scale; keys past the row's position -> -inf;
//   2. online softmax: m' = max(m, block max), a = exp(m - m'), p = exp(s - m'), l = l * a + sum p;
//   3. output: o = o * a + sum_j p_j v_j over the block's keys in order (f32), or over its key pairs
//      in order with p and v rounded to bf16 (vdpbf16ps, products exact, sums in f32);
// and at the end out = o * (1 / l). q is rounded to f16 first, as llama.cpp does for an f16 cache.
// What a row computes depends only on its q, its position and the keys: the blocks start at key 0
// whatever the call, every row goes through the same operations whichever group and layout it is
// in, and keys a row does not see enter with p = 0 exactly. So a token gives the same bits alone
// (decode), in a prefill chunk or in a chunk cut elsewhere.
// A sliding window: the blocks before the first row's window are skipped, a row joins from the
// block holding its window's start (earlier blocks would leave its state as it is, all masked),
// and keys before the start are masked like keys past its position. A sink joins each row after
// its last block as llama.cpp's flash_attn_ext takes it (see ref::flash_attention).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "../avx2/avx2.h"
#include "../ref/ref.h"

namespace mb {
namespace kq {
namespace avx512 {
namespace {

constexpr int Bk = ref::kFlashKeyBlock;
static_assert(Bk == 64, "the score tiles below hold 4 vectors of 16 keys");

inline size_t part(size_t floats) { return (floats + 15) / 16 * 16; }  // 64-byte aligned parts

// Scratch in floats for R rows and head dim Dh:
//   qt [R][Dh] q rounded to f16     o [R][Dh] running outputs     m, l [R] running max and sum
//   kt [Dh][Bk] the block's keys, transposed     vb [Bk][Dh] its values (f32, or bf16 pairs in half)
//   pb [8][Bk] a group's probabilities
// (plus 16 to align the base to 64 bytes).
inline size_t flash_scratch(int R, int Dh) {
  return 16 + 2 * part((size_t)R * Dh) + 2 * part((size_t)R) + 2 * part((size_t)Dh * Bk) + part(8 * (size_t)Bk);
}

// ref::ggml_expf on 16 lanes (x <= 0; -inf and anything below 2^-126 give 0)
inline __m512 exp16(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  // 2^n from z's low bits (z = 1.5 * 2^23 + n)
  const __m512 k = _mm512_castsi512_ps(
      _mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(z), 23), _mm512_castps_si512(_mm512_set1_ps(1.0f))));
  const __mmask16 normal = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);  // false for -inf, NaN
  return _mm512_maskz_mul_ps(normal, j, k);
}

// 16 vectors of 16 -> their transpose
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {  // r[4i + e]: rows 4i..4i+3, element e of each 128-bit lane
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  __m512 c[16];
  for (int e = 0; e < 4; e++) {
    const __m512 a = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x88), b = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xDD);
    const __m512 x = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x88), y = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xDD);
    c[e] = _mm512_shuffle_f32x4(a, x, 0x88);
    c[8 + e] = _mm512_shuffle_f32x4(a, x, 0xDD);
    c[4 + e] = _mm512_shuffle_f32x4(b, y, 0x88);
    c[12 + e] = _mm512_shuffle_f32x4(b, y, 0xDD);
  }
  for (int i = 0; i < 16; i++) r[i] = c[i];
}

// kt[d][j] = key k0 + j's dim d in f32 for j < nk, 0 for nk <= j < Bk (never read past key N)
template <int DH>
inline void keys_transposed(const uint16_t* kh, int nk, float* kt) {
  for (int j0 = 0; j0 < Bk; j0 += 16)
    for (int d0 = 0; d0 < DH; d0 += 16) {
      __m512 r[16];
      for (int x = 0; x < 16; x++)
        r[x] = j0 + x < nk ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(kh + (size_t)(j0 + x) * DH + d0)))
                           : _mm512_setzero_ps();
      transpose16(r);
      for (int x = 0; x < 16; x++) _mm512_store_ps(kt + (size_t)(d0 + x) * Bk + j0, r[x]);
    }
}

// Per-row state of the call, shared by the phases.
struct Call {
  const float* qt;  // [R][DH]
  float* o;         // [R][DH]
  float* m;         // [R]
  float* l;         // [R]
  const float* kt;  // [DH][Bk] the block's keys transposed (unless direct)
  const void* vb;   // the block's values (f32 [Bk][DH] or bf16 pairs [Bk/2][DH]), unless direct
  float* pb;        // [RM][Bk] scores, then probabilities
  const uint16_t* kh;  // the block's keys in the cache (direct: read as they are)
  const uint16_t* vh;  // the block's values in the cache (direct: converted as they are used)
  int G, p0, k0, nk;
  int window;  // W, 0 for none
  float scale;
};

// The score of a row and a key is q . k summed as 8 partial chains, chain l over the dims
// l, l + 8, l + 16, ... in order, folded as ((c0 + c4) + (c2 + c6)) + ((c1 + c5) + (c3 + c7)):
// an order that both layouts below compute, so a row's scores have the same bits whichever the
// call picks.

// Keys transposed (many rows): 16 keys in the lanes, one fma chain per partial, no horizontal
// sums. pb row x gets the raw sums for key vectors [0, nkv).
template <int RM, int DH>
inline void scores_transposed(const Call& c, int r0, int from, int nkv) {
  const float* q = c.qt + (size_t)r0 * DH;
  for (int y = from / 16; y < nkv; y++) {
    const float* kt = c.kt + 16 * y;
    // t[x] = chain l + chain l + 4 of row x
    auto pair = [&](int l, __m512* t) {
      __m512 a[RM], b[RM];
#pragma GCC unroll 8
      for (int x = 0; x < RM; x++) a[x] = b[x] = _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int d = l; d < DH; d += 8) {
        const __m512 ka = _mm512_load_ps(kt + (size_t)d * Bk), kb = _mm512_load_ps(kt + (size_t)(d + 4) * Bk);
#pragma GCC unroll 8
        for (int x = 0; x < RM; x++) {
          a[x] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)x * DH + d]), ka, a[x]);
          b[x] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)x * DH + d + 4]), kb, b[x]);
        }
      }
#pragma GCC unroll 8
      for (int x = 0; x < RM; x++) t[x] = _mm512_add_ps(a[x], b[x]);
    };
    __m512 t0[RM], t2[RM], t1[RM], t3[RM];
    pair(0, t0);
    pair(2, t2);
#pragma GCC unroll 8
    for (int x = 0; x < RM; x++) t0[x] = _mm512_add_ps(t0[x], t2[x]);
    pair(1, t1);
    pair(3, t3);
#pragma GCC unroll 8
    for (int x = 0; x < RM; x++)
      _mm512_store_ps(c.pb + (size_t)x * Bk + 16 * y, _mm512_add_ps(t0[x], _mm512_add_ps(t1[x], t3[x])));
  }
}

// Keys as they are (few rows: a decode step), 8 dims of a key in the lanes, each 8 dims converted
// once for all the rows; every 8 keys' sums are folded together with shuffles. pb row x gets the
// raw sums for keys [0, nk8) (0 past the block's nk keys, which are never read).
template <int RM, int DH>
inline void scores_direct(const Call& c, int r0, int from, int nk8) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const float* q = c.qt + (size_t)r0 * DH;
  for (int j0 = from; j0 < nk8; j0 += 8) {
    __m256 acc[RM][8];
#pragma GCC unroll 8
    for (int x = 0; x < RM; x++)
#pragma GCC unroll 8
      for (int kk = 0; kk < 8; kk++) acc[x][kk] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int kk = 0; kk < 8; kk++) {
      if (j0 + kk >= c.nk) break;
      const uint16_t* kj = c.kh + (size_t)(j0 + kk) * DH;
#pragma GCC unroll 16
      for (int e = 0; e < DH / 8; e++) {
        const __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(kj + 8 * e)));
#pragma GCC unroll 8
        for (int x = 0; x < RM; x++)
          acc[x][kk] = _mm256_fmadd_ps(_mm256_load_ps(q + (size_t)x * DH + 8 * e), kv, acc[x][kk]);
      }
    }
#pragma GCC unroll 8
    for (int x = 0; x < RM; x++) {
      // lanes l + l+4 (t_l), two keys a vector; then t_l + t_l+2; then the two halves
      __m256 t[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++)
        t[i] = _mm256_add_ps(_mm256_permute2f128_ps(acc[x][2 * i], acc[x][2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(acc[x][2 * i], acc[x][2 * i + 1], 0x31));
      const __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], 0x44), _mm256_shuffle_ps(t[0], t[1], 0xEE));
      const __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], 0x44), _mm256_shuffle_ps(t[2], t[3], 0xEE));
      const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, 0x88), _mm256_shuffle_ps(u0, u1, 0xDD));
      _mm256_store_ps(c.pb + (size_t)x * Bk + j0, _mm256_permutevar8x32_ps(s, order));  // keys 0, 2, 4, 6, 1, ... -> in order
    }
  }
}

// Horizontal reductions of up to 8 rows at once: lane x of the result is op over the 16 lanes of
// v[x] (lanes 8..15 of the result are don't-care). Every row goes through the same tree whichever
// slot it holds (lanes i + 8, then i + 4, then i + 2, then i + 1: the order of
// _mm512_reduce_add_ps), so a row's sum has the same bits alone, in any group, in any slot; and
// the 8 reductions overlap instead of running one after another.
template <class Op>
inline __m512 reduce8(const __m512 v[8], Op op) {
  __m512 w[4];
  for (int i = 0; i < 4; i++)  // [row 2i lanes 0-7 (+8), row 2i+1 lanes 0-7 (+8)]
    w[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  __m512 x[2];
  for (int i = 0; i < 2; i++)  // 128-bit block k: row 4i + k, lanes 0-3 (+4)
    x[i] = op(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88), _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
  // block k: [row k, row k] [row k + 4, row k + 4] (lanes 0-1 (+2))
  const __m512 y = op(_mm512_shuffle_ps(x[0], x[1], 0x44), _mm512_shuffle_ps(x[0], x[1], 0xEE));
  const __m512 z = op(y, _mm512_permute_ps(y, 0xB1));  // block k: row k at lane 0, row k + 4 at lane 2
  const __m512i rows = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(rows, z);
}

// The online softmax of rows r0 .. r0 + RM - 1 over the block from their raw sums in pb (valid
// for key vectors [0, nkv)); pb row x gets p for keys [0, Bk) (0 past the row's position),
// alpha[x] the row's rescale factor. Only a block that reaches past a row's position masks it
// (at depth almost none do). The group's maxima, sums and rescale factors are reduced together
// (reduce8) so the rows' dependency chains overlap: the same lane operations as one row at a
// time, so the same bits.
template <int RM>
inline void softmax_rows(const Call& c, int r0, int nkv, float* alpha) {
  static_assert(RM <= 8, "reduce8 holds the group's rows");
  const __m512 sc = _mm512_set1_ps(c.scale), ninf = _mm512_set1_ps(-INFINITY);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __mmask16 live = (__mmask16)((1u << RM) - 1);
  __m512 red[8];
#pragma GCC unroll 8
  for (int x = 0; x < 8; x++) red[x] = ninf;
  // 1. scaled (and masked) scores back into pb; each row's block max
#pragma GCC unroll 8
  for (int x = 0; x < RM; x++) {
    const int pos = c.p0 + (r0 + x) / c.G;
    const int last = pos - c.k0;  // the row's own key, as an index in the block
    const int first = c.window > 0 ? pos - c.window + 1 - c.k0 : 0;  // its window's first key (may be < 0)
    float* pr = c.pb + (size_t)x * Bk;
    __m512 s[4];
    if (nkv == 4 && last >= Bk - 1 && first <= 0) {
      for (int y = 0; y < 4; y++) s[y] = _mm512_mul_ps(_mm512_load_ps(pr + 16 * y), sc);
    } else {
      for (int y = 0; y < 4; y++) {
        const __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32(16 * y));
        const __mmask16 past = _mm512_cmp_epi32_mask(idx, _mm512_set1_epi32(last), _MM_CMPINT_GT) |
                               _mm512_cmp_epi32_mask(idx, _mm512_set1_epi32(first), _MM_CMPINT_LT);
        s[y] = y < nkv ? _mm512_mask_mov_ps(_mm512_mul_ps(_mm512_load_ps(pr + 16 * y), sc), past, ninf) : ninf;
      }
    }
    for (int y = 0; y < 4; y++) _mm512_store_ps(pr + 16 * y, s[y]);
    red[x] = _mm512_max_ps(_mm512_max_ps(s[0], s[1]), _mm512_max_ps(s[2], s[3]));
  }
  // 2. new running maxima (-inf before a row's first block: its factor exp(-inf) is 0)
  const __m512 mold = _mm512_mask_loadu_ps(ninf, live, c.m + r0);
  const __m512 mnew = _mm512_max_ps(reduce8(red, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); }), mold);
  _mm512_mask_storeu_ps(c.m + r0, live, mnew);
  alignas(64) float mrow[16];
  _mm512_store_ps(mrow, mnew);
  // 3. p = exp(s - m'), each row's block sum
#pragma GCC unroll 8
  for (int x = 0; x < 8; x++) red[x] = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int x = 0; x < RM; x++) {
    float* pr = c.pb + (size_t)x * Bk;
    const __m512 vm = _mm512_set1_ps(mrow[x]);
    __m512 p[4];
    for (int y = 0; y < 4; y++) {
      p[y] = exp16(_mm512_sub_ps(_mm512_load_ps(pr + 16 * y), vm));
      _mm512_store_ps(pr + 16 * y, p[y]);
    }
    red[x] = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
  }
  // 4. l = l * a + sum p, a = exp(m - m')
  const __m512 a = exp16(_mm512_sub_ps(mold, mnew));
  const __m512 sums = reduce8(red, [](__m512 u, __m512 v) { return _mm512_add_ps(u, v); });
  _mm512_mask_storeu_ps(c.l + r0, live, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, c.l + r0), a, sums));
  alignas(64) float av[16];
  _mm512_store_ps(av, a);
#pragma GCC unroll 8
  for (int x = 0; x < RM; x++) alpha[x] = av[x];
}

// The f32 value product: o = o * a + sum_j p_j v_j, keys in order. vb is [Bk][DH] f32.
template <int RM, int DH, bool DIRECT>
inline void group_values_f32(const Call& c, int r0, int from, int need, const float* alpha) {
  constexpr int NV = DH / 16;
  __m512 acc[RM][NV];
  float* o = c.o + (size_t)r0 * DH;
#pragma GCC unroll 8
  for (int x = 0; x < RM; x++) {
    const __m512 a = _mm512_set1_ps(alpha[x]);
#pragma GCC unroll 8
    for (int y = 0; y < NV; y++) acc[x][y] = _mm512_mul_ps(_mm512_load_ps(o + (size_t)x * DH + 16 * y), a);
  }
  const float* vb = (const float*)c.vb;
  for (int j = from; j < need; j++) {
    __m512 vv[NV];
#pragma GCC unroll 8
    for (int y = 0; y < NV; y++)
      vv[y] = DIRECT ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(c.vh + (size_t)j * DH + 16 * y)))
                     : _mm512_load_ps(vb + (size_t)j * DH + 16 * y);
#pragma GCC unroll 8
    for (int x = 0; x < RM; x++) {
      const __m512 p = _mm512_set1_ps(c.pb[(size_t)x * Bk + j]);
#pragma GCC unroll 8
      for (int y = 0; y < NV; y++) acc[x][y] = _mm512_fmadd_ps(p, vv[y], acc[x][y]);
    }
  }
#pragma GCC unroll 8
  for (int x = 0; x < RM; x++)
#pragma GCC unroll 8
    for (int y = 0; y < NV; y++) _mm512_store_ps(o + (size_t)x * DH + 16 * y, acc[x][y]);
}

// vb[j][d] = value k0 + j's dim d in f32 for j < nk, 0 up to Bk
template <int DH>
inline void values_f32(const uint16_t* vh, int nk, float* vb) {
  for (int j = 0; j < Bk; j++)
    for (int d = 0; d < DH; d += 16)
      _mm512_store_ps(vb + (size_t)j * DH + d,
                      j < nk ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(vh + (size_t)j * DH + d)))
                             : _mm512_setzero_ps());
}

#if MB_FLASH_BF16
// vb[u][d] = the bf16 pair (value 2u, value 2u + 1) of dim d, as one 32-bit unit; 0 past nk
// dims [d, d + 16) of values j and j + 1 as bf16 pairs (value j + 1 is 0 from nk on)
// The permutation of 16-bit lanes [a0..a15, b0..b15] -> [a0, b0, a1, b1, ...]: two keys' values of
// 16 dims as the key pairs vdpbf16ps and the AMX tiles take.
inline __m512i pair_interleave() {
  return _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005, 0x00160006,
                           0x00170007, 0x00180008, 0x00190009, 0x001a000a, 0x001b000b, 0x001c000c, 0x001d000d,
                           0x001e000e, 0x001f000f);
}

inline __m512i value_pair(const uint16_t* vh, int DH, int nk, int j, int d) {
  const __m512i inter = pair_interleave();
  const __m512 a = j < nk ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(vh + (size_t)j * DH + d)))
                          : _mm512_setzero_ps();
  const __m512 b = j + 1 < nk ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(vh + (size_t)(j + 1) * DH + d)))
                              : _mm512_setzero_ps();
  const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // bf16 [a0..a15, b0..b15]
  return _mm512_permutexvar_epi16(inter, ab);
}

template <int DH>
inline void values_bf16_pairs(const uint16_t* vh, int nk, uint32_t* vb) {
  for (int u = 0; u < Bk / 2; u++)
    for (int d = 0; d < DH; d += 16) _mm512_store_si512((__m512i*)(vb + (size_t)u * DH + d), value_pair(vh, DH, nk, 2 * u, d));
}

// The bf16 value product: o = o * a + sum_u (p_2u v_2u + p_2u+1 v_2u+1), key pairs in order, p
// and v rounded to bf16, each pair's two products exact and added in f32 by vdpbf16ps.
template <int RM, int DH, bool DIRECT>
inline void group_values_bf16(const Call& c, int r0, int from, int need, const float* alpha) {
  constexpr int NV = DH / 16;
  __m512 acc[RM][NV];
  float* o = c.o + (size_t)r0 * DH;
  uint32_t pp[RM][Bk / 2];  // each row's probabilities as bf16 pairs
#pragma GCC unroll 8
  for (int x = 0; x < RM; x++) {
    const __m512 a = _mm512_set1_ps(alpha[x]);
#pragma GCC unroll 8
    for (int y = 0; y < NV; y++) acc[x][y] = _mm512_mul_ps(_mm512_load_ps(o + (size_t)x * DH + 16 * y), a);
    const float* pr = c.pb + (size_t)x * Bk;
    _mm512_storeu_si512((__m512i*)pp[x], (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(pr + 16), _mm512_load_ps(pr)));
    _mm512_storeu_si512((__m512i*)pp[x] + 1,
                        (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(pr + 48), _mm512_load_ps(pr + 32)));
  }
  const uint32_t* vb = (const uint32_t*)c.vb;
  for (int u = from / 2; u < (need + 1) / 2; u++) {
    __m512bh vv[NV];
#pragma GCC unroll 8
    for (int y = 0; y < NV; y++)
      vv[y] = (__m512bh)(DIRECT ? value_pair(c.vh, DH, c.nk, 2 * u, 16 * y)
                                : _mm512_load_si512((const __m512i*)(vb + (size_t)u * DH + 16 * y)));
#pragma GCC unroll 8
    for (int x = 0; x < RM; x++) {
      const __m512bh p = (__m512bh)_mm512_set1_epi32((int)pp[x][u]);
#pragma GCC unroll 8
      for (int y = 0; y < NV; y++) acc[x][y] = _mm512_dpbf16_ps(acc[x][y], vv[y], p);
    }
  }
#pragma GCC unroll 8
  for (int x = 0; x < RM; x++)
#pragma GCC unroll 8
    for (int y = 0; y < NV; y++) _mm512_store_ps(o + (size_t)x * DH + 16 * y, acc[x][y]);
}
#endif

template <int RM, int DH>
inline void group(const Call& c, int r0, bool direct) {
  // keys the group needs: up to its last row's position
  const int need = std::min(c.p0 + (r0 + RM - 1) / c.G - c.k0 + 1, c.nk);
  const int nkv = (need + 15) / 16;
  // keys before the group's first window start, in whole 16-key vectors: no row of the group
  // sees them (their scores would be masked, their p exactly 0), so they are not read at all;
  // the sums then get the same bits
  const int from = c.window > 0 ? std::max(0, c.p0 + r0 / c.G - c.window + 1 - c.k0) / 16 * 16 : 0;
  if (direct) scores_direct<RM, DH>(c, r0, from, (need + 7) & ~7);
  else scores_transposed<RM, DH>(c, r0, from, nkv);
  float alpha[RM];
  softmax_rows<RM>(c, r0, nkv, alpha);
#if MB_FLASH_BF16
  if (direct) group_values_bf16<RM, DH, true>(c, r0, from, need, alpha);
  else group_values_bf16<RM, DH, false>(c, r0, from, need, alpha);
#else
  if (direct) group_values_f32<RM, DH, true>(c, r0, from, need, alpha);
  else group_values_f32<RM, DH, false>(c, r0, from, need, alpha);
#endif
}

// The end of a pass: each row's sink joins its softmax (as ref::flash_attention takes it), then
// out = o / l, rows back to [position][head].
template <int DH>
inline void finish_rows(const float* sinks, float* o, float* m, float* l, int R, int G, float* out, size_t ldo) {
  if (sinks)
    for (int r = 0; r < R; r++) {
      const float sink = sinks[r % G];
      if (sink > m[r]) {
        const float ms = std::exp(m[r] - sink);
        for (int d = 0; d < DH; d += 16)
          _mm512_store_ps(o + (size_t)r * DH + d, _mm512_mul_ps(_mm512_load_ps(o + (size_t)r * DH + d), _mm512_set1_ps(ms)));
        l[r] = l[r] * ms + 1.0f;
      } else {
        l[r] += std::exp(sink - m[r]);
      }
    }
  for (int r = 0; r < R; r++) {
    const __m512 inv = _mm512_set1_ps(1.0f / l[r]);
    float* dst = out + (size_t)(r / G) * ldo + (size_t)(r % G) * DH;
    for (int d = 0; d < DH; d += 16) _mm512_storeu_ps(dst + d, _mm512_mul_ps(_mm512_load_ps(o + (size_t)r * DH + d), inv));
  }
}

// rows per group: the score tiles (RM x 4 vectors) and the output tiles (RM x DH/16) stay in
// the 32 registers
template <int DH> constexpr int kRows = DH <= 64 ? 6 : 3;

template <int DH>
void flash(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
           int p0, float scale, int window, const float* sinks, float* scratch) {
  constexpr int RM = kRows<DH>;
  const int R = n * G, N = p0 + n;
  float* qt = (float*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);  // [R][DH]
  float* o = qt + part((size_t)R * DH);       // [R][DH]
  float* m = o + part((size_t)R * DH);        // [R]
  float* l = m + part((size_t)R);             // [R]
  float* kt = l + part((size_t)R);            // [DH][Bk]
  float* vb = kt + part((size_t)DH * Bk);     // [Bk][DH]
  float* pb = vb + part((size_t)DH * Bk);     // [RM][Bk]
  for (int i = 0; i < n; i++)
    for (int h = 0; h < G; h++) {
      const float* src = q + (size_t)i * ldq + (size_t)h * DH;
      float* dst = qt + ((size_t)i * G + h) * DH;
      for (int d = 0; d < DH; d += 16)
        _mm512_store_ps(dst + d, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(src + d), _MM_FROUND_TO_NEAREST_INT)));
    }
  std::memset(o, 0, sizeof(float) * (size_t)R * DH);
  for (int r = 0; r < R; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  Call c{qt, o, m, l, kt, vb, pb, nullptr, nullptr, G, p0, 0, 0, window, scale};
  // one group of rows (a decode step): transposing each key block would cost more than the scores
  const bool direct = R <= RM;
  // the first block any row sees: the one holding the first row's window start
  const int k_lo = window > 0 ? std::max(0, p0 - window + 1) / Bk * Bk : 0;
  for (int k0 = k_lo; k0 < N; k0 += Bk) {
    c.k0 = k0;
    c.nk = std::min(Bk, N - k0);
    c.kh = k + (size_t)k0 * DH;
    c.vh = v + (size_t)k0 * DH;
    if (!direct) {
      keys_transposed<DH>(c.kh, c.nk, kt);
#if MB_FLASH_BF16
      values_bf16_pairs<DH>(c.vh, c.nk, (uint32_t*)vb);
#else
      values_f32<DH>(c.vh, c.nk, vb);
#endif
    }
    // rows whose position is before the block see none of it, nor do rows whose window starts
    // past it (rows are in position order)
    const int r_hi = window > 0 ? std::min(R, (k0 + c.nk + window - 1 - p0) * G) : R;
    for (int r0 = std::max(0, k0 - p0) * G; r0 < r_hi; r0 += RM) {
      switch (std::min(RM, r_hi - r0)) {
        case 6: group<kRows<DH> >= 6 ? 6 : 1, DH>(c, r0, direct); break;
        case 5: group<kRows<DH> >= 5 ? 5 : 1, DH>(c, r0, direct); break;
        case 4: group<kRows<DH> >= 4 ? 4 : 1, DH>(c, r0, direct); break;
        case 3: group<3, DH>(c, r0, direct); break;
        case 2: group<2, DH>(c, r0, direct); break;
        default: group<1, DH>(c, r0, direct); break;
      }
    }
  }
  finish_rows<DH>(sinks, o, m, l, R, G, out, ldo);
}

// The entry point of each file: the head dims with a kernel here, any other one to the AVX2
// kernel (no model we load has one).
inline void flash_entry(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo,
                        int n, int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch) {
  switch (Dh) {
    case 64: flash<64>(q, ldq, k, v, out, ldo, n, G, p0, scale, window, sinks, scratch); return;
    case 128: flash<128>(q, ldq, k, v, out, ldo, n, G, p0, scale, window, sinks, scratch); return;
    default: avx2::attention(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, window, sinks, scratch); return;
  }
}
inline size_t flash_entry_scratch(int R, int Dh, int N) {
  return Dh == 64 || Dh == 128 ? flash_scratch(R, Dh) : avx2::attention_scratch_floats(R, Dh, N);
}

}  // namespace
}  // namespace avx512
}  // namespace kq
}  // namespace mb
