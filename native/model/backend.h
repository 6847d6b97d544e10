// Internal to native/model: the seam between a forward pass and the hardware it runs on. Every
// architecture file writes its forward pass once, as calls on a Backend; backend_cpu.cpp runs
// them on the CPU kernel set (kernels.h, one thread pool), cuda/backend_cuda.cpp enqueues them on
// one CUDA stream (kernels/cuda/cuda_ops.h). Buffers and weights are the backend's own memory
// (host or device): the forward pass only passes their pointers along and never reads them.
//
//        model_<arch>.cpp  (one forward pass per architecture)
//               |  Transformer: batch checks, chunks, KV slots, wanted rows
//               v
//            Backend  ----------------------------.
//        CpuBackend: kernels.h + ThreadPool     CudaBackend: cuda_ops.h on a stream, CUDA
//        (bit-identical to llama.cpp's CPU)     graphs of decode steps captured inside
//
// An op a backend cannot run yet is refused at load (require), naming it, so a step never meets
// one.
//
// Dimension legend (see transformer.h): T rows of the current chunk, R rows of an op (T, or T * H
// for a per-head op), n values per row, D n_embd, H heads, Hk KV heads, G = H / Hk, Dh head dim,
// E experts, Ek experts per token, L layers of a KV buffer, S slots, N positions a KV buffer keeps
// per slot (C, or the R of a ring).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/loader.h"

