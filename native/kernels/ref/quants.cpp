// Scalar dequantizers, activation quantizers and dot products. Integer parts are summed exactly;
// the float accumulation order follows ggml's generic code (per block: int sum * scales).
#include <cmath>
#include <stdexcept>
#include <string>

#include "ref.h"

namespace mb {
namespace kq {
namespace ref {

static void deq_q4_0(const block_q4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < QK / 2; j++) {
      y[j] = ((b[i].qs[j] & 0x0F) - 8) * d;
      y[j + QK / 2] = ((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}
static void deq_q4_1(const block_q4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    for (int j = 0; j < QK / 2; j++) {
      y[j] = (b[i].qs[j] & 0x0F) * d + m;
      y[j + QK / 2] = (b[i].qs[j] >> 4) * d + m;
    }
  }
}
static void deq_q5_0(const block_q5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    const float d = h2f(b[i].d);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < QK / 2; j++) {
      const int xh0 = ((qh >> j) << 4) & 0x10;
      const int xh1 = (qh >> (j + 12)) & 0x10;
      y[j] = (((b[i].qs[j] & 0x0F) | xh0) - 16) * d;
      y[j + QK / 2] = (((b[i].qs[j] >> 4) | xh1) - 16) * d;
    }
  }
}
static void deq_q5_1(const block_q5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < QK / 2; j++) {
      const int xh0 = ((qh >> j) << 4) & 0x10;
      const int xh1 = (qh >> (j + 12)) & 0x10;
      y[j] = ((b[i].qs[j] & 0x0F) | xh0) * d + m;
      y[j + QK / 2] = ((b[i].qs[j] >> 4) | xh1) * d + m;
    }
  }
}
static void deq_q8_0(const block_q8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < QK; j++) y[j] = b[i].qs[j] * d;
  }
}
static void deq_q8_1(const block_q8_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < QK; j++) y[j] = b[i].qs[j] * d;
  }
}
static void deq_q4_K(const block_q4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* q = b[i].qs;
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < QK_K; j += 64) {
      scale_min_k4(is + 0, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(is + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}
static void deq_q5_K(const block_q5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    int is = 0;
    uint8_t sc, m, u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
      scale_min_k4(is + 0, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(is + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}
static void deq_q6_K(const block_q6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = h2f(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int n = 0; n < QK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = (int)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = (int)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}
static void deq_q8_K(const block_q8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++)
    for (int j = 0; j < QK_K; j++) *y++ = b[i].d * b[i].qs[j];
}

static void deq_mxfp4(const block_mxfp4* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    const float d = e8m0_half(b[i].e);
    for (int j = 0; j < QK / 2; j++) {
      y[j] = kvalues_mxfp4[b[i].qs[j] & 0x0F] * d;
      y[j + QK / 2] = kvalues_mxfp4[b[i].qs[j] >> 4] * d;
    }
  }
}

void dequantize(GgmlType t, const void* x, float* y, int64_t k) {
  const int64_t nb = k / block_elems(t);
  switch (t) {
    case GgmlType::F32: std::memcpy(y, x, (size_t)k * 4); return;
    case GgmlType::F16: { auto p = (const half*)x; for (int64_t i = 0; i < k; i++) y[i] = h2f(p[i]); return; }
    case GgmlType::BF16: { auto p = (const bf16*)x; for (int64_t i = 0; i < k; i++) y[i] = bf2f(p[i]); return; }
    case GgmlType::Q4_0: deq_q4_0((const block_q4_0*)x, y, nb); return;
    case GgmlType::Q4_1: deq_q4_1((const block_q4_1*)x, y, nb); return;
    case GgmlType::Q5_0: deq_q5_0((const block_q5_0*)x, y, nb); return;
    case GgmlType::Q5_1: deq_q5_1((const block_q5_1*)x, y, nb); return;
    case GgmlType::Q8_0: deq_q8_0((const block_q8_0*)x, y, nb); return;
    case GgmlType::Q8_1: deq_q8_1((const block_q8_1*)x, y, nb); return;
    case GgmlType::Q4_K: deq_q4_K((const block_q4_K*)x, y, nb); return;
    case GgmlType::Q5_K: deq_q5_K((const block_q5_K*)x, y, nb); return;
    case GgmlType::Q6_K: deq_q6_K((const block_q6_K*)x, y, nb); return;
    case GgmlType::Q8_K: deq_q8_K((const block_q8_K*)x, y, nb); return;
    case GgmlType::MXFP4: deq_mxfp4((const block_mxfp4*)x, y, nb); return;
    default: break;
  }
  throw std::invalid_argument(std::string("kernels: no dequantizer for ggml type ") +
                              std::to_string((unsigned)t));
}

// ---- activation quantizers ----

void quantize_q8_0(const float* x, void* vy, int64_t k) {
  auto* y = (block_q8_0*)vy;
  for (int64_t i = 0; i < k / QK; i++, x += QK) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < QK; j++) y[i].qs[j] = (int8_t)std::roundf(x[j] * id);
  }
}

void quantize_q8_1(const float* x, void* vy, int64_t k) {
  auto* y = (block_q8_1*)vy;
  for (int64_t i = 0; i < k / QK; i++, x += QK) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    int sum = 0;
    for (int j = 0; j < QK; j++) {
      y[i].qs[j] = (int8_t)std::roundf(x[j] * id);
      sum += y[i].qs[j];
    }
    y[i].s = f2h(sum * d);
  }
}

