// AVX-512 VNNI GEMM for groups of up to 8 tokens, and of 4 (gemm4_strip, below), for the legacy types (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0: the default model, and most tensors of a 576-wide model quantized "Q4_K_M", which falls back
// to Q5_0) and MXFP4 (gpt-oss's experts, same 32-element blocks). Compiled with
// -mavx512f/bw/dq/vl/vnni (and AVX2, FMA, F16C); dispatch.cpp uses it only after checking the CPU.
// Q4_K and Q6_K have none: their one-row tiles (kquant.cpp) beat an 8-token group for every T
// below Gemm16's 16 tokens (1.5B's shapes, 2 threads, --cold, best ms, tiles / group: 0.62-1.05,
// the output matrix Q6_K 1536->151936 at T = 12 26.7 vs 40.3 ms); their few-token groups are
// kquant_group.cpp's, in another layout (tokens in the lanes, no activation load per row).
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
// The arithmetic (legacy types) is ref/'s order of work: an exact integer sum per (row, token,
// block), vpdpbusd chains over the block's 8 groups, then per lane
//   acc = fma(d_w * d_x, float(sum), acc)      msum = fma(m_w, s_x, msum)   (types with a min)
// block after block, and acc + msum at the end. The table's tile and dot kernels (vnni_tile
// below) do the same per-lane operations in the same order, so a token gives the same bits alone
// or in a batch. (Not the AVX2 set's bits: that one keeps 8 float lanes per pair, one per group,
// which costs a convert and an fma per group instead of per block.) vpdpbusd multiplies unsigned
// by signed bytes, so signed weights (Q4_0: nibble - 8, Q5_0: value - 16, Q8_0, MXFP4: -12 .. 12)
// enter with +8 / +16 / +128 / +12 and the sum starts at -C times the sum of the block's
// activations, which the pack step computes once per group.
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "avx512.h"

