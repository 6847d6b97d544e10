// The CUDA backend: the ops of backend.h on the kernels of kernels/cuda (cuda_ops.h), each
// enqueued on the backend's one stream with no host sync; a step syncs once, when its logits are
// read back. The numerics differ from the CPU's where cuda_ops.h says (f32 activations into the
// matmuls). Ops with no CUDA kernel yet (biases, scaling, LongRoPE/YaRN rotations, rings and
// windows, sinks, GeGLU, soft-capping, MoE) are not supported(), so an architecture that needs one
// is refused at load naming it.
//
// Dimension legend (see backend.h): T rows in this chunk (<= Tm, the max batch given at load),
// D n_embd, H heads, Hk KV heads, Dh head dim, F n_ff, V n_vocab, L layers, S slots, C context
// per slot, Gm the widest step that runs the split-K decode attention and may be captured as a
// CUDA graph, Kmax the widest matmul input (max(D, H*Dh, F)).
//
// A decode-shaped step (T <= Gm rows, every row's logits wanted) of a width T seen before is
// captured as a CUDA graph and replayed from then on: its attention spans the whole context C, so
// the launch shapes stay fixed while the rows' tokens, positions and slots (device memory,
// uploaded before the graph runs) move. The first step of each width runs eagerly, which also
// warms cuBLAS up before anything is captured. MB_CUDA_GRAPHS=0 in the environment at load runs
// every step eagerly (a driver whose graphs misbehave can still serve).
#include "model/cuda/backend_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/loader.h"

namespace mb {
namespace {
using namespace model_detail;

constexpr int kKvChunk = 256;        // keys per block of the split-K decode attention
constexpr int kGraphMaxRows = 64;    // Gm at most: wider steps are prefill-shaped
// Left free beside the model: the CUDA context, cuBLAS's workspace, graph executables.
constexpr size_t kDeviceReserve = size_t(512) << 20;

bool runs_in_full(const std::string& arch) { return arch == "llama" || arch == "qwen3"; }

// A device allocation, freed with its owner.
class DevMem {
 public:
  explicit DevMem(size_t bytes) : p_(bytes ? cuda::dev_alloc(bytes) : nullptr) {}
  DevMem(DevMem&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  DevMem& operator=(DevMem&&) = delete;
  ~DevMem() {
    if (p_) (void)cudaFree(p_);  // a destructor has nowhere to report a failed free
  }
  void* get() const { return p_; }

 private:
  void* p_;
};

// The bytes [lo, lo + bytes) that hold every tensor's data (uploaded as one block).
struct TensorSpan {
  const uint8_t* lo = nullptr;
  size_t bytes = 0;
};
TensorSpan tensor_span(const GgufFile& f) {
  TensorSpan s;
  const uint8_t* hi = nullptr;
  for (const auto& t : f.tensors()) {
    if (!s.lo || t.data < s.lo) s.lo = t.data;
    if (!hi || t.data + t.n_bytes > hi) hi = t.data + t.n_bytes;
  }
  s.bytes = s.lo ? size_t(hi - s.lo) : 0;
  return s;
}

// Floats of activation scratch Transformer allocates on this backend for Tm rows (x, xn, y, q,
// att, k, v, gate, up, logits), plus the backend's own (attention partials, cuBLAS operands).
size_t scratch_floats(const ModelConfig& c, int C, int Tm) {
  const size_t T = size_t(Tm), HD = size_t(c.n_head) * c.head_dim, KD = size_t(c.n_head_kv) * c.head_dim;
  const int Gm = std::min(Tm, kGraphMaxRows);
  const size_t Kmax = size_t(std::max(c.n_embd, std::max(c.n_head * c.head_dim, c.n_ff)));
  return 3 * T * c.n_embd + 2 * T * HD + 2 * T * KD + 2 * T * c.n_ff + T * c.n_vocab +
         cuda::attention_decode_scratch_floats(Gm, c.n_head, c.head_dim, C, kKvChunk) + (T * Kmax + 1) / 2 + 3 * T;
}

std::string gib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  return b;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, bool graphs);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  bool supports(Op op) const override {
    switch (op) {
      case Op::embed: case Op::matmul: case Op::rmsnorm: case Op::add: case Op::copy_cols: case Op::rope:
      case Op::store_kv: case Op::attention: case Op::glu_silu: case Op::move_rows:
        return true;
      default:
        return false;
    }
  }
  bool on_host() const override { return false; }
  int64_t graph_captures() const override { return captures_; }