// Round to nearest, ties to even, for |f| < 2^22 (the q8_K range): the magic-number trick.
static inline int nearest_int(float f) {
  float v = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

void quantize_q8_K(const float* x, void* vy, int64_t k) {
  auto* y = (block_q8_K*)vy;
  for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) { amax = ax; max = x[j]; }
    }
    if (!amax) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, QK_K);
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[j * 16 + l];
      y[i].bsums[j] = (int16_t)sum;
    }
    y[i].d = 1 / iscale;
  }
}

void to_f16(const float* x, void* vy, int64_t k) {
  auto* y = (half*)vy;
  for (int64_t i = 0; i < k; i++) y[i] = f2h(x[i]);
}
void to_bf16(const float* x, void* vy, int64_t k) {
  auto* y = (bf16*)vy;
  for (int64_t i = 0; i < k; i++) y[i] = f2bf(x[i]);
}

// ---- dot products ----

float dot_f32(int64_t k, const void* w, const void* x) {
  auto a = (const float*)w, b = (const float*)x;
  double s = 0;  // ggml sums f32 rows in double (ggml_vec_dot_f32 uses ggml_float)
  for (int64_t i = 0; i < k; i++) s += (double)a[i] * (double)b[i];
  return (float)s;
}
float dot_f16(int64_t k, const void* w, const void* x) {
  auto a = (const half*)w, b = (const half*)x;
  double s = 0;
  for (int64_t i = 0; i < k; i++) s += (double)h2f(a[i]) * (double)h2f(b[i]);
  return (float)s;
}
float dot_bf16(int64_t k, const void* w, const void* x) {
  auto a = (const bf16*)w, b = (const bf16*)x;
  double s = 0;
  for (int64_t i = 0; i < k; i++) s += (double)bf2f(a[i]) * (double)bf2f(b[i]);
  return (float)s;
}

float dot_q4_0(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q4_0*)vw;
  auto x = (const block_q8_0*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK; i++) {
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      sumi += ((w[i].qs[j] & 0x0F) - 8) * x[i].qs[j];
      sumi += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + QK / 2];
    }
    sumf += sumi * h2f(w[i].d) * h2f(x[i].d);
  }
  return sumf;
}

// ggml_vec_dot_mxfp4_q8_0: the doubled E2M1 values times q8_0, scaled by d_x * 2^(e-128).
float dot_mxfp4(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_mxfp4*)vw;
  auto x = (const block_q8_0*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK; i++) {
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      sumi += kvalues_mxfp4[w[i].qs[j] & 0x0F] * x[i].qs[j];
      sumi += kvalues_mxfp4[w[i].qs[j] >> 4] * x[i].qs[j + QK / 2];
    }
    sumf += sumi * (h2f(x[i].d) * e8m0_half(w[i].e));
  }
  return sumf;
}

float dot_q4_1(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q4_1*)vw;
  auto x = (const block_q8_1*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK; i++) {
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      sumi += (w[i].qs[j] & 0x0F) * x[i].qs[j];
      sumi += (w[i].qs[j] >> 4) * x[i].qs[j + QK / 2];
    }
    // the min term uses s = d_x * sum(q_x), so no per-element work is needed for it
    sumf += (h2f(w[i].d) * h2f(x[i].d)) * sumi + h2f(w[i].m) * h2f(x[i].s);
  }
  return sumf;
}

float dot_q5_0(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q5_0*)vw;
  auto x = (const block_q8_0*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK; i++) {
    uint32_t qh;
    std::memcpy(&qh, w[i].qh, 4);
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      const int xh0 = ((qh >> j) << 4) & 0x10;
      const int xh1 = (qh >> (j + 12)) & 0x10;
      sumi += (((w[i].qs[j] & 0x0F) | xh0) - 16) * x[i].qs[j];
      sumi += (((w[i].qs[j] >> 4) | xh1) - 16) * x[i].qs[j + QK / 2];
    }
    sumf += (h2f(w[i].d) * h2f(x[i].d)) * sumi;
  }
  return sumf;
}

