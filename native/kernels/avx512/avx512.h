// The AVX-512 kernels: avx512/*.cpp alone are compiled with AVX-512 flags, and dispatch.cpp puts
// these in the avx512 table (over the AVX2 set) only after checking the CPU.
#pragma once
#include "../dispatch.h"

namespace mb {
namespace kq {
namespace avx512 {

// vnni.cpp (needs AVX-512 F/BW/DQ/VL/VNNI): GEMM for groups of up to 8 tokens (Q4_K and Q6_K:
// the same bits as the AVX2 dot kernels).
extern const Gemm8 gemm8_q4_0, gemm8_q4_1, gemm8_q5_0, gemm8_q5_1, gemm8_q8_0, gemm8_mxfp4;
// The same interface for groups of 4 tokens, as 4 rows x 4 tokens per zmm (T = 2 .. 7).
extern const Gemm8 gemm4_q4_0, gemm4_q4_1, gemm4_q5_0, gemm4_q5_1, gemm4_q8_0, gemm4_mxfp4;
// kquant_group.cpp (same flags): the same interface for Q4_K and Q6_K, one group of up to 16
// tokens (Gemm8::group; the same bits as the tiles), from 6 (Q4_K) or 8 (Q6_K) to 16 tokens.
extern const Gemm8 gemmk_q4_K, gemmk_q6_K;
// gemm16.cpp (same flags): GEMM over blocks of 16 weight rows for Q4_K and Q6_K (the same bits
// as the AVX2 tile and dot) and Q4_0, Q5_0, Q8_0 (the same bits as vnni_tile and vnni_dot), the
// weights unpacked once per call.
extern const Gemm16 gemm16_q4_K, gemm16_q6_K, gemm16_q4_0, gemm16_q5_0, gemm16_q8_0;
// vnni.cpp's tile and dot for the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4): the
// 8-token GEMM's bits for a token alone (the AVX2 set sums in another order).
template <GgmlType WT>
void vnni_tile(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy);
template <GgmlType WT> float vnni_dot(int64_t k, const void* w, const void* x);

// kquant.cpp (same flags): Q4_K and Q6_K tiles with vpdpbusd/vpdpwssd, the AVX2 tiles' bits.
void tile_q4_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy);
void tile_q6_K(int64_t k, const uint8_t* w, size_t ws, int nr, const uint8_t* x, size_t xs, int nt, float* y,
               size_t ldy);

// flash_f32.cpp (AVX-512 F/BW/DQ/VL) and flash_bf16.cpp (also AVX-512 BF16): attention in one
// pass with an online softmax (flash.h), held to ref::flash_attention within a tolerance. The
// bf16 one rounds the probabilities and values to bf16 for vdpbf16ps. Head dims other than 64 and
// 128 go to avx2::attention.
void flash_attention_f32(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n,
                         int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch);
size_t flash_attention_f32_scratch_floats(int R, int Dh, int N);
void flash_attention_bf16(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo,
                          int n, int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch);
size_t flash_attention_bf16_scratch_floats(int R, int Dh, int N);
// flash_amx.cpp (also AVX-512 BF16, AMX-TILE, AMX-BF16): the same pass with the products on AMX
// tiles, each bf16 operand split in a high and a low part (f32 accuracy). Callable only after the
// OS granted the tile state and amx_bf16_works() ran in a child process (dispatch.cpp).
void flash_attention_amx(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n,
                         int G, int Dh, int p0, float scale, int window, const float* sinks, float* scratch);
size_t flash_attention_amx_scratch_floats(int R, int Dh, int N);
bool amx_bf16_works();

}  // namespace avx512
}  // namespace kq
}  // namespace mb