  float* alloc(size_t n) override { return static_cast<float*>(zeroed(n * sizeof(float))); }
  int32_t* alloc_i32(size_t n) override { return static_cast<int32_t*>(zeroed(n * sizeof(int32_t))); }
  KvBuf alloc_kv(int L, int S, int Hk, int N, int Dh, int G, bool ring) override;
  QMatrix matrix(const std::string& name, const QMatrix& host) override;
  ExpertMatrices experts(const std::string& name, const ExpertMatrices&) override {
    throw std::logic_error("model: cuda backend: no expert matrices (" + name + "): moe_experts is refused at load");
  }
  const float* vector(const std::vector<float>& host) override {
    if (host.empty()) return nullptr;
    float* d = alloc(host.size());
    cuda::upload(d, host.data(), host.size() * sizeof(float), st_);
    return d;
  }
  void loaded() override;

  void step(const Chunk& c, int n_wanted, const std::function<void()>& enqueue) override;
  void set_rows(const Chunk& c) override;
  void read(float* out, const float* logits, size_t n) override {
    cuda::download(out, logits, n * sizeof(float), st_);
    cuda::sync(st_);
  }

  void kv_copy(const KvBuf& kv, int src, int dst, int n) override;
  void kv_read(const KvBuf& kv, int slot, int pos, int n, uint8_t* dst) override {
    kv_transfer(kv, slot, pos, n, dst, true);
  }
  void kv_write(const KvBuf& kv, int slot, int pos, int n, const uint8_t* src) override {
    kv_transfer(kv, slot, pos, n, const_cast<uint8_t*>(src), false);  // read only: the host side is the source
  }

  void embed(const QMatrix& W, float* x) override { cuda::get_rows(W, tok_, T_, x, st_); }
  // y[T, N] = x[T, K] · W^T: cuBLAS for F16/BF16 weights past the matvec's rows, else the kernels' dispatch.
  void matmul(const QMatrix& W, const float* x, float* y, int T) override {
    if (T > cuda::kMatvecMaxT && cuda::cublas_supported(W.type)) cuda::gemm_cublas(*blas_, W, x, x16_, y, T, st_);
    else cuda::matmul(W, x, y, T, st_);
  }
  void rmsnorm(float* out, const float* x, const float* w, int R, int n, float eps) override {
    cuda::rmsnorm_rows(out, x, w, R, n, eps, st_);
  }
  void add(float* x, const float* y, int R, int n) override { cuda::add(x, y, int64_t(R) * n, st_); }
  void copy_cols(float* dst, size_t ld_dst, const float* src, size_t ld_src, int R, int n) override {
    if (R == 0) return;
    cuda::check((int)cudaMemcpy2DAsync(dst, ld_dst * sizeof(float), src, ld_src * sizeof(float), size_t(n) * sizeof(float),
                                       size_t(R), cudaMemcpyDeviceToDevice, st_),
                "copy_cols");
  }
  void rope(float* x, int n_heads, int Dh, const RopeArgs& a, int T) override {
    if (a.factors || a.attn_factor != 1.f) unsupported(Op::rope_factors);
    cuda::rope(x, pos_, T, n_heads, Dh, a.dims, a.base, a.neox, st_);
  }
  void store_kv(const KvBuf& kv, int il, const float* k, const float* v, int T) override {
    if (kv.ring) unsupported(Op::kv_ring);
    cuda::store_kv(layer(kv, il), k, v, slot_, pos_, T, st_);
  }
  void attention(const KvBuf& kv, int il, const float* q, float* out, int H, const AttnArgs& a, int T) override {
    if (kv.ring) unsupported(Op::kv_ring);
    if (a.window > 0) unsupported(Op::attention_window);
    if (a.sinks) unsupported(Op::attention_sinks);
    if (T <= Gm_)
      cuda::attention_decode(layer(kv, il), q, out, slot_, pos_, T, H, a.scale, capturing_ ? C_ : max_keys_, kKvChunk,
                             part_, st_);
    else
      cuda::attention_prefill(layer(kv, il), q, out, slot_, pos_, T, H, a.scale, st_);
  }
  void glu(Glu act, float* gate, const float* up, int R, int n) override {
    if (act != Glu::silu) unsupported(Op::glu_gelu);
    cuda::silu_mul(gate, up, int64_t(R) * n, st_);
  }
  void move_rows(float* buf, size_t width, const int* rows, int n) override {
    // in stream order, ascending: row rows[i] >= i is read before anything overwrites it
    for (int i = 0; i < n; i++)
      if (rows[i] != i)
        cuda::check((int)cudaMemcpyAsync(buf + size_t(i) * width, buf + size_t(rows[i]) * width, width * sizeof(float),
                                         cudaMemcpyDeviceToDevice, st_),
                    "move_rows");
  }