namespace mb {
namespace kq {
namespace avx512 {
namespace {

// Bytes of one packed block of 8 tokens: d[16] and s[16] floats (each token twice), q[8][16]
// dwords, then c[16] int32 sum starts when the weight type is signed.
constexpr size_t kPackHead = 2 * 64;
constexpr size_t kPackQ = 8 * 64;
template <int C> constexpr size_t packed_block_bytes() { return kPackHead + kPackQ + (C ? 64 : 0); }

// One q8_0 / q8_1 activation block as the packers lay it out: d, s (q8_1), its 8 dwords of
// values, and the sum start -C * sum(q) for weights whose unsigned form is value + C. Zero for a
// token past the group's last.
struct XBlock {
  float d = 0, s = 0;
  int32_t q[8] = {0};
  int32_t c = 0;
};
template <bool Q81, int C> inline XBlock read_block(const uint8_t* b) {
  XBlock x;
  half h;
  std::memcpy(&h, b, 2);
  x.d = _cvtsh_ss(h);
  if (Q81) {
    std::memcpy(&h, b + 2, 2);
    x.s = _cvtsh_ss(h);
  }
  const int8_t* qs = (const int8_t*)(b + (Q81 ? 4 : 2));
  std::memcpy(x.q, qs, 32);
  if (C)
    for (int e = 0; e < QK; e++) x.c -= C * qs[e];
  return x;
}

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
      XBlock xb;
      if (t < nt) xb = read_block<Q81, C>(xq + t * xs + i * xbb);
      d[2 * t] = d[2 * t + 1] = xb.d;
      s[2 * t] = s[2 * t + 1] = xb.s;
      for (int j = 0; j < 8; j++) q[j * 16 + 2 * t] = q[j * 16 + 2 * t + 1] = xb.q[j];
      if (C) c[2 * t] = c[2 * t + 1] = xb.c;
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
  static __m256i row(const W& b) { return q4_values(b.qs); }
  static void values(const W& b0, const W& b1, int64_t* wq) { interleave_pair(q4_values(b0.qs), q4_values(b1.qs), wq); }
};
template <> struct Pair<GgmlType::Q4_1> {
  using W = block_q4_1; static constexpr bool kMin = true; static constexpr int C = 0;
  static __m256i row(const W& b) { return q4_values(b.qs); }
  static void values(const W& b0, const W& b1, int64_t* wq) { interleave_pair(q4_values(b0.qs), q4_values(b1.qs), wq); }
};
template <> struct Pair<GgmlType::Q5_0> {
  using W = block_q5_0; static constexpr bool kMin = false; static constexpr int C = 16;
  static __m256i row(const W& b) { return q5_values(b.qs, b.qh); }
  static void values(const W& b0, const W& b1, int64_t* wq) {
    interleave_pair(q5_values(b0.qs, b0.qh), q5_values(b1.qs, b1.qh), wq);
  }
};
template <> struct Pair<GgmlType::Q5_1> {
  using W = block_q5_1; static constexpr bool kMin = true; static constexpr int C = 0;
  static __m256i row(const W& b) { return q5_values(b.qs, b.qh); }
  static void values(const W& b0, const W& b1, int64_t* wq) {
    interleave_pair(q5_values(b0.qs, b0.qh), q5_values(b1.qs, b1.qh), wq);
  }
};
template <> struct Pair<GgmlType::Q8_0> {
  using W = block_q8_0; static constexpr bool kMin = false; static constexpr int C = 128;
  static __m256i row(const W& b) {
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b.qs), _mm256_set1_epi8((char)0x80));
  }
  static void values(const W& b0, const W& b1, int64_t* wq) { interleave_pair(row(b0), row(b1), wq); }
};

// MXFP4: the doubled E2M1 values (-12 .. 12) via a byte shuffle of the nibbles, + 12.
template <> struct Pair<GgmlType::MXFP4> {
  using W = block_mxfp4; static constexpr bool kMin = false; static constexpr int C = 12;
  static __m256i unsigned_values(const W& b) {
    const __m256i table = _mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_mxfp4)),
                                          _mm256_set1_epi8(C));
    return _mm256_shuffle_epi8(table, q4_values(b.qs));
  }
  static __m256i row(const W& b) { return unsigned_values(b); }
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

