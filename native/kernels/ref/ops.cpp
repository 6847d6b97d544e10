// Scalar elementwise ops, written to round like ggml's CPU ops (double accumulators where ggml
// uses ggml_float, rope angles built by repeated multiplication as ggml's rope cache does).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ref.h"

namespace mb {
namespace kq {
namespace ref {

void rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt((float)(sum / n) + eps);
  // ggml applies the weight as a separate multiply after scaling; keep both roundings
  for (int i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

void rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, bool neox,
          const float* freq_factors, float attn_factor) {
  const float theta_scale = std::pow(freq_base, -2.0f / (float)rope_dim);
  // one angle table per call; every head uses the same angles
  const int half = rope_dim / 2;
  float stack_cs[512];
  std::vector<float> heap_cs;
  float* cs = stack_cs;  // [half][2] cos, sin
  if (half > 256) { heap_cs.resize((size_t)half * 2); cs = heap_cs.data(); }
  float theta = (float)pos;
  for (int i = 0; i < half; i++) {
    // ggml divides the angle, then rounds cos and sin before scaling them (x / 1 and x * 1 are exact)
    const float angle = freq_factors ? theta / freq_factors[i] : theta;
    cs[2 * i] = std::cos(angle) * attn_factor;
    cs[2 * i + 1] = std::sin(angle) * attn_factor;
    theta *= theta_scale;
  }
  for (int h = 0; h < n_heads; h++) {
    float* v = x + (size_t)h * head_dim;
    for (int i = 0; i < half; i++) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const int a = neox ? i : 2 * i;
      const int b = neox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void silu_mul(float* gate, const float* up, int n) {
  for (int i = 0; i < n; i++) gate[i] = (gate[i] / (1.0f + std::exp(-gate[i]))) * up[i];
}

void softmax(float* x, int n) {
  float max = -INFINITY;
  for (int i = 0; i < n; i++) max = std::fmax(max, x[i]);
  double sum = 0;
  for (int i = 0; i < n; i++) {
    x[i] = std::exp(x[i] - max);
    sum += (double)x[i];
  }
  const float inv = (float)(1.0 / sum);
  for (int i = 0; i < n; i++) x[i] *= inv;
}

void add(float* out, const float* a, int n) {
  for (int i = 0; i < n; i++) out[i] += a[i];
}

// ---- attention ----
// The arithmetic of llama.cpp's non-flash attention on the CPU (ggml-cpu's AVX-512 build, which
// the oracle tests run), written one value at a time, for one query row:
//   score    the f16 GEMM of tinyBLAS (llamafile sgemm), as ggml runs it for a batch of 2+ tokens:
//            16 lanes, lane l accumulating q[d] * k[d] for d = l, l+16, ... with fma from 0, then
//            folded 16 -> 8 -> 4 -> 2 -> 1 (_mm512_reduce_add_ps); times scale (soft_max_ext)
//   softmax  ggml_vec_soft_max_f32: e = ggml_v_expf(s - max), summed 16 keys at a time (the same
//            fold), the chunk sums added in double; p = e * (float)(1 / sum)
//   output   p rounded to f16 (mul_mat's conversion of its second operand), then the f16 GEMM
//            again: per output dim, 16 chains over the keys (key j into chain j % 16), folded
//            the same way.
// Keys past the row's position, and before its window, contribute nothing (ggml's mask makes them
// exact zeros). A sink (ggml_soft_max_ext's sinks) joins the max before the exps and adds
// expf(sink - max) to the double sum after them; it has no value.

// _mm512_reduce_add_ps's order
static float fold16(const float* x) {
  float t3[8], t6[4];
  for (int l = 0; l < 8; l++) t3[l] = x[l + 8] + x[l];
  for (int l = 0; l < 4; l++) t6[l] = t3[l + 4] + t3[l];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

// ggml_v_expf of the AVX-512 build for x <= 0 (the only arguments a softmax has); it returns j * 2^n
// through scalef, exact for normal results. Results below 2^-126 are taken as 0 here (ggml keeps
// the subnormal): such an e adds nothing to a sum >= 1 and rounds to 0 as an f16 probability.
float ggml_expf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (!(n >= -126.0f)) return 0.0f;
  return j * std::ldexp(1.0f, (int)n);
}

void attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int Dh, int p0, float scale, int window, const float* sinks, float* scratch) {
  float* qh = scratch;       // [Dh] the query row rounded to f16
  float* p = scratch + Dh;   // [p0 + n] scores, then e, then f16 probabilities
  for (int i = 0; i < n; i++) {
    const int nk = p0 + i + 1;
    const int lo = window > 0 ? std::max(0, nk - window) : 0;  // the row's first key
    for (int h = 0; h < G; h++) {
      const float* qr = q + (size_t)i * ldq + (size_t)h * Dh;
      for (int d = 0; d < Dh; d++) qh[d] = h2f(f2h(qr[d]));
      float max = -INFINITY;
      for (int j = lo; j < nk; j++) {
        const uint16_t* kj = k + (size_t)j * Dh;
        float lane[16] = {0};
        int d0 = 0;
        for (; d0 + 16 <= Dh; d0 += 16)
          for (int l = 0; l < 16; l++) lane[l] = std::fma(qh[d0 + l], h2f(kj[d0 + l]), lane[l]);
        for (int l = 0; d0 + l < Dh; l++) lane[l] = std::fma(qh[d0 + l], h2f(kj[d0 + l]), lane[l]);  // Dh % 16 == 8
        p[j] = fold16(lane) * scale;
        max = std::fmax(max, p[j]);
      }
      if (sinks) max = std::fmax(max, sinks[h]);
      double sum = 0;
      for (int j0 = lo / 16 * 16; j0 < nk; j0 += 16) {  // keys before the window: zeros in their chunk
        float chunk[16] = {0};
        for (int j = std::max(j0, lo); j < j0 + 16 && j < nk; j++) chunk[j - j0] = p[j] = ggml_expf(p[j] - max);
        sum += (double)fold16(chunk);
      }
      if (sinks) sum += (double)std::exp(sinks[h] - max);
      const float inv = (float)(1.0 / sum);
      for (int j = lo; j < nk; j++) p[j] = h2f(f2h(p[j] * inv));
      float* orow = out + (size_t)i * ldo + (size_t)h * Dh;
      for (int d = 0; d < Dh; d++) {
        float chain[16] = {0};
        for (int j = lo; j < nk; j++) chain[j % 16] = std::fma(p[j], h2f(v[(size_t)j * Dh + d]), chain[j % 16]);
        orow[d] = fold16(chain);
      }
    }
  }
}

size_t attention_scratch_floats(int, int Dh, int N) { return (size_t)Dh + (size_t)N; }

// ---- flash attention ----
// One pass over the keys in blocks of kFlashKeyBlock from key 0, with a running max m, sum l and
// output o per row (online softmax), all in f32:
//   s_j = scale * (f16(q) . k_j)    (an fma chain over the dims in order)
//   m' = max(m, max_j s_j);  a = exp(m - m');  p_j = exp(s_j - m')
//   l = l * a + sum_j p_j;   o = o * a + sum_j p_j * v_j;   m = m'
// and out = o * (1 / l) after the row's last block. Blocks wholly before the row's window are
// skipped, keys before it in a block masked (p = 0). A sink s joins as llama.cpp's flash does after
// the last block: if s > m, o *= exp(m - s) and l = l * exp(m - s) + 1, else l += exp(s - m).
// The sums within a block are in key order here;
// faster versions sum in their own fixed order (and may round p and v to bf16), so they are held
// to a tolerance, not to these bits.
void flash_attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n,
                     int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch) {
  float* qh = scratch;            // [Dh] the query row rounded to f16
  float* o = scratch + Dh;        // [Dh] running output
  float* s = scratch + 2 * Dh;    // [kFlashKeyBlock] one block's scores, then p
  for (int i = 0; i < n; i++) {
    const int pos = p0 + i;
    const int lo = window > 0 ? std::max(0, pos + 1 - window) : 0;  // the row's first key
    for (int h = 0; h < G; h++) {
      const float* qr = q + (size_t)i * ldq + (size_t)h * Dh;
      for (int d = 0; d < Dh; d++) {
        qh[d] = h2f(f2h(qr[d]));
        o[d] = 0.0f;
      }
      float m = -INFINITY, l = 0.0f;
      for (int k0 = lo / kFlashKeyBlock * kFlashKeyBlock; k0 <= pos; k0 += kFlashKeyBlock) {
        const int nk = std::min(kFlashKeyBlock, pos + 1 - k0);
        float mb = m;
        for (int j = 0; j < nk; j++) {
          const uint16_t* kj = k + (size_t)(k0 + j) * Dh;
          float acc = 0.0f;
          for (int d = 0; d < Dh; d++) acc = std::fma(qh[d], h2f(kj[d]), acc);
          s[j] = k0 + j < lo ? -INFINITY : acc * scale;
          mb = std::fmax(mb, s[j]);
        }
        const float a = std::exp(m - mb);  // 0 at the first block (m = -inf)
        float sum = 0.0f;
        for (int j = 0; j < nk; j++) sum += (s[j] = std::exp(s[j] - mb));
        l = l * a + sum;
        for (int d = 0; d < Dh; d++) {
          float od = o[d] * a;
          for (int j = 0; j < nk; j++) od = std::fma(s[j], h2f(v[(size_t)(k0 + j) * Dh + d]), od);
          o[d] = od;
        }
        m = mb;
      }
      if (sinks) {
        const float sink = sinks[h];
        if (sink > m) {
          const float ms = std::exp(m - sink);
          for (int d = 0; d < Dh; d++) o[d] *= ms;
          l = l * ms + 1.0f;
        } else {
          l += std::exp(sink - m);
        }
      }
      float* orow = out + (size_t)i * ldo + (size_t)h * Dh;
      const float inv = 1.0f / l;
      for (int d = 0; d < Dh; d++) orow[d] = o[d] * inv;
    }
  }
}

size_t flash_attention_scratch_floats(int, int Dh, int) { return 2 * (size_t)Dh + kFlashKeyBlock; }

}  // namespace ref
}  // namespace kq
}  // namespace mb
