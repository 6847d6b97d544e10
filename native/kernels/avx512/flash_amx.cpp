// Flash attention with the products on AMX tiles (TDPBF16PS), at f32 accuracy: each bf16
// operand is split into a high and a low bf16 part and all four part products are summed. The f16
// cache and the f16-rounded query have 11 significant bits, so for them hi + lo is exact; the
// probabilities (f32) keep 16. The softmax is flash.h's, in AVX-512 on the scores the tiles return.
//
// Dimension legend: n query positions from p0; G query heads per KV head; DH head dim; R = n * G
// query rows, row r = i * G + h at position p0 + i; N = p0 + n keys; Bk = 64 keys per block
// (ref::kFlashKeyBlock, from key 0); a tile is 16 rows x 64 bytes (16 f32 or 32 bf16).
//
// Per key block (converted once for every row of the call), each run of 16 rows:
//   S [16][Bk]  = Q [16][DH] . K^T          4 tiles, one per 16 keys, K-steps of 32 dims
//   softmax_rows (flash.h) on S: m, l, alpha per row; S -> P in place
//   PV [16][DH] = P [16][Bk] . V [Bk][DH]   DH/16 tiles, K-steps of 32 keys
//   o = o * alpha + PV
// A tile's row is computed from that row of A alone, so a row's bits depend only on its q, its
// position and the keys: a token gives the same bits alone (decode), in a prefill chunk or in a
// chunk cut elsewhere, as in flash.h. Keys a row does not see get p = 0 exactly, so their
// products add exact zeros.
// Tiles: tmm0-3 accumulators, tmm4-5 the A operand (hi, lo), tmm6-7 the B operand (hi, lo).
// The caller (dispatch.cpp) has asked the OS for the tile state and probed it in a child process.
#define MB_FLASH_BF16 1
#include "flash.h"

#include "avx512.h"

namespace mb {
namespace kq {
namespace avx512 {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The tile configuration is per thread and belongs to whoever set it: the x86-64 ABI has a function
// that changes it put the caller's back (tile data is the caller's to save). Another library in the
// process (llama.cpp's AMX matmuls) configures a thread once and trusts it to stay so; a release
// here would leave its next tile load to fault on the same thread.
class TileScope {
 public:
  TileScope() {
    _tile_storeconfig(&saved_);
    TileConfig cfg;
    for (int t = 0; t < 8; t++) {
      cfg.colsb[t] = 64;
      cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
  }
  ~TileScope() {
    if (saved_.palette != 0)
      _tile_loadconfig(&saved_);
    else
      _tile_release();
  }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;

 private:
  TileConfig saved_;
};

// hi: x with its mantissa cut to bf16's 7 bits (exact as f32); lo = x - hi, exact as f32 and, for
// a value of 11 significant bits (the f16 cache, the f16-rounded query), exact in bf16 too. All
// four products hi*hi, hi*lo, lo*hi, lo*lo are summed, so for those operands the tiles compute the
// exact f32 products; a probability (24 bits) keeps 16 of them.
inline __m512 hi_part(__m512 x) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0xFFFF0000u)));
}
// The same split with hi rounded to nearest even, for the probabilities: lo's sign is then random
// and |lo| <= 2^-9 |x|, so lo's own rounding costs 2^-18 of x rather than 2^-16.
inline __m512 hi_part_rne(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xFFFF0000u)));
}
inline __m512i pack_bf16(__m512 upper16, __m512 lower16) { return (__m512i)_mm512_cvtne2ps_pbh(upper16, lower16); }

// Split row [32] f32 (two vectors: elements 0-15, 16-31) into bf16 hi and lo rows [32].
template <bool RNE = false>
inline void split32(__m512 a, __m512 b, __m512i* hi, __m512i* lo) {
  const __m512 ah = RNE ? hi_part_rne(a) : hi_part(a), bh = RNE ? hi_part_rne(b) : hi_part(b);
  *hi = pack_bf16(bh, ah);
  *lo = pack_bf16(_mm512_sub_ps(b, bh), _mm512_sub_ps(a, ah));
}