namespace mb {
class ThreadPool;
class GgufFile;
namespace model_detail {

// Up to Tm consecutive rows of a Batch (host arrays).
struct Chunk {
  const int32_t* token;  // [T]
  const int32_t* pos;    // [T]
  const int32_t* slot;   // [T]
  const uint8_t* want;   // [T] 1 = this row's logits are wanted
  int T;
};

// K and V of L layers in f16 bits, in the backend's memory: [L][S][Hk][N][Dh] each. ring: N is
// smaller than the context and position p lives at p mod N (a sliding-window layer's cache).
struct KvBuf {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int L = 0, S = 0, Hk = 0, N = 0, Dh = 0;
  bool ring = false;
  size_t index(int il, int s, int g, int p) const { return ((((size_t)il * S + s) * Hk + g) * N + p) * Dh; }
  size_t elems() const { return (size_t)L * S * Hk * N * Dh; }
};

struct RopeArgs {
  int dims;                        // rope.dimension_count
  float base;                      // freq_base
  bool neox;                       // rotate halves, not adjacent pairs
  const float* factors = nullptr;  // [dims / 2] LongRoPE factors (backend memory), null = none
  float attn_factor = 1.f;         // ggml's mscale on cos and sin
};

struct AttnArgs {
  float scale;                     // on q·k
  int window = 0;                  // > 0: a row at p sees only keys [p - window + 1, p]
  const float* sinks = nullptr;    // [H] a logit per head that joins the softmax without a value
};

enum class Glu { silu, gelu };  // gate = act(gate) * up
// softmax_top_k: probabilities over E, the Ek likeliest renormalized to sum 1 (qwen3moe);
// top_k_softmax: the Ek largest logits, softmaxed among themselves (gpt-oss).
enum class Routing { softmax_top_k, top_k_softmax };
// swiglu: silu(gate) * up; swiglu_oai: gpt-oss's clamped SwiGLU with per-expert biases.
enum class ExpertAct { swiglu, swiglu_oai };

struct ExpertFfn {
  ExpertMatrices gate, up;         // E x [D -> F]
  ExpertMatrices down;             // E x [F -> D]
  int E;
  ExpertAct act;
  const float* gate_b = nullptr;   // [E][F] swiglu_oai only
  const float* up_b = nullptr;     // [E][F]
  const float* down_b = nullptr;   // [E][D]
};

// Every op a forward pass may ask for, as require() names them.
enum class Op {
  embed, matmul, rmsnorm, add, add_bias, scale, copy_cols, rope, rope_factors, rope_angles, store_kv, kv_ring,
  attention, attention_window, attention_sinks, glu_silu, glu_gelu, softcap, moe_route, moe_experts, weighted_sum,
  move_rows, count
};
const char* op_name(Op op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda"
  virtual bool supports(Op op) const = 0;
  // Throws std::runtime_error naming the architecture and the first op this backend cannot run.
  void require(const std::string& arch, std::initializer_list<Op> ops) const;
  // Host memory: logits land straight in the caller's array; else they are read back.
  virtual bool on_host() const = 0;

  // ---- memory, all of it living as long as the backend ----
  virtual float* alloc(size_t n) = 0;         // [n] f32, zeroed
  virtual int32_t* alloc_i32(size_t n) = 0;   // [n]
  // G: query heads per KV head, so the attention scratch fits; N = C, or the ring's length.
  virtual KvBuf alloc_kv(int L, int S, int Hk, int N, int Dh, int G, bool ring) = 0;
  // A weight as this backend reads it; name is the tensor's, for errors.
  virtual QMatrix matrix(const std::string& name, const QMatrix& host) = 0;
  virtual ExpertMatrices experts(const std::string& name, const ExpertMatrices& host) = 0;
  // A vector of f32 (norm weights, biases) in backend memory; empty gives nullptr.
  virtual const float* vector(const std::vector<float>& host) = 0;
  // Every weight placed: a device backend checks its kernels on them here.
  virtual void loaded() {}
  // Step recordings made while serving (Model::graph_captures).
  virtual int64_t graph_captures() const { return 0; }

  // ---- a step ----
  // Runs enqueue(), the forward pass of chunk c whose n_wanted rows' logits are wanted, with c as
  // the current rows; a backend may replay a recording of an earlier step of the same shape
  // instead (CUDA graphs), so enqueue must only call ops.
  virtual void step(const Chunk& c, int n_wanted, const std::function<void()>& enqueue) {
    (void)n_wanted;
    set_rows(c);
    enqueue();
  }
  // The rows the ops below act on: their tokens, positions and slots.
  virtual void set_rows(const Chunk& c) = 0;
  // out[n] (host) = logits[n] (backend memory), once the step has run.
  virtual void read(float* out, const float* logits, size_t n) = 0;

  // ---- K/V slots ----
  virtual void kv_copy(const KvBuf& kv, int src, int dst, int n) = 0;  // positions [0, n); a ring whole
  // Token-major host rows [n][L][K, V][Hk][Dh] of positions [pos, pos + n) of a slot.
  virtual void kv_read(const KvBuf& kv, int slot, int pos, int n, uint8_t* dst) = 0;
  virtual void kv_write(const KvBuf& kv, int slot, int pos, int n, const uint8_t* src) = 0;

  // ---- ops on the current rows; x, y, out ... are backend memory ----
  virtual void embed(const QMatrix& W, float* x) = 0;                                    // x[T, D] = W[token]
  virtual void matmul(const QMatrix& W, const float* x, float* y, int T) = 0;            // y[T, N] = x[T, K]·W^T
  // y[m][T, W[m]->N] = x[T, K]·W[m]^T for m < n, matrices sharing one input (q/k/v, gate/up): the
  // same bits as n matmul calls; a backend may run them as one unit of work.
  virtual void matmul_n(const QMatrix* const* W, int n, const float* x, float* const* y, int T) {
    for (int m = 0; m < n; m++) matmul(*W[m], x, y[m], T);
  }
  virtual void rmsnorm(float* out, const float* x, const float* w, int R, int n, float eps) = 0;  // w [n]
  virtual void add(float* x, const float* y, int R, int n) = 0;                          // x[R, n] += y[R, n]
  virtual void add_bias(float* x, size_t ld, const float* b, int R, int n) = 0;          // x[r][0, n) += b[n]
  virtual void scale(float* x, int R, int n, float s) = 0;                               // x[R, n] *= s
  // dst[r][0, n) = src[r][0, n), rows ld_dst and ld_src floats apart.
  virtual void copy_cols(float* dst, size_t ld_dst, const float* src, size_t ld_src, int R, int n) = 0;
  // RoPE of x[T][n_heads][Dh] in place, row t at its position.
  virtual void rope(float* x, int n_heads, int Dh, const RopeArgs& a, int T) = 0;
  // The same with precomputed angles cs[T][dims] (host: cos, sin of each pair), rotated halves.
  virtual void rope_angles(float* x, int n_heads, int Dh, int dims, const float* cs, int T) = 0;
  // Layer il of kv at each row's (slot, pos) = f16(k[T, Hk*Dh]), f16(v[T, Hk*Dh]).
  virtual void store_kv(const KvBuf& kv, int il, const float* k, const float* v, int T) = 0;
  // out[T, H*Dh] = causal softmax(q·K^T * scale) · V of each row against its slot in layer il.
  virtual void attention(const KvBuf& kv, int il, const float* q, float* out, int H, const AttnArgs& a, int T) = 0;
  virtual void glu(Glu act, float* gate, const float* up, int R, int n) = 0;            // gate, up [R, n]
  virtual void softcap(float* x, int R, int n, float cap) = 0;                           // cap * tanh(x / cap)
  // Per row: sel[T, Ek], weight[T, Ek] from logits[T, E] (overwritten).
  virtual void route(Routing r, float* logits, int E, int Ek, int32_t* sel, float* weight, int T) = 0;
  // res[t, k, :] = expert sel[t, k]'s FFN of xn[t]; returns the experts that ran.
  virtual int experts(const ExpertFfn& f, const float* xn, int Ek, const int32_t* sel, float* res, int T) = 0;
  // y[t] = sum over k, in order, of res[t, k] * w[t, k]; y [T, n], res [T, Ek, n].
  virtual void weighted_sum(float* y, const float* res, const float* w, int Ek, int n, int T) = 0;
  // Row rows[i] of buf [*, width] to row i, for i < n, rows ascending with rows[i] >= i (host).
  virtual void move_rows(float* buf, size_t width, const int* rows, int n) = 0;
};

// The CPU kernel set (kernels.h) over pool (may be null); max_rows: Tm.
std::unique_ptr<Backend> cpu_backend(ThreadPool* pool, int max_rows);

}  // namespace model_detail
}  // namespace mb
