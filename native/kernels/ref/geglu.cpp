// GeGLU's scalar reference (gemma3's FFN): the definition the SIMD versions are held to.
#include <cmath>

#include "ref.h"

namespace mb {
namespace kq {
namespace ref {

// ggml_gelu_f32, operation for operation: the tanh approximation of GELU.
float gelu_tanh(float x) {
  const float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

// llama.cpp's CPU GeGLU (ggml_vec_geglu_f32, built with GGML_GELU_FP16): outside (-10, 10) GELU is
// 0 or x; inside, x is rounded to f16 and GELU is read from a table of f16 values computed in f32
// (ggml_table_gelu_f16), so the same two roundings are made here.
void gelu_mul(float* gate, const float* up, int n) {
  for (int i = 0; i < n; i++) {
    const float x = gate[i];
    if (x <= -10.0f) gate[i] = 0.0f;
    else if (x >= 10.0f) gate[i] = x * up[i];
    else gate[i] = h2f(f2h(gelu_tanh(h2f(f2h(x))))) * up[i];
  }
}

}  // namespace ref
}  // namespace kq
}  // namespace mb