// Keys of the block as the B operand of S = Q . K^T: for K-step s (dims 32s..32s+31) and key tile
// t (keys 16t..16t+15), row u holds, for each key j, the bf16 pair of its dims 32s+2u, 32s+2u+1.
// The f16 pairs are transposed first (one 16 x 16 transpose of 32-bit units), then split: the
// split keeps element order, so hi and lo come out in the tile's layout.
//   kb [2 hi/lo][DH/32][4][16][32] bf16; keys past nk are 0
template <int DH>
inline void keys_b(const uint16_t* kh, int nk, uint16_t* kb) {
  constexpr int S = DH / 32;
  uint16_t* klo = kb + (size_t)S * 4 * 512;
  for (int s = 0; s < S; s++)
    for (int t = 0; t < 4; t++) {
      __m512 r[16];  // [key][dim pair] as 32-bit units of two f16
      for (int j = 0; j < 16; j++) {
        const int key = 16 * t + j;
        r[j] = key < nk ? _mm512_loadu_ps((const float*)(kh + (size_t)key * DH + 32 * s)) : _mm512_setzero_ps();
      }
      transpose16(r);  // -> [dim pair][key]
      uint16_t* dh = kb + ((size_t)s * 4 + t) * 512;
      uint16_t* dl = klo + ((size_t)s * 4 + t) * 512;
      for (int u = 0; u < 16; u++) {
        const __m512i x = _mm512_castps_si512(r[u]);
        __m512i hi, lo;
        split32(_mm512_cvtph_ps(_mm512_castsi512_si256(x)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1)), &hi, &lo);
        _mm512_store_si512((__m512i*)(dh + 32 * u), hi);
        _mm512_store_si512((__m512i*)(dl + 32 * u), lo);
      }
    }
}

// Values of the block as the B operand of PV = P . V: for K-step s (keys 32s..32s+31) and dim
// tile t (dims 16t..16t+15), row u holds, for each dim, the bf16 pair of keys 32s+2u, 32s+2u+1.
// The two keys' f16 are interleaved first (one permute), then split in order.
//   vb [2 hi/lo][2][DH/16][16][32] bf16; keys past nk are 0
template <int DH>
inline void values_b(const uint16_t* vh, int nk, uint16_t* vb) {
  constexpr int T = DH / 16;
  uint16_t* vlo = vb + (size_t)2 * T * 512;
  const __m512i inter = pair_interleave();
  for (int s = 0; s < 2; s++)
    for (int u = 0; u < 16; u++) {
      const int j = 32 * s + 2 * u;
      for (int t = 0; t < T; t++) {
        const __m256i a = j < nk ? _mm256_loadu_si256((const __m256i*)(vh + (size_t)j * DH + 16 * t)) : _mm256_setzero_si256();
        const __m256i b = j + 1 < nk ? _mm256_loadu_si256((const __m256i*)(vh + (size_t)(j + 1) * DH + 16 * t))
                                     : _mm256_setzero_si256();
        // [a0..a15, b0..b15] -> (a_d, b_d) pairs, still f16
        const __m512i x = _mm512_permutexvar_epi16(inter, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
        __m512i hi, lo;
        split32(_mm512_cvtph_ps(_mm512_castsi512_si256(x)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1)), &hi, &lo);
        const size_t at = (((size_t)s * T + t) * 16 + u) * 32;
        _mm512_store_si512((__m512i*)(vb + at), hi);
        _mm512_store_si512((__m512i*)(vlo + at), lo);
      }
    }
}

// Scratch, 64-byte aligned parts:
//   qh, ql [R + 16][DH] bf16   o [R + 16][DH] f32   m, l [R + 16]
//   kb [2][DH/32][4][16][32] bf16   vb [2][2][DH/16][16][32] bf16
//   pb [16][Bk] f32 scores, then p   pp [2][16][Bk] bf16 p split   pv [16][DH] f32
inline size_t amx_scratch(int R, int Dh) {
  const size_t Rp = (size_t)R + 16;
  return 16 + part(Rp * Dh) + 2 * part(Rp * Dh / 2) + 2 * part(Rp) + 2 * part((size_t)Dh * Bk) + 2 * part(16 * (size_t)Bk) +
         part(16 * (size_t)Dh);
}

// C [16][64] f32 (ldc bytes between rows) = sum over STEPS K-steps s of A_s . B_s,t for the four
// column tiles t, every product as hi*hi + hi*lo + lo*hi + lo*lo. A_s: 16 rows of 32 bf16 at
// ah/al + 32 s (lda bytes between rows); B_s,t: a 16 x 32 bf16 tile at bh/bl + boff(s, t).
template <int STEPS, class BOff>
inline void product4(const uint16_t* ah, const uint16_t* al, int lda, const uint16_t* bh, const uint16_t* bl,
                     BOff boff, float* c, int ldc) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int s = 0; s < STEPS; s++) {
    _tile_loadd(4, ah + 32 * s, lda);
    _tile_loadd(5, al + 32 * s, lda);
#define MB_AMX_COLUMN(t)                 \
  _tile_loadd(6, bh + boff(s, t), 64);   \
  _tile_loadd(7, bl + boff(s, t), 64);   \
  _tile_dpbf16ps(t, 4, 6);               \
  _tile_dpbf16ps(t, 4, 7);               \
  _tile_dpbf16ps(t, 5, 6);               \
  _tile_dpbf16ps(t, 5, 7);
    MB_AMX_COLUMN(0)
    MB_AMX_COLUMN(1)
    MB_AMX_COLUMN(2)
    MB_AMX_COLUMN(3)
#undef MB_AMX_COLUMN
  }
  _tile_stored(0, c, ldc);
  _tile_stored(1, c + 16, ldc);
  _tile_stored(2, c + 32, ldc);
  _tile_stored(3, c + 48, ldc);
}

