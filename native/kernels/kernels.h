// The kernel API the models call. Each function has a scalar reference in kernels/ref/ and,
// where it matters, AVX2 and AVX-512 versions (kernels/avx2/, kernels/avx512/);
// kernels/dispatch.cpp picks one set at runtime from the CPU's features. Signatures are shared by
// every version.
//
// Dimension legend: T rows of activations (tokens), K reduction dim (W->ne[0]), N output dim (W->ne[1]).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
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

// Caller-owned room for matmul's quantized activations ([T][row bytes of W's partner type]). It
// grows to the largest call it has seen and is then reused, so a caller that keeps one (a model
// does) allocates nothing per call. One matmul at a time per scratch.
struct MatmulScratch {
  std::vector<uint8_t> xq;
  std::vector<uint8_t> packed;  // the activations again, in groups of 8 (or 4) tokens for a Gemm8 kernel
  std::vector<uint8_t> unpacked;  // per thread, one block of 16 weight rows for a Gemm16 kernel
};

// y[T, N] = x[T, K] · W^T. The activations are quantized to W's partner type (q8_0 / q8_1 / q8_K)
// once per call, and each weight row is read once per call for all T rows (a real GEMM).
// pool may be null (runs on the calling thread); scratch may be null (a temporary buffer per
// call). Row t of y does not depend on T or on the other rows of x (same bits whether a token
// is computed alone or in a batch).
// Throws std::invalid_argument for a type without a dot product or K not a block multiple.
// Supported W types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
void matmul(const QMatrix& W, const float* x, float* y, int T, ThreadPool* pool, MatmulScratch* scratch = nullptr);

// y[m][T, W[m].N] = x[T, K] · W[m]^T for m < n, all W[m] of the same K: the same bits as n
// matmul calls. With one token (decode) and matrices of one partner type, x is quantized once and
// the rows of all n matrices are shared out in one pool run (one wait instead of n).
void matmul_n(const QMatrix* const* W, int n, const float* x, float* const* y, int T, ThreadPool* pool,
              MatmulScratch* scratch = nullptr);

// dst[k] = dequantized row `row` of W (embedding lookup, reference paths).
void dequantize_row(const QMatrix& W, int64_t row, float* dst);

// Name of the kernel set dispatch.cpp picked ("avx512vnni", "avx2" or "ref"; MB_KERNELS=ref|avx2
// forces one, =amx asks for "avx512amx").
const char* kernels_backend();

// The start-up gate (kernels/certify.h) on the picked set: "passed", or "failed: " and what
// disagreed with the scalar reference. weight_samples: one matrix of each weight type the model
// multiplies (its first rows are used).
std::string certify_kernels(const std::vector<QMatrix>& weight_samples);

// Elementwise / small ops (fp32). x and out may alias unless stated.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);  // out[n]
// RoPE of x[n_heads*head_dim] in place, on the first rope_dim dims of each head. As ggml_rope_ext:
// pair i's angle is divided by freq_factors[i] ([rope_dim/2], LongRoPE; null = 1) and its cos and
// sin are multiplied by attn_factor (ggml's mscale), so only the rotated dims are scaled.
void rope(float* x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, bool neox,
          const float* freq_factors = nullptr, float attn_factor = 1.0f);
void silu_mul(float* gate, const float* up, int n);  // gate[n] = silu(gate) * up
void gelu_mul(float* gate, const float* up, int n);  // gate[n] = gelu(gate) * up, llama.cpp's tanh GELU via f16
void softmax(float* x, int n);                      // in place
void add(float* out, const float* a, int n);        // out += a