  void add_bias(float*, size_t, const float*, int, int) override { unsupported(Op::add_bias); }
  void scale(float*, int, int, float) override { unsupported(Op::scale); }
  void rope_angles(float*, int, int, int, const float*, int) override { unsupported(Op::rope_angles); }
  void softcap(float*, int, int, float) override { unsupported(Op::softcap); }
  void route(Routing, float*, int, int, int32_t*, float*, int) override { unsupported(Op::moe_route); }
  int experts(const ExpertFfn&, const float*, int, const int32_t*, float*, int) override {
    unsupported(Op::moe_experts);
  }
  void weighted_sum(float*, const float*, const float*, int, int, int) override { unsupported(Op::weighted_sum); }

 private:
  struct Graph {
    enum State { cold, warm, captured, failed } state = cold;
    cudaGraphExec_t exec = nullptr;
  };

  [[noreturn]] void unsupported(Op op) const {
    throw std::logic_error(std::string("model: the cuda backend has no op '") + op_name(op) + "'");
  }
  void start();
  void* zeroed(size_t bytes) {
    if (!st_ready_) start();
    void* p = mem_.emplace_back(bytes).get();
    if (bytes) cuda::check((int)cudaMemsetAsync(p, 0, bytes, st_), "cudaMemsetAsync");
    return p;
  }
  cuda::KvLayer layer(const KvBuf& kv, int il) const {
    const size_t n = size_t(kv.S) * kv.Hk * kv.N * kv.Dh;
    return cuda::KvLayer{kv.k + il * n, kv.v + il * n, kv.S, kv.Hk, kv.N, kv.Dh};
  }
  // Copies positions [pos, pos + n) of a slot between the device cache and token-major host rows
  // ([L][K, V][Hk][Dh] each): one strided copy per (layer, K or V, KV head).
  void kv_transfer(const KvBuf& kv, int slot, int pos, int n, uint8_t* host, bool to_host);
  void upload_weights();
  void capture(int T, const std::function<void()>& enqueue);

  std::shared_ptr<GgufFile> file_;
  ModelConfig cfg_;
  int S_, C_, Tm_, Gm_;
  std::string device_name_;
  cudaStream_t st_ = nullptr;
  std::unique_ptr<cuda::CublasHandle> blas_;
  std::deque<DevMem> mem_;                  // every allocation, freed with the backend

  TensorSpan span_;                         // the file's tensor data ...
  uint8_t* weights_ = nullptr;              // ... on the device, every matrix read in place
  std::vector<QMatrix> samples_;            // the first matrix of each weight type (host): certify's

