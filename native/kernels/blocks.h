// Block layouts exactly as ggml writes them into GGUF files (packed, little endian), the half /
// bfloat16 conversions and the per-type facts. Private to kernels/.
//
// Dimension legend: K elements per row; QK = 32 elements per legacy block, QK_K = 256 per K-quant
// super-block (8 sub-blocks of 32 for Q4_K/Q5_K, 16 of 16 for Q6_K).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include "kernels.h"

namespace mb {
namespace kq {

constexpr int QK = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

using half = uint16_t;  // IEEE binary16 bits
using bf16 = uint16_t;  // bfloat16 bits

#pragma pack(push, 1)
struct block_q4_0 { half d; uint8_t qs[QK / 2]; };                 // x = (nibble - 8) * d
struct block_q4_1 { half d; half m; uint8_t qs[QK / 2]; };         // x = nibble * d + m
struct block_q5_0 { half d; uint8_t qh[4]; uint8_t qs[QK / 2]; };  // 5th bit of each value in qh
struct block_q5_1 { half d; half m; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct block_q8_0 { half d; int8_t qs[QK]; };
struct block_q8_1 { half d; half s; int8_t qs[QK]; };              // s = d * sum(qs)
struct block_q4_K { half d; half dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { half d; half dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; half d; };
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };  // bsums: sums of 16
// OCP microscaling FP4: 32 E2M1 values (low nibbles are elements 0..15) and one E8M0 scale 2^(e-127).
struct block_mxfp4 { uint8_t e; uint8_t qs[QK / 2]; };             // x = kvalues_mxfp4[nibble] * 2^(e-128)
#pragma pack(pop)

static_assert(sizeof(block_q4_0) == 18, "q4_0");
static_assert(sizeof(block_q4_1) == 20, "q4_1");
static_assert(sizeof(block_q5_0) == 22, "q5_0");
static_assert(sizeof(block_q5_1) == 24, "q5_1");
static_assert(sizeof(block_q8_0) == 34, "q8_0");
static_assert(sizeof(block_q8_1) == 36, "q8_1");
static_assert(sizeof(block_q4_K) == 144, "q4_K");
static_assert(sizeof(block_q5_K) == 176, "q5_K");
static_assert(sizeof(block_q6_K) == 210, "q6_K");
static_assert(sizeof(block_q8_K) == 292, "q8_K");
static_assert(sizeof(block_mxfp4) == 17, "mxfp4");

// Helpers here are static inline: an out-of-line copy emitted by the AVX2-compiled file must never
// be the one the scalar files link to (that would run AVX2 code on a CPU without it).
static inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Exact binary16 -> binary32 (subnormals, inf, nan included).
static inline float h2f(half h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    // subnormal: value = man * 2^-24
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

// binary32 -> binary16 with round-to-nearest-even, same result as F16C's vcvtps2ph (imm 0).
static inline half f2h(float f) {
  uint32_t x = f32_to_bits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (half)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
  if (ax >= 0x477ff000u) return (half)(sign | 0x7c00);  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {  // result is subnormal or zero: scale so the integer part is the mantissa
    float a = bits_to_f32(ax);
    // a * 2^24 rounded to nearest even integer; exact because a < 2^-14 keeps it below 2^10.
    float m = a * 16777216.0f;
    uint32_t r = (uint32_t)m;
    float frac = m - (float)r;
    if (frac > 0.5f || (frac == 0.5f && (r & 1))) r++;
    return (half)(sign | r);
  }
  uint32_t mant_odd = (ax >> 13) & 1;
  ax += 0xfff + mant_odd;  // round half to even on the 13 dropped bits
  return (half)(sign | (((ax >> 13) - (112u << 10)) & 0x7fff));
}

// E2M1 values doubled (so they are integers; the scale below is halved to match), as ggml has them.
alignas(16) static constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// Half the E8M0 scale, 2^(e-128) (ggml_e8m0_to_fp32_half: the two smallest are subnormals).
static inline float e8m0_half(uint8_t e) { return bits_to_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23); }

static inline float bf2f(bf16 h) { return bits_to_f32((uint32_t)h << 16); }
// Round-to-nearest-even; NaN stays a quiet NaN (ggml does the same).
static inline bf16 f2bf(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 64);
  return (bf16)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

// Q4_K / Q5_K pack eight 6-bit (scale, min) pairs into 12 bytes.
static inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The eight 6-bit scales and mins of a Q4_K/Q5_K block as 8 bytes each, with word-wide bit
// operations (same result as scale_min_k4 for j = 0..7).
static inline void unpack_scales_mins(const uint8_t* s12, uint64_t* sc, uint64_t* mn) {
  uint32_t u[3];
  std::memcpy(u, s12, 12);
  const uint32_t k3f = 0x3f3f3f3f, k0f = 0x0f0f0f0f, k03 = 0x03030303;
  const uint32_t sc_lo = u[0] & k3f, mn_lo = u[1] & k3f;
  const uint32_t sc_hi = (u[2] & k0f) | (((u[0] >> 6) & k03) << 4);
  const uint32_t mn_hi = ((u[2] >> 4) & k0f) | (((u[1] >> 6) & k03) << 4);
  *sc = (uint64_t)sc_lo | ((uint64_t)sc_hi << 32);
  *mn = (uint64_t)mn_lo | ((uint64_t)mn_hi << 32);
}
// Partner ("vec dot") type of the activations for each weight type, as ggml pairs them.
// F16/BF16 weights take activations rounded to F16/BF16, as ggml does; F32 takes F32.
GgmlType vec_dot_type(GgmlType t);
bool is_supported(GgmlType t);
size_t block_bytes(GgmlType t);
int block_elems(GgmlType t);

enum TypeSlot { S_F32, S_F16, S_BF16, S_Q4_0, S_Q4_1, S_Q5_0, S_Q5_1, S_Q8_0, S_Q4_K, S_Q5_K, S_Q6_K, S_MXFP4, S_COUNT };
int type_slot(GgmlType t);  // -1 if the type has no dot product

}  // namespace kq
}  // namespace mb