// One row pair (rows r, r + 1; nr == 1 repeats row r and stores one) x NG packed groups (all full
// but the last, of nt tokens; gpb bytes apart): each block of the pair is unpacked once for the
// NG groups. Per group and block the 8 vpdpbusd run as two chains (even and odd groups j; an
// integer sum in any order is the same) so that NG = 1 is not bound by their latency. (Two pairs
// per pass, sharing each load of activations, measured no faster: vpdpbusd's port is the limit.)
template <GgmlType WT, int NG>
void gemm_pairs(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, size_t gpb, int nt, float* y,
                size_t ldy) {
  using P = Pair<WT>;
  using W = typename P::W;
  constexpr size_t bb = packed_block_bytes<P::C>();
  const int64_t nb = k / QK;
  const W* row0 = (const W*)w;
  const W* row1 = (const W*)(w + (nr > 1 ? ws : 0));
  __m512 acc[NG], msum[NG];
#pragma GCC unroll 4
  for (int g = 0; g < NG; g++) acc[g] = msum[g] = _mm512_setzero_ps();
  alignas(64) int64_t wq[8];
  for (int64_t i = 0; i < nb; i++) {
    // the same blocks two 4-row strips ahead (gemm4_strip's distance)
    _mm_prefetch((const char*)&row0[i] + 8 * ws, _MM_HINT_T0);
    _mm_prefetch((const char*)&row1[i] + 8 * ws, _MM_HINT_T0);
    P::values(row0[i], row1[i], wq);
    const __m512 wd = pair_scales<WT>(row0[i], row1[i]);
    __m512 wm = _mm512_setzero_ps();
    if constexpr (P::kMin) wm = halves2(&row0[i], &row1[i], 2);
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) {
      const uint8_t* pk = packed + g * gpb + i * bb;
      const __m512i* q = (const __m512i*)(pk + kPackHead);
      __m512i even = P::C ? _mm512_loadu_si512((const __m512i*)(pk + kPackHead + kPackQ)) : _mm512_setzero_si512();
      __m512i odd = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int j = 0; j < 8; j += 2) {
        even = _mm512_dpbusd_epi32(even, broadcast_q(&wq[j]), _mm512_loadu_si512(q + j));
        odd = _mm512_dpbusd_epi32(odd, broadcast_q(&wq[j + 1]), _mm512_loadu_si512(q + j + 1));
      }
      const __m512 scale = _mm512_mul_ps(wd, _mm512_loadu_ps((const float*)pk));
      acc[g] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)), acc[g]);
      if constexpr (P::kMin) msum[g] = _mm512_fmadd_ps(wm, _mm512_loadu_ps((const float*)pk + 16), msum[g]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < NG; g++)
    store_pair(P::kMin ? _mm512_add_ps(acc[g], msum[g]) : acc[g], nr, g + 1 < NG ? 8 : nt, y + (size_t)g * 8 * ldy,
               ldy);
}
// Gemm8::run: nr <= 4 rows as pairs, one group
template <GgmlType WT>
void run_one(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y, size_t ldy) {
  for (int r = 0; r < nr; r += 2) gemm_pairs<WT, 1>(k, w + r * ws, ws, nr - r, packed, 0, nt, y + r, ldy);
}
// Gemm8::run_n: nr <= 4 rows as pairs, 1 .. kGemm8MaxGroups groups
template <GgmlType WT>
void run_n(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, size_t gpb, int ng, int nt, float* y,
           size_t ldy) {
  static_assert(kGemm8MaxGroups == 4, "one case per group count");
  for (int r = 0; r < nr; r += 2) {
    const uint8_t* wr = w + r * ws;
    switch (ng) {
      case 4: gemm_pairs<WT, 4>(k, wr, ws, nr - r, packed, gpb, nt, y + r, ldy); break;
      case 3: gemm_pairs<WT, 3>(k, wr, ws, nr - r, packed, gpb, nt, y + r, ldy); break;
      case 2: gemm_pairs<WT, 2>(k, wr, ws, nr - r, packed, gpb, nt, y + r, ldy); break;
      default: gemm_pairs<WT, 1>(k, wr, ws, nr - r, packed, gpb, nt, y + r, ldy); break;
    }
  }
}

// The table's tile and dot for these types: NR <= 4 weight rows x NT <= 4 tokens of q8_0 / q8_1
// rows, with gemm_pairs' per-lane operations in its order (lane r of a 4-float vector = row r):
// each (row, token) block sum is vpdpbusd over the block's 8 lanes, folded to one integer (exact),
// then scale = d_w * d_x, acc = fma(scale, float(sum), acc), msum = fma(m_w, s_x, msum).
constexpr int kPrefetchBlocks = 8;
// Up to 4 rows' weight scales as floats, from their f16 d (16 bits a row) or MXFP4's E8M0 byte
// (8 bits a row) packed in dbits.
template <GgmlType WT> inline __m128 row_scales(uint64_t dbits) {
  if constexpr (WT == GgmlType::MXFP4) {
    // e8m0_half on 4 lanes: 2^(e-1) as float bits, 0x00200000 << e for e < 2 (subnormal)
    const __m128i e = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)(uint32_t)dbits));  // the byte at 0 is e
    const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
    const __m128i tiny = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
    return _mm_castsi128_ps(_mm_blendv_epi8(normal, tiny, _mm_cmpgt_epi32(_mm_set1_epi32(2), e)));
  } else {
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)dbits));
  }
}