  int32_t* tok_ = nullptr;                  // [Tm] the current rows' tokens
  int32_t* pos_ = nullptr;                  // [Tm] positions
  int32_t* slot_ = nullptr;                 // [Tm] slots
  int T_ = 0, max_keys_ = 0;                // current rows, and 1 + their largest position
  float* part_ = nullptr;                   // split-K attention partials for Gm rows over C keys
  uint16_t* x16_ = nullptr;                 // [Tm, Kmax] activations rounded for cuBLAS

  std::vector<Graph> graphs_;               // [Gm + 1] by step width T
  bool use_graphs_;
  bool st_ready_ = false;                   // start() has run: stream, cuBLAS, row buffers
  bool capturing_ = false;
  int64_t captures_ = 0;
};

CudaBackend::CudaBackend(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, bool graphs)
    : file_(std::move(file)), cfg_(cfg), S_(cap.n_slots), C_(cap.n_ctx), Tm_(cap.max_batch),
      Gm_(std::min(cap.max_batch, kGraphMaxRows)), span_(tensor_span(*file_)), use_graphs_(graphs) {
  if (S_ < 1 || C_ < 1 || Tm_ < 1) throw std::invalid_argument("model: slots, context and batch must be >= 1");
  const std::string& a = cfg_.arch;
  if (cfg_.n_embd % 32 != 0)
    throw key_error(a, a + ".embedding_length", "is " + std::to_string(cfg_.n_embd),
                    "a multiple of 32 on CUDA (rows are gathered in 32-value blocks)");
}

// The device is first touched here, on the first allocation: an architecture refused at load
// (Backend::require) is refused before anything is asked of the device.
void CudaBackend::start() {
  if (st_ready_) return;
  const cuda::DeviceInfo dev = cuda::probe_device();
  if (dev.count == 0) throw std::runtime_error("model: device cuda: no CUDA device (" + dev.error + ")");
  device_name_ = dev.name;
  const size_t kv = 2 * size_t(cfg_.n_layer) * S_ * cfg_.n_head_kv * C_ * cfg_.head_dim * sizeof(uint16_t);
  const size_t scratch = scratch_floats(cfg_, C_, Tm_) * sizeof(float);
  const size_t need = span_.bytes + kv + scratch + kDeviceReserve;
  if (dev.free_bytes < need)
    throw std::runtime_error("model: device cuda: this model needs " + gib(need) + " on the device (weights " +
                             gib(span_.bytes) + ", KV cache " + gib(kv) + " for " + std::to_string(S_) + " slots x " +
                             std::to_string(C_) + " tokens, scratch " + gib(scratch) + ", reserve " +
                             gib(kDeviceReserve) + ") but " + dev.name + " has " + gib(dev.free_bytes) + " free of " +
                             gib(dev.total_bytes) + "; use fewer --slots, a smaller --ctx, or --device cpu");
  cuda::check((int)cudaSetDevice(0), "cudaSetDevice");
  cuda::check((int)cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking), "cudaStreamCreate");
  blas_ = std::make_unique<cuda::CublasHandle>(st_);
  st_ready_ = true;
  tok_ = alloc_i32(size_t(Tm_));
  pos_ = alloc_i32(size_t(Tm_));
  slot_ = alloc_i32(size_t(Tm_));
  part_ = alloc(cuda::attention_decode_scratch_floats(Gm_, cfg_.n_head, cfg_.head_dim, C_, kKvChunk));
  const size_t Kmax = size_t(std::max(cfg_.n_embd, std::max(cfg_.n_head * cfg_.head_dim, cfg_.n_ff)));
  x16_ = static_cast<uint16_t*>(zeroed(size_t(Tm_) * Kmax * sizeof(uint16_t)));
  graphs_.resize(size_t(Gm_) + 1);
}

CudaBackend::~CudaBackend() {
  if (st_) (void)cudaStreamSynchronize(st_);
  for (Graph& g : graphs_)
    if (g.exec) (void)cudaGraphExecDestroy(g.exec);
  blas_.reset();
  mem_.clear();
  if (st_) (void)cudaStreamDestroy(st_);
}