// S [16][Bk] of the 16 query rows at qh, ql (hi and lo, [16][DH]) against the block's keys.
template <int DH>
inline void scores_amx(const uint16_t* qh, const uint16_t* ql, const uint16_t* kb, float* pb) {
  constexpr int S = DH / 32;
  product4<S>(qh, ql, DH * 2, kb, kb + (size_t)S * 4 * 512, [](int s, int t) { return ((size_t)s * 4 + t) * 512; }, pb,
              Bk * 4);
}

// PV of 16 rows: pp their p split [2][16][Bk] bf16, dims [16 d0, 16 d0 + 64) into pv [16][DH].
template <int DH>
inline void values_amx(const uint16_t* pp, const uint16_t* vb, int d0, float* pv) {
  constexpr int T = DH / 16;
  product4<2>(pp, pp + 16 * Bk, Bk * 2, vb, vb + (size_t)2 * T * 512,
              [d0](int s, int t) { return ((size_t)s * T + d0 + t) * 16 * 32; }, pv + 16 * d0, DH * 4);
}

// flash.h's softmax on rows [r0, r0 + rm) of the block, their scores in pb rows [0, rm).
inline void softmax_run(Call c, int r0, int rm, float* alpha) {
  float* const pb = c.pb;
  for (int x0 = 0; x0 < rm; x0 += 8) {
    const int k = std::min(8, rm - x0), r = r0 + x0;
    c.pb = pb + (size_t)x0 * Bk;
    // keys the run needs: up to its last row's position
    const int need = std::min(c.p0 + (r + k - 1) / c.G - c.k0 + 1, c.nk);
    const int nkv = (need + 15) / 16;
    float* a = alpha + x0;
    switch (k) {
      case 8: softmax_rows<8>(c, r, nkv, a); break;
      case 7: softmax_rows<7>(c, r, nkv, a); break;
      case 6: softmax_rows<6>(c, r, nkv, a); break;
      case 5: softmax_rows<5>(c, r, nkv, a); break;
      case 4: softmax_rows<4>(c, r, nkv, a); break;
      case 3: softmax_rows<3>(c, r, nkv, a); break;
      case 2: softmax_rows<2>(c, r, nkv, a); break;
      default: softmax_rows<1>(c, r, nkv, a); break;
    }
  }
}

