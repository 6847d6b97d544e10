// Scalar reference kernels: the definition every faster version is tested against. They follow
// ggml's reference code (ggml-quants.c / ggml-cpu quants.c) in block layout and rounding.
#pragma once
#include "../blocks.h"

namespace mb {
namespace kq {
namespace ref {

// y[k] from one row of blocks of the given type (k a multiple of the block size).
void dequantize(GgmlType t, const void* x, float* y, int64_t k);

// Activation quantizers. q8_0/q8_1: d = amax/127, q = roundf(x/d). q8_K: d = max/-127 with the
// signed extreme, q = nearest-even(x/d) clamped to 127, bsums over groups of 16.
void quantize_q8_0(const float* x, void* y, int64_t k);
void quantize_q8_1(const float* x, void* y, int64_t k);
void quantize_q8_K(const float* x, void* y, int64_t k);
void to_f16(const float* x, void* y, int64_t k);
void to_bf16(const float* x, void* y, int64_t k);

// Weight row · partner activation row (see vec_dot_type()).
float dot_f32(int64_t k, const void* w, const void* x);
float dot_f16(int64_t k, const void* w, const void* x);    // x is f16
float dot_bf16(int64_t k, const void* w, const void* x);   // x is bf16
float dot_q4_0(int64_t k, const void* w, const void* x);   // x is q8_0
float dot_q4_1(int64_t k, const void* w, const void* x);   // x is q8_1
float dot_q5_0(int64_t k, const void* w, const void* x);   // x is q8_0
float dot_q5_1(int64_t k, const void* w, const void* x);   // x is q8_1
float dot_q8_0(int64_t k, const void* w, const void* x);   // x is q8_0
float dot_q4_K(int64_t k, const void* w, const void* x);   // x is q8_K
float dot_q5_K(int64_t k, const void* w, const void* x);   // x is q8_K
float dot_q6_K(int64_t k, const void* w, const void* x);   // x is q8_K
float dot_mxfp4(int64_t k, const void* w, const void* x);  // x is q8_0

void rmsnorm(float* out, const float* x, const float* w, int n, float eps);
void rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, bool neox,
          const float* freq_factors = nullptr, float attn_factor = 1.0f);
void silu_mul(float* gate, const float* up, int n);
// geglu.cpp: gate[n] = gelu(gate) * up, GELU's tanh approximation as llama.cpp's CPU computes it
// (through f16, see there); gelu_tanh is ggml_gelu_f32.
void gelu_mul(float* gate, const float* up, int n);
float gelu_tanh(float x);
void softmax(float* x, int n);
void add(float* out, const float* a, int n);
// llama.cpp's CPU attention arithmetic one row and one value at a time (the definition, see
// ops.cpp). ggml_expf: its vector exp, for x <= 0.
float ggml_expf(float x);
void attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int Dh, int p0, float scale, int window, const float* sinks, float* scratch);
size_t attention_scratch_floats(int R, int Dh, int N);  // Dh + N
// Flash attention (one pass, online softmax in f32, keys in blocks of kFlashKeyBlock from key 0,
// blocks wholly before a row's window skipped):
// the definition the flash kernels are held to, within a tolerance (see ops.cpp).
constexpr int kFlashKeyBlock = 64;
static_assert(kAttentionKeyAlign % kFlashKeyBlock == 0, "a caller's aligned start must start a block");
void flash_attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n,
                     int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch);
size_t flash_attention_scratch_floats(int R, int Dh, int N);  // 2 * Dh + kFlashKeyBlock

}  // namespace ref
}  // namespace kq
}  // namespace mb