// Weights: one upload of the whole span, the first time a matrix is placed (an architecture
// refused at load never gets this far).
void CudaBackend::upload_weights() {
  if (weights_ || span_.bytes == 0) return;
  if (!st_ready_) start();
  weights_ = static_cast<uint8_t*>(mem_.emplace_back(span_.bytes).get());
  cuda::upload(weights_, span_.lo, span_.bytes, st_);
}

QMatrix CudaBackend::matrix(const std::string& name, const QMatrix& m) {
  if (!cuda::supported(m.type))
    throw tensor_error(cfg_.arch, name, std::string("has type ") + ggml_type_name(m.type),
                       "one the CUDA kernels read: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K");
  if (m.K % 32 != 0 || m.K % ggml_block_elems(m.type) != 0)
    throw tensor_error(cfg_.arch, name, "has rows of " + std::to_string(m.K) + " values",
                       "a multiple of 32 and of the type's block on CUDA (the kernels read 32-value sub-blocks)");
  if (m.data < span_.lo || m.data >= span_.lo + span_.bytes)
    throw std::logic_error("model: cuda backend: " + name + " lies outside the file's tensor data");
  upload_weights();
  bool seen = false;
  for (const QMatrix& s : samples_) seen |= s.type == m.type;
  if (!seen) samples_.push_back(m);
  return QMatrix{m.type, m.K, m.N, weights_ + (m.data - span_.lo)};
}

KvBuf CudaBackend::alloc_kv(int L, int S, int Hk, int N, int Dh, int G, bool ring) {
  // What the attention kernels are built for (attention.cuh): a start-up error, not a failed step.
  const std::string& a = cfg_.arch;
  if (Dh != 64 && Dh != 128 && Dh != 256)
    throw key_error(a, a + ".attention.key_length", "gives a head dim of " + std::to_string(Dh), "64, 128 or 256 on CUDA");
  if (Hk <= 0 || G > 32)
    throw key_error(a, a + ".attention.head_count_kv", "is " + std::to_string(Hk) + " for " + std::to_string(G * Hk) + " heads",
                    "a divisor of the head count, at most 32 query heads per KV head on CUDA");
  if (ring) unsupported(Op::kv_ring);
  KvBuf kv;
  kv.L = L; kv.S = S; kv.Hk = Hk; kv.N = N; kv.Dh = Dh; kv.ring = ring;
  // Zeros, not garbage: a split-K block past a row's keys never reads them, but NaN bits in an
  // unwritten position would poison any kernel that ever did.
  kv.k = static_cast<uint16_t*>(zeroed(kv.elems() * sizeof(uint16_t)));
  kv.v = static_cast<uint16_t*>(zeroed(kv.elems() * sizeof(uint16_t)));
  return kv;
}

