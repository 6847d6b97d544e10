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
void matmul(const QMatrix& W, const float* x, float* y, int T, ThreadPool* pool);

// Expert matmul for MoE: rows of x routed to one expert (W is that expert's slice).
// Same contract as matmul; exists so the MoE path can batch tokens per expert.

// dst[k] = dequantized row `row` of W (embedding lookup, reference paths).
void dequantize_row(const QMatrix& W, int64_t row, float* dst);

// Elementwise / small ops (fp32). x and out may alias unless stated.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);  // out[n]
void rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, bool neox);  // x[n_heads*head_dim] in place
void silu_mul(float* gate, const float* up, int n);  // gate[n] = silu(gate) * up
void softmax(float* x, int n);                      // in place
void add(float* out, const float* a, int n);        // out += a
}  // namespace mb