template <GgmlType WT, int NR, int NT>
void vnni_kernel(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, size_t ldy) {
  using P = Pair<WT>;
  using W = typename P::W;
  constexpr bool Q81 = P::kMin;  // the types with a min pair with q8_1 (s = d * sum of q)
  using X = std::conditional_t<Q81, block_q8_1, block_q8_0>;
  const int64_t nb = k / QK;
  __m128 acc[NT], msum[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; t++) acc[t] = msum[t] = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    __m256i wv[NR];
    // the rows' scales (and mins) gathered in a register: four scalar stores read back as one
    // vector would stall on store forwarding every block
    uint64_t dbits = 0, mbits = 0;
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
      const W& b = ((const W*)(w + r * ws))[i];
      // a decode step streams the weights from memory, and this loop's long chain per block keeps
      // too few loads in flight for the hardware prefetcher alone (measured: half AVX2's rate on
      // the 49152-row output matrix without it); prefetching never faults past the row's end.
      // One token (decode): the same block two strips of NR rows ahead, as the AVX2 kernel does;
      // a few blocks ahead in the same row is too close to hide memory's latency (measured, Q8_0
      // output matrix 896 x 151936 from memory, one thread: a third of AVX2's rate)
      if constexpr (NT == 1) _mm_prefetch((const char*)&b + 2 * NR * ws, _MM_HINT_T0);
      else _mm_prefetch((const char*)(&b + kPrefetchBlocks), _MM_HINT_T0);
      wv[r] = P::row(b);
      uint16_t h;
      std::memcpy(&h, &b, 2);
      // MXFP4: its E8M0 byte, packed a byte per row; otherwise the f16 d
      dbits |= WT == GgmlType::MXFP4 ? (uint64_t)(h & 0xff) << (8 * r) : (uint64_t)h << (16 * r);
      if constexpr (P::kMin) {
        std::memcpy(&h, (const uint8_t*)&b + 2, 2);
        mbits |= (uint64_t)h << (16 * r);
      }
    }
    const __m128 vwd = row_scales<WT>(dbits);
    const __m128 vwm = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)mbits));
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
      const X& xb = ((const X*)(x + t * xs))[i];
      const __m256i xv = _mm256_loadu_si256((const __m256i*)xb.qs);
      __m256i start = _mm256_setzero_si256();
      if constexpr (P::C != 0)
        start = _mm256_sub_epi32(start, _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)P::C), xv));
      __m256i s[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) s[r] = r < NR ? _mm256_dpbusd_epi32(start, wv[r], xv) : _mm256_setzero_si256();
      // lane r of sum = the 8 lanes of s[r] added (exact): two rounds of unpack + add, then halves
      const __m256i t01 = _mm256_add_epi32(_mm256_unpacklo_epi32(s[0], s[1]), _mm256_unpackhi_epi32(s[0], s[1]));
      const __m256i t23 = _mm256_add_epi32(_mm256_unpacklo_epi32(s[2], s[3]), _mm256_unpackhi_epi32(s[2], s[3]));
      const __m256i h = _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
      const __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      half hd;
      std::memcpy(&hd, &xb.d, 2);
      const __m128 scale = _mm_mul_ps(vwd, _mm_set1_ps(_cvtsh_ss(hd)));
      acc[t] = _mm_fmadd_ps(scale, _mm_cvtepi32_ps(sum), acc[t]);
      if constexpr (P::kMin) {
        half hs;
        std::memcpy(&hs, &xb.s, 2);
        msum[t] = _mm_fmadd_ps(vwm, _mm_set1_ps(_cvtsh_ss(hs)), msum[t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; t++) {
    alignas(16) float out[4];
    _mm_store_ps(out, P::kMin ? _mm_add_ps(acc[t], msum[t]) : acc[t]);
    for (int r = 0; r < NR; r++) y[t * ldy + r] = out[r];
  }
}

template <GgmlType WT, int NR>
void vnni_rows(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int nt, float* y, size_t ldy) {
  switch (nt) {
    case 4: vnni_kernel<WT, NR, 4>(k, w, ws, x, xs, y, ldy); break;
    case 3: vnni_kernel<WT, NR, 3>(k, w, ws, x, xs, y, ldy); break;
    case 2: vnni_kernel<WT, NR, 2>(k, w, ws, x, xs, y, ldy); break;
    default: vnni_kernel<WT, NR, 1>(k, w, ws, x, xs, y, ldy); break;
  }
}

template <int C> size_t packed_bytes(int64_t k) { return (size_t)(k / QK) * packed_block_bytes<C>(); }

// Groups of 4 tokens (T = 2 .. 7: a few streams, speculative verification rows), where an 8-token
// group would leave half its lanes idle and the tiles repeat their per-token folding: lane 4r + t
// of a zmm is (row r of a 4-row strip, token t), so one vpdpbusd computes group j's integer sum
// for all 16 (row, token) pairs and no fold is needed. Token t's dword j comes packed as
// [x0j x1j x2j x3j] (a 16-byte broadcast load); row r's dword j is picked from the strip's four
// rows by one vpermt2d per group j, shared by every packed group of the call. Per lane the
// arithmetic is vnni_kernel's (exact block sum, then acc = fma(d_w * d_x, float(sum), acc),
// msum = fma(m_w, s_x, msum)), so the bits are the tiles'.
// Packed block of 4 tokens: q[8][4] dwords, then d[4] and s[4] floats and c[4] int32 sum starts.
constexpr size_t kPack4Q = 8 * 16;
constexpr size_t kPack4Block = kPack4Q + 3 * 16;
size_t packed4_bytes(int64_t k) { return (size_t)(k / QK) * kPack4Block; }

template <bool Q81, int C>
void pack4(const uint8_t* xq, size_t xs, int nt, int64_t k, uint8_t* out) {
  const int64_t nb = k / QK;
  const size_t xbb = Q81 ? sizeof(block_q8_1) : sizeof(block_q8_0);
  for (int64_t i = 0; i < nb; i++) {
    uint8_t* o = out + i * kPack4Block;
    int32_t* q = (int32_t*)o;
    float* d = (float*)(o + kPack4Q);
    float* s = d + 4;
    int32_t* c = (int32_t*)(s + 4);
    for (int t = 0; t < 4; t++) {
      XBlock xb;
      if (t < nt) xb = read_block<Q81, C>(xq + t * xs + i * xbb);
      for (int j = 0; j < 8; j++) q[j * 4 + t] = xb.q[j];
      d[t] = xb.d;
      s[t] = xb.s;
      c[t] = xb.c;
    }
  }
}

// The four rows' f16 d (or MXFP4's E8M0 byte) and min as [v0 v1 v2 v3], as vnni_kernel makes them.
template <GgmlType WT, class W>
inline void strip_scales(const W* const* b, int64_t i, __m128* vwd, __m128* vwm) {
  uint64_t dbits = 0, mbits = 0;
  for (int r = 0; r < 4; r++) {
    uint16_t h;
    std::memcpy(&h, &b[r][i], 2);
    dbits |= WT == GgmlType::MXFP4 ? (uint64_t)(h & 0xff) << (8 * r) : (uint64_t)h << (16 * r);
    if constexpr (Pair<WT>::kMin) {
      std::memcpy(&h, (const uint8_t*)&b[r][i] + 2, 2);
      mbits |= (uint64_t)h << (16 * r);
    }
  }
  *vwd = row_scales<WT>(dbits);
  *vwm = Pair<WT>::kMin ? _mm_cvtph_ps(_mm_cvtsi64_si128((long long)mbits)) : _mm_setzero_ps();
}

template <GgmlType WT, int NG>
void gemm4_strip(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, size_t gpb, int nt, float* y,
                 size_t ldy) {
  using P = Pair<WT>;
  using W = typename P::W;
  const int64_t nb = k / QK;
  const W* rows[4];
  for (int r = 0; r < 4; r++) rows[r] = (const W*)(w + (size_t)(r < nr ? r : 0) * ws);  // rows past nr: row 0, unstored
  const __m512i lane_row = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i pick0 = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24);
  __m512 acc[NG], msum[NG];
#pragma GCC unroll 4
  for (int g = 0; g < NG; g++) acc[g] = msum[g] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
#pragma GCC unroll 4
    // the same block two strips ahead, as the one-token tiles do: a matrix streamed from memory
    // needs that distance, and the strip's few tokens do not hide a nearer one
    for (int r = 0; r < 4; r++) _mm_prefetch((const char*)&rows[r][i] + 2 * 4 * ws, _MM_HINT_T0);
    const __m512i A = _mm512_inserti64x4(_mm512_castsi256_si512(P::row(rows[0][i])), P::row(rows[1][i]), 1);
    const __m512i B = _mm512_inserti64x4(_mm512_castsi256_si512(P::row(rows[2][i])), P::row(rows[3][i]), 1);
    __m512i wj[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) wj[j] = _mm512_permutex2var_epi32(A, _mm512_add_epi32(pick0, _mm512_set1_epi32(j)), B);
    __m128 vwd, vwm;
    strip_scales<WT>(rows, i, &vwd, &vwm);
    const __m512 wd = _mm512_permutexvar_ps(lane_row, _mm512_castps128_ps512(vwd));
    const __m512 wm = P::kMin ? _mm512_permutexvar_ps(lane_row, _mm512_castps128_ps512(vwm)) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) {
      const uint8_t* pk = packed + g * gpb + i * kPack4Block;
      const float* pd = (const float*)(pk + kPack4Q);
      __m512i even = P::C ? _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(pd + 8))) : _mm512_setzero_si512();
      __m512i odd = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int j = 0; j < 8; j += 2) {
        even = _mm512_dpbusd_epi32(even, wj[j], _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(pk + 16 * j))));
        odd = _mm512_dpbusd_epi32(odd, wj[j + 1], _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(pk + 16 * j + 16))));
      }
      const __m512 scale = _mm512_mul_ps(wd, _mm512_broadcast_f32x4(_mm_loadu_ps(pd)));
      acc[g] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)), acc[g]);
      if constexpr (P::kMin) msum[g] = _mm512_fmadd_ps(wm, _mm512_broadcast_f32x4(_mm_loadu_ps(pd + 4)), msum[g]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < NG; g++) {
    alignas(64) float out[16];
    _mm512_store_ps(out, P::kMin ? _mm512_add_ps(acc[g], msum[g]) : acc[g]);
    const int ntg = g + 1 < NG ? 4 : nt;
    for (int t = 0; t < ntg; t++)
      for (int r = 0; r < nr; r++) y[(size_t)(4 * g + t) * ldy + r] = out[4 * r + t];
  }
}
template <GgmlType WT>
void run4_one(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, int nt, float* y, size_t ldy) {
  gemm4_strip<WT, 1>(k, w, ws, nr, packed, 0, nt, y, ldy);
}
template <GgmlType WT>
void run4_n(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* packed, size_t gpb, int ng, int nt, float* y,
            size_t ldy) {
  static_assert(kGemm8MaxGroups == 4, "one case per group count");
  switch (ng) {
    case 4: gemm4_strip<WT, 4>(k, w, ws, nr, packed, gpb, nt, y, ldy); break;
    case 3: gemm4_strip<WT, 3>(k, w, ws, nr, packed, gpb, nt, y, ldy); break;
    case 2: gemm4_strip<WT, 2>(k, w, ws, nr, packed, gpb, nt, y, ldy); break;
    default: gemm4_strip<WT, 1>(k, w, ws, nr, packed, gpb, nt, y, ldy); break;
  }
}

}  // namespace