// The start-up gate on this device (the CPU's is certify_kernels): for each weight type the model
// holds, the first rows of its first matrix through the decode matvec (T = 1) and the batched path
// (T = 9, when max_batch allows it: the tensor-core GEMM, or cuBLAS for F16/BF16) against
// dequantize_row and a double sum. Off by more than rounding (f32 sums; f16 operands in the GEMM)
// refuses the load: a kernel that is wrong on this chip would answer wrong tokens.
void CudaBackend::loaded() {
  cuda::sync(st_);  // loaded means on the device: a bad upload fails the load, not the first step
  const int T = std::min(cuda::kMatvecMaxT + 1, Tm_);  // the batched path runs only past kMatvecMaxT rows
  for (const QMatrix& h : samples_) {
    const int64_t K = h.K, N = std::min<int64_t>(h.N, 256);
    std::vector<float> w(size_t(N) * K), x(size_t(T) * K), y1(static_cast<size_t>(N)), yT(size_t(T) * N);  // w [N, K], x [T, K]
    for (int64_t n = 0; n < N; n++) dequantize_row(h, n, &w[size_t(n) * K]);
    for (size_t i = 0; i < x.size(); i++) x[i] = std::sin(0.37f * float(i % 1021)) * (1.f + float(i % 7) * 0.25f);
    const QMatrix dm{h.type, K, N, weights_ + (h.data - span_.lo)};
    DevMem dx(x.size() * sizeof(float)), dy1(y1.size() * sizeof(float)), dyT(yT.size() * sizeof(float));
    cuda::upload(dx.get(), x.data(), x.size() * sizeof(float), st_);
    cuda::matmul(dm, static_cast<float*>(dx.get()), static_cast<float*>(dy1.get()), 1, st_);
    matmul(dm, static_cast<float*>(dx.get()), static_cast<float*>(dyT.get()), T);
    cuda::download(y1.data(), dy1.get(), y1.size() * sizeof(float), st_);
    cuda::download(yT.data(), dyT.get(), yT.size() * sizeof(float), st_);
    cuda::sync(st_);
    double worst1 = 0, worstT = 0;
    for (int t = 0; t < T; t++)
      for (int64_t n = 0; n < N; n++) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; k++) {
          const double p = double(w[size_t(n) * K + k]) * x[size_t(t) * K + k];
          ref += p;
          mag += std::fabs(p);
        }
        const double e = std::fabs(yT[size_t(t) * N + n] - ref) / (mag + 1e-30);
        worstT = std::max(worstT, e);
        if (t == 0) worst1 = std::max(worst1, std::fabs(y1[size_t(n)] - ref) / (mag + 1e-30));
      }
    // f32 sums: ~1e-6 of sum |w x|; the GEMM's f16 operands: ~1e-3. A wrong kernel is off by O(1).
    if (!(worst1 <= 1e-4) || !(worstT <= 1e-2)) {
      char b[160];
      std::snprintf(b, sizeof b, "decode matvec relative error %.3g (limit 1e-4), batched %.3g (limit 1e-2)", worst1, worstT);
      throw std::runtime_error("model: device cuda: the CUDA kernels disagree with the reference on " + device_name_ +
                               " for " + ggml_type_name(h.type) + " weights: " + b);
    }
  }
}

// Pageable sources: cudaMemcpyAsync has read them by the time it returns, so the batch's arrays
// may change once this is back. Never called while capturing (step uploads before it records).
void CudaBackend::set_rows(const Chunk& c) {
  T_ = c.T;
  int max_pos = 0;
  for (int t = 0; t < c.T; t++) max_pos = std::max(max_pos, c.pos[t]);
  max_keys_ = max_pos + 1;
  if (c.T == 0) return;
  cuda::upload(tok_, c.token, size_t(c.T) * sizeof(int32_t), st_);
  cuda::upload(pos_, c.pos, size_t(c.T) * sizeof(int32_t), st_);
  cuda::upload(slot_, c.slot, size_t(c.T) * sizeof(int32_t), st_);
}

void CudaBackend::step(const Chunk& c, int n_wanted, const std::function<void()>& enqueue) {
  set_rows(c);
  if (use_graphs_ && c.T <= Gm_ && n_wanted == c.T) {
    Graph& g = graphs_[size_t(c.T)];
    if (g.state == Graph::warm) capture(c.T, enqueue);
    if (g.state == Graph::captured) {
      cuda::check((int)cudaGraphLaunch(g.exec, st_), "cudaGraphLaunch");
      return;
    }
    if (g.state == Graph::cold) g.state = Graph::warm;
  }
  enqueue();
}

