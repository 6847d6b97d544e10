// Flash attention, values in f32 (AVX-512 F); see flash.h.
#define MB_FLASH_BF16 0
#include "flash.h"

#include "../avx2/avx2.h"
#include "avx512.h"

namespace mb {
namespace kq {
namespace avx512 {

void flash_attention_f32(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n,
                        int G, int Dh, int p0, float scale, float* scratch) {
  switch (Dh) {
    case 64: flash<64>(q, ldq, k, v, out, ldo, n, G, p0, scale, scratch); return;
    case 128: flash<128>(q, ldq, k, v, out, ldo, n, G, p0, scale, scratch); return;
    default: avx2::attention(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, scratch); return;  // no model we load
  }
}

size_t flash_attention_f32_scratch_floats(int R, int Dh, int N) {
  return Dh == 64 || Dh == 128 ? flash_scratch(R, Dh) : avx2::attention_scratch_floats(R, Dh, N);
}

}  // namespace avx512
}  // namespace kq
}  // namespace mb
