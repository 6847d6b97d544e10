// Flash attention, values in f32 (AVX-512 F); see flash.h.
#define MB_FLASH_BF16 0
#include "flash.h"

#include "avx512.h"

namespace mb {
namespace kq {
namespace avx512 {

void flash_attention_f32(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo,
                        int n, int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch) {
  flash_entry(q, ldq, k, v, out, ldo, n, G, Dh, p0, scale, window, sinks, scratch);
}
size_t flash_attention_f32_scratch_floats(int R, int Dh, int N) { return flash_entry_scratch(R, Dh, N); }

}  // namespace avx512
}  // namespace kq
}  // namespace mb
