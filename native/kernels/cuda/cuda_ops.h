// The CUDA kernel set: the same operations as the CPU kernels (kernels.h, ref/ref.h), on device
// pointers, each enqueued on a stream with no host synchronisation inside (a step can be captured
// as a CUDA graph). Plain C++ header: host code includes it without nvcc.
//
// Dimension legend: T rows of activations (tokens), K reduction dim (W.K), N output dim (W.N),
// H query heads, Hk KV heads, G = H / Hk, Dh head dim, S slots, C context per slot, E experts,
// Ek experts per token, V vocabulary.
//
// Numerics: the matmuls take f32 activations and dequantize the weights (the CPU kernels instead
// round activations to the weight's partner type, q8_0/q8_1/q8_K/f16/bf16), so results agree with
// the CPU within that rounding, not bit for bit. The tensor-core GEMM rounds activations and
// dequantized weights to f16 and sums in f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/kernels.h"  // QMatrix (its data is a device pointer here)

typedef struct CUstream_st* cudaStream_t;

namespace mb {
namespace cuda {

// ---- device ----
struct DeviceInfo {
  int count = 0;            // devices the runtime sees
  std::string error;        // why count is 0 (driver missing / too old, no device), else empty
  std::string name;         // device 0
  int cc_major = 0, cc_minor = 0;
  size_t total_bytes = 0;
  size_t free_bytes = 0;
  int sm_count = 0;
};
DeviceInfo probe_device();
// Throws std::runtime_error with the CUDA error string and the call site when err != 0.
void check(int err, const char* what);
void* dev_alloc(size_t bytes);
void dev_free(void* p);
void upload(void* dst, const void* src, size_t bytes, cudaStream_t s);
void download(void* dst, const void* src, size_t bytes, cudaStream_t s);
void sync(cudaStream_t s);

// ---- matmul: y[T, N] = x[T, K] · W^T ----
// True for the weight types the kernels read (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
// Q5_K, Q6_K).
bool supported(GgmlType t);
// Warp-per-row dequantizing matvec, T <= 8 (decode, a few slots).
void matvec(const QMatrix& W, const float* x, float* y, int T, cudaStream_t s);
// Tensor-core GEMM over dequantized f16 tiles, any T (prefill, many slots).
void gemm_f16(const QMatrix& W, const float* x, float* y, int T, cudaStream_t s);
// The dispatch: matvec for small T, gemm_f16 otherwise (kMatvecMaxT).
constexpr int kMatvecMaxT = 8;
void matmul(const QMatrix& W, const float* x, float* y, int T, cudaStream_t s);
// cuBLAS for F16/BF16 weights, T > kMatvecMaxT: activations rounded to W's type into x16
// ([T, K] 16-bit scratch), f32 sums. A handle per stream, owned by the caller.
class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t s);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  void* get() const { return handle_; }

 private:
  void* handle_ = nullptr;
};
bool cublas_supported(GgmlType t);
void gemm_cublas(CublasHandle& h, const QMatrix& W, const float* x, uint16_t* x16, float* y, int T, cudaStream_t s);
// Grouped expert matvec (MoE decode): W holds E experts of N rows each, expert e's rows at
// W.data + e * expert_bytes. For pair p in [0, P): y[p, N] = x[p / Ek, K] · W[sel[p]]^T.
void matvec_experts(const QMatrix& W, size_t expert_bytes, const float* x, const int32_t* sel, int P, int Ek,
                    float* y, cudaStream_t s);

// out[n, K] = dequantized rows rows[i] of W (embedding lookup).
void get_rows(const QMatrix& W, const int32_t* rows, int n, float* out, cudaStream_t s);

// ---- elementwise ----
// out[r, n] = x[r, n] / rms(x[r]) * w[n] for each of R rows (also per head: R = T * H, n = Dh).
void rmsnorm_rows(float* out, const float* x, const float* w, int R, int n, float eps, cudaStream_t s);
// RoPE of x[T][n_heads][head_dim] in place, row t at position pos[t] (device).
void rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int rope_dim, float freq_base, bool neox,
          cudaStream_t s);
void silu_mul(float* gate, const float* up, int64_t n, cudaStream_t s);  // gate = silu(gate) * up
void add(float* out, const float* a, int64_t n, cudaStream_t s);         // out += a

// ---- KV cache and attention ----
// Cache of one layer: [S][Hk][C][Dh] f16 bits, for keys and for values.
struct KvLayer {
  uint16_t* k;
  uint16_t* v;
  int S, Hk, C, Dh;
};
// k_cache[slot[t]][g][pos[t]] = f16(k[t][g]), same for v; k, v [T][Hk*Dh].
void store_kv(const KvLayer& kv, const float* k, const float* v, const int32_t* slot, const int32_t* pos, int T,
              cudaStream_t s);
// out[t][h] = sum_{j <= pos[t]} softmax_j(scale * q[t][h] . K[slot[t]][h / G][j]) V[..][j], f32 math.
// Prefill kernel (flash-style: tiles of keys in shared memory, online softmax, the G heads of one
// KV head share each tile).
void attention_prefill(const KvLayer& kv, const float* q, float* out, const int32_t* slot, const int32_t* pos, int T,
                       int H, float scale, cudaStream_t s);
// Decode kernel: the keys of each row split into chunks of kv_chunk run by separate blocks, then
// combined (split-K); max_keys >= every pos[t] + 1 (the host knows it from the batch). partial
// is attention_decode_scratch_floats() floats of device memory.
void attention_decode(const KvLayer& kv, const float* q, float* out, const int32_t* slot, const int32_t* pos, int T,
                      int H, float scale, int max_keys, int kv_chunk, float* partial, cudaStream_t s);
size_t attention_decode_scratch_floats(int T, int H, int Dh, int max_keys, int kv_chunk);

// ---- MoE ----
// Per token: probs = softmax(logits[t, E]); sel[t, Ek] = the Ek likeliest experts, best first
// (ties to the lower index); weight[t, Ek] = their probabilities renormalized to sum 1.
void moe_route(const float* logits, int T, int E, int Ek, int32_t* sel, float* weight, cudaStream_t s);

// ---- sampling ----
// For each row t of logits[T, V]: temperature <= 0 picks the argmax (lowest index on ties); else
// keep the top_k likeliest (top_k <= kMaxTopK; 0 = kMaxTopK), softmax at temperature, keep the
// smallest prefix whose mass reaches top_p, and pick where u[t] (uniform [0, 1), device) falls
// in the cumulated mass. Only the ids come back to the host.
constexpr int kMaxTopK = 128;
void sample(const float* logits, int T, int V, int top_k, float top_p, float temperature, const float* u,
            int32_t* token, cudaStream_t s);

}  // namespace cuda
}  // namespace mb
