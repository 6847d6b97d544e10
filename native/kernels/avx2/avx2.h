// The AVX2/FMA/F16C kernel set: avx2/*.cpp alone are compiled with -mavx2 -mfma -mf16c, and
// dispatch.cpp puts these functions in a table only after checking the CPU. Each has the
// signature and the contract of its scalar reference in ref/ref.h.
#pragma once
#include "../dispatch.h"

namespace mb {
namespace kq {
namespace avx2 {

// dot.cpp: activation quantizers, float and quantized dot products, elementwise ops. Integer
// block sums are exact, so results differ from ref/ only in float rounding order.
void quantize_q8_0(const float* x, void* y, int64_t k);
void quantize_q8_1(const float* x, void* y, int64_t k);
void quantize_q8_K(const float* x, void* y, int64_t k);  // bit-identical to ref::quantize_q8_K
void to_f16(const float* x, void* y, int64_t k);
float dot_f32(int64_t k, const void* w, const void* x);
float dot_f16(int64_t k, const void* w, const void* x);
float dot_bf16(int64_t k, const void* w, const void* x);
// Legacy quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and MXFP4 (same 32-element blocks): the dot is the 1x1 case of the tile, so a
// token's result is the same alone or inside a batch.
template <GgmlType WT> float legacy_dot(int64_t k, const void* w, const void* x);
template <GgmlType WT>
void legacy_tile(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
                 size_t ldy);
// K-quants (x is q8_K): as for the legacy types, the dot is the 1x1 case of the tile; the same
// bits as the AVX-512 set's 8-token GEMM for Q4_K and Q6_K.
float dot_q4_K(int64_t k, const void* w, const void* x);
float dot_q5_K(int64_t k, const void* w, const void* x);
float dot_q6_K(int64_t k, const void* w, const void* x);
void tile_q4_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy);
void tile_q5_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy);
void tile_q6_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy);
void rmsnorm(float* out, const float* x, const float* w, int n, float eps);
void softmax(float* x, int n);
void silu_mul(float* gate, const float* up, int n);
void gelu_mul(float* gate, const float* up, int n);  // geglu.cpp: bit for bit ref::gelu_mul

// attention.cpp: bit for bit ref::attention (llama.cpp's non-flash arithmetic), tiled.
void attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int Dh, int p0, float scale, int window, const float* sinks, float* scratch);
size_t attention_scratch_floats(int R, int Dh, int N);

}  // namespace avx2
}  // namespace kq
}  // namespace mb
