// Dequantization of one 32-value sub-block of a weight row, for every type the CUDA kernels read.
// The functions are __host__ __device__: the CUDA kernels call them per lane, and the CPU-side test
// (native/model/tests/harness_selftest.cpp) runs the very same code against ref::dequantize, so the block
// arithmetic is proven without a GPU.
//
// Dimension legend: a row is K values; sub-block s holds values [32 s, 32 s + 32); K-quant
// super-blocks (256 values) hold 8 sub-blocks. Byte offsets are the packed ggml layouts of
// kernels/blocks.h, read byte by byte so no load assumes an alignment the file does not give.
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define MB_HD __host__ __device__ __forceinline__
#else
#define MB_HD inline
#endif

namespace mb {
namespace cuda {

// Type ids as in GGUF (GgmlType), repeated so device code needs no host headers.
enum class QType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12,
                              Q5_K = 13, Q6_K = 14, BF16 = 30 };

MB_HD float f16_bits_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    const float v = (float)man * 5.9604644775390625e-8f;  // subnormal: man * 2^-24
    return sign ? -v : v;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

MB_HD float bf16_bits_to_float(uint16_t b) {
  const uint32_t bits = (uint32_t)b << 16;
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

MB_HD uint16_t load_u16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
MB_HD uint32_t load_u32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
MB_HD float load_f16(const uint8_t* p) { return f16_bits_to_float(load_u16(p)); }

// w[0 .. 4 n16) = the 16 n16 bytes at p, which must be 16-byte aligned (K-quant rows of Q4_K and
// f16/bf16 rows are: their block sizes are multiples of 16 and tensors start 32-byte aligned).
// On the device that is n16 vector loads instead of 16 n16 byte loads; the words stay in registers.
MB_HD void load_words16(uint32_t* w, const uint8_t* p, int n16) {
#ifdef __CUDA_ARCH__
  for (int i = 0; i < n16; i++) {
    const uint4 v = __ldg((const uint4*)p + i);
    w[4 * i] = v.x;
    w[4 * i + 1] = v.y;
    w[4 * i + 2] = v.z;
    w[4 * i + 3] = v.w;
  }
#else
  std::memcpy(w, p, (size_t)16 * n16);
#endif
}
MB_HD uint32_t byte_of(const uint32_t* w, int i) { return (w[i >> 2] >> (8 * (i & 3))) & 0xFF; }

// Bytes per block and values per block (32 for legacy quants, 256 for K-quants, 1 for floats).
MB_HD int qtype_block_bytes(QType t) {
  switch (t) {
    case QType::F32: return 4;
    case QType::F16: case QType::BF16: return 2;
    case QType::Q4_0: return 18;
    case QType::Q4_1: return 20;
    case QType::Q5_0: return 22;
    case QType::Q5_1: return 24;
    case QType::Q8_0: return 34;
    case QType::Q4_K: return 144;
    case QType::Q5_K: return 176;
    case QType::Q6_K: return 210;
  }
  return 0;
}
MB_HD int qtype_block_values(QType t) {
  switch (t) {
    case QType::F32: case QType::F16: case QType::BF16: return 1;
    case QType::Q4_K: case QType::Q5_K: case QType::Q6_K: return 256;
    default: return 32;
  }
}

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
MB_HD void k_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// out[i] = value 32 s + i of the row, i in [0, 32).
template <QType T>
MB_HD void dequant_sub32(const uint8_t* row, int64_t s, float* out) {
  if constexpr (T == QType::F32) {
    const uint8_t* p = row + s * 128;
    for (int i = 0; i < 32; i++) {
      const uint32_t u = load_u32(p + 4 * i);
#ifdef __CUDA_ARCH__
      out[i] = __uint_as_float(u);
#else
      std::memcpy(&out[i], &u, 4);
#endif
    }
  } else if constexpr (T == QType::F16 || T == QType::BF16) {
    uint32_t w[16];
    load_words16(w, row + s * 64, 4);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int i = 0; i < 16; i++) {
      const uint16_t lo = (uint16_t)(w[i] & 0xFFFF), hi = (uint16_t)(w[i] >> 16);
      if constexpr (T == QType::F16) {
        out[2 * i] = f16_bits_to_float(lo);
        out[2 * i + 1] = f16_bits_to_float(hi);
      } else {
        out[2 * i] = bf16_bits_to_float(lo);
        out[2 * i + 1] = bf16_bits_to_float(hi);
      }
    }
  } else if constexpr (T == QType::Q4_0) {
    const uint8_t* b = row + s * 18;
    const float d = load_f16(b);
    for (int j = 0; j < 16; j++) {
      out[j] = (float)((b[2 + j] & 0x0F) - 8) * d;
      out[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
    }
  } else if constexpr (T == QType::Q4_1) {
    const uint8_t* b = row + s * 20;
    const float d = load_f16(b), m = load_f16(b + 2);
    for (int j = 0; j < 16; j++) {
      out[j] = (float)(b[4 + j] & 0x0F) * d + m;
      out[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
  } else if constexpr (T == QType::Q5_0) {
    const uint8_t* b = row + s * 22;
    const float d = load_f16(b);
    const uint32_t qh = load_u32(b + 2);
    for (int j = 0; j < 16; j++) {
      const int xh0 = ((qh >> j) << 4) & 0x10;
      const int xh1 = (qh >> (j + 12)) & 0x10;
      out[j] = (float)(((b[6 + j] & 0x0F) | xh0) - 16) * d;
      out[j + 16] = (float)(((b[6 + j] >> 4) | xh1) - 16) * d;
    }
  } else if constexpr (T == QType::Q5_1) {
    const uint8_t* b = row + s * 24;
    const float d = load_f16(b), m = load_f16(b + 2);
    const uint32_t qh = load_u32(b + 4);
    for (int j = 0; j < 16; j++) {
      const int xh0 = ((qh >> j) << 4) & 0x10;
      const int xh1 = (qh >> (j + 12)) & 0x10;
      out[j] = (float)((b[8 + j] & 0x0F) | xh0) * d + m;
      out[j + 16] = (float)((b[8 + j] >> 4) | xh1) * d + m;
    }
  } else if constexpr (T == QType::Q8_0) {
    const uint8_t* b = row + s * 34;
    const float d = load_f16(b);
    for (int j = 0; j < 32; j++) out[j] = (float)(int8_t)b[2 + j] * d;
  } else if constexpr (T == QType::Q4_K) {
    const uint8_t* b = row + (s >> 3) * 144;
    const int j = (int)(s & 7);
    uint32_t head[4], qw[8];  // d, dmin, 12 scale bytes | the 32 bytes holding this sub-block's nibbles
    load_words16(head, b, 1);
    load_words16(qw, b + 16 + (j >> 1) * 32, 2);
    const float d = f16_bits_to_float((uint16_t)(head[0] & 0xFFFF)), dmin = f16_bits_to_float((uint16_t)(head[0] >> 16));
    const uint32_t* sc12 = head + 1;
    int sc, m;
    if (j < 4) {
      sc = (int)(byte_of(sc12, j) & 63);
      m = (int)(byte_of(sc12, j + 4) & 63);
    } else {
      sc = (int)((byte_of(sc12, j + 4) & 0xF) | ((byte_of(sc12, j - 4) >> 6) << 4));
      m = (int)((byte_of(sc12, j + 4) >> 4) | ((byte_of(sc12, j) >> 6) << 4));
    }
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const int shift = (j & 1) * 4;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int l = 0; l < 32; l++) out[l] = d1 * (float)((byte_of(qw, l) >> shift) & 0xF) - m1;
  } else if constexpr (T == QType::Q5_K) {
    const uint8_t* b = row + (s >> 3) * 176;
    const int j = (int)(s & 7);
    const float d = load_f16(b), dmin = load_f16(b + 2);
    int sc, m;
    k_scale_min(j, b + 4, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48 + (j >> 1) * 32;
    const int shift = (j & 1) * 4;
    for (int l = 0; l < 32; l++) {
      const int v = ((ql[l] >> shift) & 0xF) + ((qh[l] >> j) & 1 ? 16 : 0);
      out[l] = d1 * (float)v - m1;
    }
  } else if constexpr (T == QType::Q6_K) {
    const uint8_t* b = row + (s >> 3) * 210;
    const int j = (int)(s & 7);
    const int h = j >> 2, r = j & 3;  // half of the super-block, quarter within it
    const uint8_t* ql = b + 64 * h + ((r & 1) ? 32 : 0);
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = (const int8_t*)(b + 192) + 8 * h + 2 * r;
    const float d = load_f16(b + 208);
    const int lshift = (r >> 1) * 4, hshift = 2 * r;
    for (int l = 0; l < 32; l++) {
      const int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
      out[l] = d * (float)sc[l / 16] * (float)q;
    }
  }
}

// Runtime-typed wrapper (tests and cold paths).
MB_HD bool dequant_sub32_any(QType t, const uint8_t* row, int64_t s, float* out) {
  switch (t) {
    case QType::F32: dequant_sub32<QType::F32>(row, s, out); return true;
    case QType::F16: dequant_sub32<QType::F16>(row, s, out); return true;
    case QType::BF16: dequant_sub32<QType::BF16>(row, s, out); return true;
    case QType::Q4_0: dequant_sub32<QType::Q4_0>(row, s, out); return true;
    case QType::Q4_1: dequant_sub32<QType::Q4_1>(row, s, out); return true;
    case QType::Q5_0: dequant_sub32<QType::Q5_0>(row, s, out); return true;
    case QType::Q5_1: dequant_sub32<QType::Q5_1>(row, s, out); return true;
    case QType::Q8_0: dequant_sub32<QType::Q8_0>(row, s, out); return true;
    case QType::Q4_K: dequant_sub32<QType::Q4_K>(row, s, out); return true;
    case QType::Q5_K: dequant_sub32<QType::Q5_K>(row, s, out); return true;
    case QType::Q6_K: dequant_sub32<QType::Q6_K>(row, s, out); return true;
  }
  return false;
}

MB_HD int64_t qtype_row_bytes(QType t, int64_t k) {
  return k / qtype_block_values(t) * qtype_block_bytes(t);
}

}  // namespace cuda
}  // namespace mb
