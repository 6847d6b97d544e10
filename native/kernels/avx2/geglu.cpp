// GeGLU, 8 lanes: F16C rounds x to f16 and a gather reads GELU from a table of every f16 input's
// value, built once from the scalar reference, so the result is ref::gelu_mul's bit for bit.
#include <immintrin.h>

#include <vector>

#include "../ref/ref.h"
#include "avx2.h"

namespace mb {
namespace kq {
namespace avx2 {
namespace {

// [65536 + 1] f16 bits: gelu of each f16 input; one more entry so the 32-bit gather of the last
// one stays inside. Immutable once built (a constant of the code, computed rather than spelled out).
const uint16_t* gelu_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(65537, 0);
    for (uint32_t h = 0; h < 65536; h++) t[h] = f2h(ref::gelu_tanh(h2f((half)h)));
    return t;
  }();
  return table.data();
}

}  // namespace

void gelu_mul(float* gate, const float* up, int n) {
  const uint16_t* table = gelu_table();
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
  const __m256i low16 = _mm256_set1_epi32(0xffff);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
    const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const __m256i g32 = _mm256_and_si256(_mm256_i32gather_epi32((const int*)table, idx, 2), low16);
    const __m128i g16 = _mm_packus_epi32(_mm256_castsi256_si128(g32), _mm256_extracti128_si256(g32, 1));
    __m256 r = _mm256_mul_ps(_mm256_cvtph_ps(g16), u);
    r = _mm256_blendv_ps(r, _mm256_mul_ps(x, u), _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
    r = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), r);
    _mm256_storeu_ps(gate + i, r);
  }
  ref::gelu_mul(gate + i, up + i, n - i);
}

}  // namespace avx2
}  // namespace kq
}  // namespace mb