template <int DH>
void flash_amx(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int p0, float scale, int window, const float* sinks, float* scratch) {
  const int R = n * G, N = p0 + n;
  const size_t Rp = (size_t)R + 16;
  float* o = (float*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);  // [Rp][DH]
  uint16_t* qh = (uint16_t*)(o + part(Rp * DH));                     // [Rp][DH]
  uint16_t* ql = (uint16_t*)((float*)qh + part(Rp * DH / 2));        // [Rp][DH]
  float* m = (float*)ql + part(Rp * DH / 2);                         // [Rp]
  float* l = m + part(Rp);                                           // [Rp]
  uint16_t* kb = (uint16_t*)(l + part(Rp));                          // [2][DH/32][4][16][32]
  uint16_t* vb = (uint16_t*)((float*)kb + part((size_t)DH * Bk));    // [2][2][DH/16][16][32]
  float* pb = (float*)vb + part((size_t)DH * Bk);                    // [16][Bk]
  uint16_t* pp = (uint16_t*)(pb + part(16 * (size_t)Bk));            // [2][16][Bk]
  float* pv = (float*)pp + part(16 * (size_t)Bk);                    // [16][DH]
  for (size_t r = 0; r < Rp; r++) {
    const int i = (int)r / G, h = (int)r % G;
    for (int d = 0; d < DH; d += 32) {
      __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
      if ((int)r < R) {  // q rounded to f16 first, as llama.cpp does for an f16 cache
        const float* src = q + (size_t)i * ldq + (size_t)h * DH + d;
        a = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT));
        b = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(src + 16), _MM_FROUND_TO_NEAREST_INT));
      }
      __m512i hi, lo;
      split32(a, b, &hi, &lo);
      _mm512_storeu_si512((__m512i*)(qh + r * DH + d), hi);
      _mm512_storeu_si512((__m512i*)(ql + r * DH + d), lo);
    }
  }
  std::memset(o, 0, sizeof(float) * Rp * DH);
  for (size_t r = 0; r < Rp; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  std::memset(pp, 0, sizeof(uint16_t) * 2 * 16 * Bk);
  const TileScope tiles;  // until the end: the caller's configuration is back when this returns
  Call c{nullptr, o, m, l, nullptr, nullptr, pb, nullptr, nullptr, G, p0, 0, 0, window, scale};
  const int k_lo = window > 0 ? std::max(0, p0 - window + 1) / Bk * Bk : 0;
  for (int k0 = k_lo; k0 < N; k0 += Bk) {
    c.k0 = k0;
    c.nk = std::min(Bk, N - k0);
    keys_b<DH>(k + (size_t)k0 * DH, c.nk, kb);
    values_b<DH>(v + (size_t)k0 * DH, c.nk, vb);
    // rows whose position is before the block see none of it, nor do rows whose window starts
    // past it (rows are in position order)
    const int r_hi = window > 0 ? std::min(R, (k0 + c.nk + window - 1 - p0) * G) : R;
    for (int r0 = std::max(0, k0 - p0) * G; r0 < r_hi; r0 += 16) {
      const int rm = std::min(16, r_hi - r0);
      scores_amx<DH>(qh + (size_t)r0 * DH, ql + (size_t)r0 * DH, kb, pb);
      alignas(64) float alpha[16];
      softmax_run(c, r0, rm, alpha);
      for (int x = 0; x < rm; x++) {  // p -> bf16 hi and lo rows (rows past rm: an earlier run's, or 0; unused)
        const float* pr = pb + (size_t)x * Bk;
        for (int j = 0; j < Bk; j += 32) {
          __m512i hi, lo;
          split32<true>(_mm512_load_ps(pr + j), _mm512_load_ps(pr + j + 16), &hi, &lo);
          _mm512_store_si512((__m512i*)(pp + (size_t)x * Bk + j), hi);
          _mm512_store_si512((__m512i*)(pp + 16 * Bk + (size_t)x * Bk + j), lo);
        }
      }
      for (int d0 = 0; d0 < DH / 16; d0 += 4) values_amx<DH>(pp, vb, d0, pv);
      for (int x = 0; x < rm; x++) {
        const __m512 a = _mm512_set1_ps(alpha[x]);
        float* orow = o + (size_t)(r0 + x) * DH;
        for (int d = 0; d < DH; d += 16)
          _mm512_store_ps(orow + d, _mm512_fmadd_ps(_mm512_load_ps(orow + d), a, _mm512_load_ps(pv + (size_t)x * DH + d)));
      }
    }
  }
  finish_rows<DH>(sinks, o, m, l, R, G, out, ldo);
}

}  // namespace

void flash_attention_amx(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n,
                         int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch) {
  switch (Dh) {
    case 64: flash_amx<64>(q, ldq, k, v, out, ldo, n, G, p0, scale, window, sinks, scratch); return;
    case 128: flash_amx<128>(q, ldq, k, v, out, ldo, n, G, p0, scale, window, sinks, scratch); return;
    default: avx2::attention(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, window, sinks, scratch); return;
  }
}
size_t flash_attention_amx_scratch_floats(int R, int Dh, int N) {
  return Dh == 64 || Dh == 128 ? amx_scratch(R, Dh) : avx2::attention_scratch_floats(R, Dh, N);
}

// A tile product in this process: 1 . 1 summed over 32 pairs must give 32. Run only in the probe's
// child (dispatch.cpp), where an illegal instruction ends that child alone.
bool amx_bf16_works() {
  const TileScope tiles;
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float cbuf[16 * 16];
  for (int i = 0; i < 16 * 32; i++) a[i] = b[i] = 0x3f80;  // bf16 1.0
  _tile_zero(0);
  _tile_loadd(4, a, 64);
  _tile_loadd(6, b, 64);
  _tile_dpbf16ps(0, 4, 6);
  _tile_stored(0, cbuf, 64);
  for (float x : cbuf)
    if (x != 32.0f) return false;
  return true;
}

}  // namespace avx512
}  // namespace kq
}  // namespace mb