void CudaBackend::capture(int T, const std::function<void()>& enqueue) {
  Graph& g = graphs_[size_t(T)];
  cudaGraph_t graph = nullptr;
  std::string err;
  cuda::check((int)cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  capturing_ = true;
  try {
    enqueue();
  } catch (const std::exception& e) {
    err = e.what();
  }
  capturing_ = false;
  const cudaError_t ec = cudaStreamEndCapture(st_, &graph);  // always leave capture mode
  if (err.empty() && ec != cudaSuccess) err = cudaGetErrorString(ec);
  if (err.empty()) {
    const cudaError_t ei = cudaGraphInstantiate(&g.exec, graph, 0);
    if (ei != cudaSuccess) err = cudaGetErrorString(ei);
  }
  if (graph) (void)cudaGraphDestroy(graph);  // the executable keeps what it needs
  if (!err.empty()) {
    (void)cudaGetLastError();  // a failed capture is not a sticky error: clear it, run eagerly
    if (g.exec) (void)cudaGraphExecDestroy(g.exec);
    g.exec = nullptr;
    g.state = Graph::failed;
    std::fprintf(stderr, "mashbox: cuda backend: a decode step of %d rows was not captured as a CUDA graph (%s); it runs without one\n",
                 T, err.c_str());
    return;
  }
  g.state = Graph::captured;
  captures_++;
}

void CudaBackend::kv_copy(const KvBuf& kv, int src, int dst, int n) {
  if (kv.ring) unsupported(Op::kv_ring);
  // One (layer, slot) is Hk rows of N*Dh values; the first n*Dh of each row are copied.
  const size_t pitch = size_t(kv.N) * kv.Dh * sizeof(uint16_t), width = size_t(n) * kv.Dh * sizeof(uint16_t);
  for (int il = 0; il < kv.L && n > 0; il++)
    for (uint16_t* base : {kv.k, kv.v}) {
      uint16_t* b = base + kv.index(il, 0, 0, 0);
      cuda::check((int)cudaMemcpy2DAsync(b + kv.index(0, dst, 0, 0), pitch, b + kv.index(0, src, 0, 0), pitch, width,
                                         size_t(kv.Hk), cudaMemcpyDeviceToDevice, st_),
                  "kv_copy");
    }
}

void CudaBackend::kv_transfer(const KvBuf& kv, int slot, int pos, int n, uint8_t* host, bool to_host) {
  const size_t row = size_t(kv.Dh) * sizeof(uint16_t), token = size_t(kv.L) * 2 * kv.Hk * row;
  for (int il = 0; il < kv.L && n > 0; il++)
    for (int k_or_v = 0; k_or_v < 2; k_or_v++)
      for (int g = 0; g < kv.Hk; g++) {
        uint16_t* dev = (k_or_v ? kv.v : kv.k) + kv.index(il, slot, g, pos);
        uint8_t* h = host + ((size_t(il) * 2 + k_or_v) * kv.Hk + g) * row;
        if (to_host)
          cuda::check((int)cudaMemcpy2DAsync(h, token, dev, row, row, size_t(n), cudaMemcpyDeviceToHost, st_), "kv_read");
        else
          cuda::check((int)cudaMemcpy2DAsync(dev, row, h, token, row, size_t(n), cudaMemcpyHostToDevice, st_), "kv_write");
      }
  cuda::sync(st_);
}

}  // namespace

const char* cuda_architectures() { return "llama, qwen3"; }

CudaFootprint cuda_footprint(const GgufFile& file, int n_slots, int n_ctx, int max_batch) {
  const std::string arch = file.get_str("general.architecture", "");
  if (!runs_in_full(arch))
    throw std::runtime_error("model: architecture '" + arch + "' does not run on CUDA yet; the CUDA backend runs " +
                             cuda_architectures() + " (use --device cpu for the others)");
  const ModelConfig cfg = read_config(file);
  CudaFootprint fp;
  fp.arch = cfg.arch;
  fp.weight_bytes = tensor_span(file).bytes;
  fp.kv_bytes = 2 * size_t(cfg.n_layer) * n_slots * cfg.n_head_kv * n_ctx * cfg.head_dim * sizeof(uint16_t);
  fp.scratch_bytes = scratch_floats(cfg, n_ctx, max_batch) * sizeof(float);
  return fp;
}

std::unique_ptr<model_detail::Backend> cuda_backend(std::shared_ptr<GgufFile> file, const ModelConfig& cfg,
                                                    const model_detail::Capacity& cap) {
  const char* graphs = std::getenv("MB_CUDA_GRAPHS");
  return std::make_unique<CudaBackend>(std::move(file), cfg, cap, !(graphs && std::string(graphs) == "0"));
}

}  // namespace mb