extern const Gemm8 gemm8_q4_0 = {packed_bytes<8>, pack8<false, 8>, run_one<GgmlType::Q4_0>, run_n<GgmlType::Q4_0>};
extern const Gemm8 gemm8_q4_1 = {packed_bytes<0>, pack8<true, 0>, run_one<GgmlType::Q4_1>, run_n<GgmlType::Q4_1>};
extern const Gemm8 gemm8_q5_0 = {packed_bytes<16>, pack8<false, 16>, run_one<GgmlType::Q5_0>, run_n<GgmlType::Q5_0>};
extern const Gemm8 gemm8_q5_1 = {packed_bytes<0>, pack8<true, 0>, run_one<GgmlType::Q5_1>, run_n<GgmlType::Q5_1>};
extern const Gemm8 gemm8_q8_0 = {packed_bytes<128>, pack8<false, 128>, run_one<GgmlType::Q8_0>, run_n<GgmlType::Q8_0>};
extern const Gemm8 gemm8_mxfp4 = {packed_bytes<12>, pack8<false, 12>, run_one<GgmlType::MXFP4>, run_n<GgmlType::MXFP4>};
// a short last group of one token still goes through run: T = 5 is then one pass over the weights
extern const Gemm8 gemm4_q4_0 = {packed4_bytes, pack4<false, 8>, run4_one<GgmlType::Q4_0>, run4_n<GgmlType::Q4_0>, 1};
extern const Gemm8 gemm4_q4_1 = {packed4_bytes, pack4<true, 0>, run4_one<GgmlType::Q4_1>, run4_n<GgmlType::Q4_1>, 1};
extern const Gemm8 gemm4_q5_0 = {packed4_bytes, pack4<false, 16>, run4_one<GgmlType::Q5_0>, run4_n<GgmlType::Q5_0>, 1};
extern const Gemm8 gemm4_q5_1 = {packed4_bytes, pack4<true, 0>, run4_one<GgmlType::Q5_1>, run4_n<GgmlType::Q5_1>, 1};
extern const Gemm8 gemm4_q8_0 = {packed4_bytes, pack4<false, 128>, run4_one<GgmlType::Q8_0>, run4_n<GgmlType::Q8_0>, 1};
extern const Gemm8 gemm4_mxfp4 = {packed4_bytes, pack4<false, 12>, run4_one<GgmlType::MXFP4>, run4_n<GgmlType::MXFP4>, 1};

