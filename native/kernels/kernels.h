// The kernel API the models call. Each function has a scalar reference in kernels/ref/ and,
// where it matters, an AVX2/FMA version (kernels/avx2/) and a CUDA version; kernels/dispatch.cpp
// picks one at runtime from the CPU's features. Signatures are shared by every version.
//
// Dimension legend: T rows of activations (tokens), K reduction dim (W->ne[0]), N output dim (W->ne[1]).
#pragma once
#include <cstddef>
#include <cstdint>
#include "../gguf/gguf.h"

namespace mb {
class ThreadPool;

// A weight matrix as stored in the GGUF: N rows of K elements, row-major, of any supported type.
struct QMatrix {
  GgmlType type;
  int64_t K;             // ne[0]
  int64_t N;             // ne[1]
  const uint8_t* data;   // N rows, each ggml_row_bytes(type, K) bytes
};
size_t ggml_row_bytes(GgmlType t, int64_t k);

// y[T, N] = x[T, K] · W^T. The activations are quantized to W's partner type (q8_0 / q8_1 / q8_K)
// once per call, and each weight row is read once per call for all T rows (a real GEMM).
// pool may be null (runs on the calling thread). Row t of y does not depend on T or on the
// other rows of x (same bits whether a token is computed alone or in a batch).
// Throws std::invalid_argument for a type without a dot product or K not a block multiple.
// Supported W types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
void matmul(const QMatrix& W, const float* x, float* y, int T, ThreadPool* pool);

// Expert matmul for MoE: rows of x routed to one expert (W is that expert's slice).
// Same contract as matmul; exists so the MoE path can batch tokens per expert.

// dst[k] = dequantized row `row` of W (embedding lookup, reference paths).
void dequantize_row(const QMatrix& W, int64_t row, float* dst);

// Name of the kernel set dispatch.cpp picked ("avx2" or "ref"; MB_KERNELS=ref forces "ref").
const char* kernels_backend();

// Elementwise / small ops (fp32). x and out may alias unless stated.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);  // out[n]
void rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, bool neox);  // x[n_heads*head_dim] in place
void silu_mul(float* gate, const float* up, int n);  // gate[n] = silu(gate) * up
void softmax(float* x, int n);                      // in place
void add(float* out, const float* a, int n);        // out += a
}  // namespace mb
