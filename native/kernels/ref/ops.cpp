// Scalar elementwise ops, written to round like ggml's CPU ops (double accumulators where ggml
// uses ggml_float, rope angles built by repeated multiplication as ggml's rope cache does).
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

void rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, bool neox) {
  const float theta_scale = std::pow(freq_base, -2.0f / (float)rope_dim);
  // one angle table per call; every head uses the same angles
  const int half = rope_dim / 2;
  float stack_cs[512];
  std::vector<float> heap_cs;
  float* cs = stack_cs;  // [half][2] cos, sin
  if (half > 256) { heap_cs.resize((size_t)half * 2); cs = heap_cs.data(); }
  float theta = (float)pos;
  for (int i = 0; i < half; i++) {
    cs[2 * i] = std::cos(theta);
    cs[2 * i + 1] = std::sin(theta);
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

}  // namespace ref
}  // namespace kq
}  // namespace mb
