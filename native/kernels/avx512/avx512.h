// The AVX-512 kernels: avx512/*.cpp alone are compiled with AVX-512 flags, and dispatch.cpp puts
// these in the avx512 table (over the AVX2 set) only after checking the CPU.
#pragma once
#include "../dispatch.h"

namespace mb {
namespace kq {
namespace avx512 {

// vnni.cpp (needs AVX-512 F/BW/DQ/VL/VNNI): GEMM for groups of up to 8 tokens, the same bits as
// the AVX2 tile and dot kernels.
extern const Gemm8 gemm8_q4_0, gemm8_q4_1, gemm8_q5_0, gemm8_q5_1, gemm8_q8_0, gemm8_q4_K, gemm8_q6_K;

}  // namespace avx512
}  // namespace kq
}  // namespace mb
