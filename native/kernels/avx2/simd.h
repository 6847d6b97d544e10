// Helpers shared by the AVX2 kernel files; included only by files compiled with -mavx2.
#pragma once
#include <immintrin.h>

namespace mb {
namespace kq {
namespace avx2 {

// Sum of 8 lanes as ((0+4)+(2+6)) + ((1+5)+(3+7)).
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace avx2
}  // namespace kq
}  // namespace mb