// ---- Attention over an f16 KV cache ----
// Dimension legend (attention): n query positions of one sequence, consecutive, the first at
// position p0; G query heads that share the KV head; Dh head dim; R = n*G query rows, row
// r = i*G + h (position p0 + i, head h); N >= p0 + n keys the scratch is sized for; keys and
// values at positions [0, p0 + n).
//
// Causal attention of those rows against one KV head, optionally over a sliding window of W keys
// and with a sink logit per head:
//   out[i][h] = sum_{lo_i <= j <= p0+i} softmax_j(scale * f16(q[i][h]) . k[j]; sink[h]) * v[j]
// where lo_i = max(0, p0 + i - W + 1) (0 when W = 0: no window) and the sink, when given, joins
// the softmax's max and denominator (exp(sink - max)) but has no value, as llama.cpp's
// soft_max_ext and flash_attn_ext take their sinks. Key blocks wholly before every row's window
// are never read.
// Numerics depend on the kernel set (MB_KERNELS forces one):
//  - ref and avx2: bit for bit llama.cpp's non-flash attention on the CPU (ggml-cpu's AVX-512
//    build, as node-llama-cpp runs it) for a batch of two or more tokens: scores summed as its f16
//    GEMM (tinyBLAS) sums them; its softmax (ggml_v_expf, sums in 16-key chunks added in double);
//    probabilities rounded to f16; the product with V summed in tinyBLAS's order (ref/ops.cpp
//    spells it out). That needs each row's max and sum over all its keys before any probability
//    is rounded, hence three sweeps over the keys with exp(s - max) kept per key: memory that
//    grows with n * N and falls out of cache at depth.
//  - avx512: flash attention, one sweep over blocks of keys with an online softmax in f32
//    (ref::flash_attention is the definition), within 1e-5 of sum_j p_j |v_j| of the exact
//    softmax (tests/test_attention.cpp); its logits stay within llama.cpp's own flash on/off
//    spread (test/oracle). (A bf16 value product, avx512/flash_bf16.cpp, is tested and benchmarked
//    but not picked: it leaves that spread.)
//  - avx512amx (MB_KERNELS=amx, where the OS grants AMX and a probe in a child process runs it): the same flash
//    pass with the products on AMX tiles, every operand split into two bf16 parts and all four
//    part products summed, so the scores and values are f32-accurate (within the same 1e-5);
//    its own bits, batch independent like the others. A prefill item runs ~1.65x the f32
//    kernel; a decode step ~3.2x slower (each key block is converted for 7 rows). On
//    Qwen2.5-Coder-0.5B that costs ~4% of decode at 600 keys and ~9% at 10k, and saves ~27% of an
//    18.7k-token prefill (bench.mjs, bench:agents); at 16k keys its decode attention is ~26 ms a
//    token against the f32 kernel's 9, which is why it is asked for, not picked. It restores the
//    calling thread's tile configuration, so a neighbour's AMX code (ggml) keeps its own.
// Row (i, h) depends only on its own q, its position and the keys: the same bits whatever n and
// p0 of the call it is part of (a token alone, in a prefill chunk, or a chunk cut elsewhere).
// Every kernel takes the keys in blocks of kAttentionKeyAlign from key 0, so a caller with a
// window may pass a cache from any position that is a multiple of it (p0 and the keys shifted
// alike) and get the same bits as with the whole cache; keys before every row's window may then
// hold anything finite (they are masked, never used).
//   q       [n][G][Dh] f32; ldq floats between positions, heads of one position Dh apart
//   k, v    [p0+n][Dh] f16 bits, positions Dh apart
//   out     [n][G][Dh] f32; ldo floats between positions
//   window  W, 0 for none
//   sinks   [G] logits, one per query head of the call; nullptr for none
//   scratch attention_scratch_floats(n, G, Dh, N) floats, private to this call
void attention(const float* q, size_t ldq, const uint16_t* k, const uint16_t* v, float* out, size_t ldo, int n, int G,
               int Dh, int p0, float scale, int window, const float* sinks, float* scratch);
size_t attention_scratch_floats(int n, int G, int Dh, int n_keys);
// Query rows (positions x G) per call the picked kernel is fastest at; a caller cutting a long run
// of positions into calls takes about this many (a row's bits do not depend on the cut).
int attention_rows();
constexpr int kAttentionKeyAlign = 64;
}  // namespace mb