template <GgmlType WT>
void vnni_tile(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy) {
  switch (nr) {
    case 4: vnni_rows<WT, 4>(k, w, ws, x, xs, nt, y, ldy); return;
    case 3: vnni_rows<WT, 3>(k, w, ws, x, xs, nt, y, ldy); return;
    case 2: vnni_rows<WT, 2>(k, w, ws, x, xs, nt, y, ldy); return;
    default: vnni_rows<WT, 1>(k, w, ws, x, xs, nt, y, ldy); return;
  }
}
template <GgmlType WT> float vnni_dot(int64_t k, const void* w, const void* x) {
  float y;
  vnni_kernel<WT, 1, 1>(k, (const uint8_t*)w, 0, (const uint8_t*)x, 0, &y, 1);
  return y;
}
#define MB_VNNI_LEGACY(T)                                                                                          \
  template void vnni_tile<GgmlType::T>(int64_t, const uint8_t*, size_t, int, const uint8_t*, size_t, int, float*, \
                                       size_t);                                                                   \
  template float vnni_dot<GgmlType::T>(int64_t, const void*, const void*);
MB_VNNI_LEGACY(Q4_0)
MB_VNNI_LEGACY(Q4_1)
MB_VNNI_LEGACY(Q5_0)
MB_VNNI_LEGACY(Q5_1)
MB_VNNI_LEGACY(Q8_0)
MB_VNNI_LEGACY(MXFP4)
#undef MB_VNNI_LEGACY

}  // namespace avx512
}  // namespace kq
}  // namespace mb