float dot_q5_1(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q5_1*)vw;
  auto x = (const block_q8_1*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK; i++) {
    uint32_t qh;
    std::memcpy(&qh, w[i].qh, 4);
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      const int xh0 = ((qh >> j) << 4) & 0x10;
      const int xh1 = (qh >> (j + 12)) & 0x10;
      sumi += ((w[i].qs[j] & 0x0F) | xh0) * x[i].qs[j];
      sumi += ((w[i].qs[j] >> 4) | xh1) * x[i].qs[j + QK / 2];
    }
    sumf += (h2f(w[i].d) * h2f(x[i].d)) * sumi + h2f(w[i].m) * h2f(x[i].s);
  }
  return sumf;
}

float dot_q8_0(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q8_0*)vw;
  auto x = (const block_q8_0*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK; i++) {
    int sumi = 0;
    for (int j = 0; j < QK; j++) sumi += w[i].qs[j] * x[i].qs[j];
    sumf += sumi * (h2f(w[i].d) * h2f(x[i].d));
  }
  return sumf;
}

float dot_q4_K(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q4_K*)vw;
  auto x = (const block_q8_K*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK_K; i++) {
    const uint8_t* q = w[i].qs;
    const int8_t* a = x[i].qs;
    int sumi = 0, summ = 0;
    uint8_t sc, m;
    for (int j = 0; j < QK_K / 64; j++, q += 32, a += 64) {
      for (int h = 0; h < 2; h++) {
        scale_min_k4(2 * j + h, w[i].scales, &sc, &m);
        int s = 0;
        for (int l = 0; l < 32; l++) s += (h ? (q[l] >> 4) : (q[l] & 0xF)) * a[h * 32 + l];
        sumi += sc * s;
        const int sub = 2 * (2 * j + h);  // bsums index of this 32-element sub-block
        summ += m * (x[i].bsums[sub] + x[i].bsums[sub + 1]);
      }
    }
    const float d = h2f(w[i].d) * x[i].d;
    const float dmin = h2f(w[i].dmin) * x[i].d;
    sumf += d * sumi - dmin * summ;
  }
  return sumf;
}

float dot_q5_K(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q5_K*)vw;
  auto x = (const block_q8_K*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK_K; i++) {
    const uint8_t* ql = w[i].qs;
    const uint8_t* qh = w[i].qh;
    const int8_t* a = x[i].qs;
    int sumi = 0, summ = 0;
    uint8_t sc, m;
    for (int j = 0; j < QK_K / 64; j++, ql += 32, a += 64) {
      for (int h = 0; h < 2; h++) {
        const int sub = 2 * j + h;
        scale_min_k4(sub, w[i].scales, &sc, &m);
        int s = 0;
        for (int l = 0; l < 32; l++) {
          const int lo = h ? (ql[l] >> 4) : (ql[l] & 0xF);
          const int hi = (qh[l] >> sub) & 1;
          s += (lo | (hi << 4)) * a[h * 32 + l];
        }
        sumi += sc * s;
        summ += m * (x[i].bsums[2 * sub] + x[i].bsums[2 * sub + 1]);
      }
    }
    const float d = h2f(w[i].d) * x[i].d;
    const float dmin = h2f(w[i].dmin) * x[i].d;
    sumf += d * sumi - dmin * summ;
  }
  return sumf;
}

float dot_q6_K(int64_t k, const void* vw, const void* vx) {
  auto w = (const block_q6_K*)vw;
  auto x = (const block_q8_K*)vx;
  float sumf = 0;
  for (int64_t i = 0; i < k / QK_K; i++) {
    int8_t q[QK_K];
    const uint8_t* ql = w[i].ql;
    const uint8_t* qh = w[i].qh;
    int8_t* p = q;
    for (int n = 0; n < QK_K; n += 128, ql += 64, qh += 32, p += 128) {
      for (int l = 0; l < 32; ++l) {
        p[l + 0] = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        p[l + 32] = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        p[l + 64] = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        p[l + 96] = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
    }
    int sumi = 0;
    for (int g = 0; g < QK_K / 16; g++) {
      int s = 0;
      for (int l = 0; l < 16; l++) s += q[g * 16 + l] * x[i].qs[g * 16 + l];
      sumi += w[i].scales[g] * s;
    }
    sumf += h2f(w[i].d) * x[i].d * sumi;
  }
  return sumf;
}

}  // namespace ref
}  // namespace kq
}  // namespace mb
