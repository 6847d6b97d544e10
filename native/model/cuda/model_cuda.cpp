// The CUDA model: llama (SmolLM2 and the like: tied or separate output head, RoPE on adjacent
// pairs) and qwen3 (an RMSNorm over each head of q and k, RoPE on rotated halves), one forward
// pass on the kernels of kernels/cuda (cuda_ops.h). The same graph as model_llama.cpp and
// model_qwen3.cpp; the numerics differ where cuda_ops.h says (f32 activations into the matmuls).
//
// Dimension legend (see model.h): T rows in this chunk (<= Tm, the max batch given at load),
// D n_embd, H heads, Hk KV heads, Dh head dim, F n_ff, V n_vocab, L layers, S slots, C context
// per slot, W wanted logits rows of one group (<= Wm), Gm the widest step that runs the split-K
// decode attention and may be captured as a CUDA graph, Kmax the widest matmul input
// (max(D, H*Dh, F)).
//
//   x = token_embd[token]                                              x [T, D]
//   each layer:
//     xn = rmsnorm(x) * attn_norm
//     q, k, v = xn·Wq, xn·Wk, xn·Wv                                     q [T, H*Dh]  k, v [T, Hk*Dh]
//     qwen3: q, k = rmsnorm(each head) * q_norm, k_norm                 q_norm, k_norm [Dh]
//     q, k = rope(q), rope(k);  k, v -> KV cache of the row's slot (f16)
//     x += attention(q, K, V)·Wo
//     x += (silu(xn·Wgate) * (xn·Wup))·Wdown,  xn = rmsnorm(x) * ffn_norm
//   logits = (rmsnorm(x[wanted rows]) * output_norm)·Wout              [wanted rows, V]
//
// A step: the rows' tokens, positions, slots and wanted-row indices go up, every layer is one
// stream of kernel launches with no host sync, and the wanted rows' logits come down at the end
// (the step's one sync). A decode-shaped step (T <= Gm rows, every row's logits wanted) of a
// width T seen before is captured as a CUDA graph and replayed from then on: its attention spans
// the whole context C, so the launch shapes stay fixed while positions (device memory) move. The
// first step of each width runs eagerly, which also warms cuBLAS up before anything is captured.
// MB_CUDA_GRAPHS=0 in the environment at load runs every step eagerly (a driver whose graphs
// misbehave can still serve).
#include "model/cuda/model_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/loader.h"

namespace mb {
namespace {
using model_detail::key_error;
using model_detail::read_config;
using model_detail::tensor_error;
using model_detail::WeightLoader;

constexpr int kKvChunk = 256;        // keys per block of the split-K decode attention
constexpr int kGraphMaxRows = 64;    // Gm at most: wider steps are prefill-shaped
constexpr int kMinLogitRows = 64;    // Wm at least (more when there are more slots)
// Left free beside the model: the CUDA context, cuBLAS's workspace, graph executables.
constexpr size_t kDeviceReserve = size_t(512) << 20;

struct Arch {
  const char* name;
  bool qk_norm;    // attn_q_norm / attn_k_norm over each head before RoPE
  bool rope_neox;  // rotate halves, not adjacent pairs
};
constexpr Arch kArchs[] = {{"llama", false, false}, {"qwen3", true, true}};

const Arch& arch_of(const std::string& name) {
  for (const Arch& a : kArchs)
    if (name == a.name) return a;
  throw std::runtime_error("model: architecture '" + name + "' does not run on CUDA; the CUDA model runs " +
                           cuda_architectures() + " (use --device cpu for the others)");
}

// A device buffer of n Ts, freed with its owner.
template <class T>
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t n) : p_(static_cast<T*>(cuda::dev_alloc(n * sizeof(T)))), n_(n) {}
  DevBuf(DevBuf&& o) noexcept : p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p_) (void)cudaFree(p_);  // a destructor has nowhere to report a failed free
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
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

struct Dims {
  int L, D, H, Hk, Dh, F, V, S, C, Tm, Wm, Gm, Kmax;
};
Dims dims_of(const ModelConfig& c, int S, int C, int Tm) {
  Dims d{};
  d.L = c.n_layer;
  d.D = c.n_embd;
  d.H = c.n_head;
  d.Hk = c.n_head_kv;
  d.Dh = c.head_dim;
  d.F = c.n_ff;
  d.V = c.n_vocab;
  d.S = S;
  d.C = C;
  d.Tm = Tm;
  d.Wm = std::min(Tm, std::max(S, kMinLogitRows));
  d.Gm = std::min(Tm, kGraphMaxRows);  // <= Wm: a captured step's logits fit one group
  d.Kmax = std::max(d.D, std::max(d.H * d.Dh, d.F));
  return d;
}

// Floats of activation scratch (the buffers CudaModel allocates at load, in the same order).
size_t scratch_floats(const Dims& d) {
  const size_t Tm = size_t(d.Tm), HD = size_t(d.H) * d.Dh, KD = size_t(d.Hk) * d.Dh;
  return 3 * Tm * d.D + 2 * Tm * HD + 2 * Tm * KD + 2 * Tm * d.F + size_t(d.Wm) * d.D + size_t(d.Wm) * d.V +
         cuda::attention_decode_scratch_floats(d.Gm, d.H, d.Dh, d.C, kKvChunk) + (Tm * d.Kmax + 1) / 2 + 4 * Tm;
}

std::string gib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  return b;
}

class CudaModel final : public Model {
 public:
  CudaModel(std::shared_ptr<GgufFile> file, ModelConfig cfg, const Arch& arch, int S, int C, int Tm, bool graphs);
  ~CudaModel() override;
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelConfig& config() const override { return cfg_; }
  void forward(const Batch& b, float* out) override;
  void kv_truncate(int slot, int pos) override {
    if (slot < 0 || slot >= d_.S) throw std::out_of_range("model: kv_truncate slot out of range");
    slot_len_[slot] = std::max(0, std::min(slot_len_[slot], pos));  // attention reads only [0, pos]
  }
  void kv_copy(int src, int dst, int n) override;
  size_t kv_bytes() const override { return 2 * size_t(d_.L) * d_.S * d_.Hk * d_.C * d_.Dh * sizeof(uint16_t); }
  // The host prompt cache's layout, as the CPU models hand it out: per position [L][K, V][Hk][Dh] f16.
  size_t kv_token_bytes() const override { return size_t(d_.L) * 2 * d_.Hk * d_.Dh * sizeof(uint16_t); }
  std::string kv_type() const override { return "f16"; }
  void kv_read(int slot, int pos, int n, uint8_t* dst) const override;
  void kv_write(int slot, int pos, int n, const uint8_t* src) override;
  int64_t graph_captures() const override { return captures_; }

 private:
  struct Layer {
    QMatrix wq, wk, wv, wo;        // [D -> H*Dh], [D -> Hk*Dh] x2, [H*Dh -> D]
    QMatrix gate, up, down;        // [D -> F] x2, [F -> D]
    const float* attn_norm;        // [D]
    const float* q_norm;           // [Dh] qwen3 only, else nullptr
    const float* k_norm;           // [Dh] qwen3 only, else nullptr
    const float* ffn_norm;         // [D]
  };
  struct Graph {
    enum State { cold, warm, captured, failed } state = cold;
    cudaGraphExec_t exec = nullptr;
  };

  void validate(const Batch& b);
  // Copies positions [pos, pos + n) of a slot between the device cache and token-major host rows
  // (kv_token_bytes() each): one strided copy per (layer, K or V, KV head).
  void kv_transfer(int slot, int pos, int n, uint8_t* host, bool to_host) const;
  int run_chunk(const Batch& b, int t0, int T, float* out);  // returns the rows whose logits it wrote
  void enqueue_layers(int T, int max_keys, bool decode);     // x [T, D] through every layer
  void enqueue_logits(int w0, int n);                        // logits [n, V] of wanted rows w0..
  void capture(int T);
  void certify(const std::vector<QMatrix>& samples, const uint8_t* span_lo, const std::string& device_name);
  // y[T, N] = x[T, K] · W^T: cuBLAS for F16/BF16 weights past the matvec's rows, else the kernels' dispatch.
  void mm(const QMatrix& W, const float* x, float* y, int T) {
    if (T > cuda::kMatvecMaxT && cuda::cublas_supported(W.type)) cuda::gemm_cublas(*blas_, W, x, x16_.get(), y, T, st_);
    else cuda::matmul(W, x, y, T, st_);
  }

  std::shared_ptr<GgufFile> file_;
  ModelConfig cfg_;
  const Arch& arch_;
  Dims d_;
  cudaStream_t st_ = nullptr;
  std::unique_ptr<cuda::CublasHandle> blas_;

  DevBuf<uint8_t> weights_;                 // the file's tensor data, every matrix read in place
  DevBuf<float> norms_;                     // every norm weight as f32, back to back
  QMatrix token_embd_;                      // [D -> V], rows are embeddings
  QMatrix output_;                          // [D -> V], token_embd_ when the file ties them
  const float* output_norm_ = nullptr;      // [D]
  std::vector<Layer> layers_;               // [L]

  std::vector<DevBuf<uint16_t>> k_cache_;   // [L] of [S][Hk][C][Dh] f16
  std::vector<DevBuf<uint16_t>> v_cache_;   // [L] of [S][Hk][C][Dh] f16
  std::vector<int> slot_len_;               // [S] positions [0, len) hold valid KV
  std::vector<int> len_scratch_;            // [S] slot_len_ while a batch is being validated

  DevBuf<float> x_;                         // [Tm, D] residual stream
  DevBuf<float> xn_;                        // [Tm, D] normed input of a sublayer
  DevBuf<float> y_;                         // [Tm, D] sublayer output before the residual add
  DevBuf<float> q_;                         // [Tm, H*Dh]
  DevBuf<float> att_;                       // [Tm, H*Dh] attention output before wo
  DevBuf<float> k_;                         // [Tm, Hk*Dh]
  DevBuf<float> v_;                         // [Tm, Hk*Dh]
  DevBuf<float> gate_;                      // [Tm, F] SwiGLU gate, then silu(gate) * up
  DevBuf<float> up_;                        // [Tm, F]
  DevBuf<float> last_;                      // [Wm, D] normed wanted rows
  DevBuf<float> logits_;                    // [Wm, V]
  DevBuf<float> part_;                      // split-K attention partials for Gm rows over C keys
  DevBuf<uint16_t> x16_;                    // [Tm, Kmax] activations rounded for cuBLAS
  DevBuf<int32_t> tok_, pos_, slot_;        // [Tm] this chunk's rows
  DevBuf<int32_t> rows_;                    // [Tm] chunk rows whose logits are wanted, in order
  std::vector<int32_t> rows_host_;          // [<= Tm] the same, being built

  std::vector<Graph> graphs_;               // [Gm + 1] by step width T
  bool use_graphs_;
  int64_t captures_ = 0;
};

CudaModel::CudaModel(std::shared_ptr<GgufFile> file, ModelConfig cfg, const Arch& arch, int S, int C, int Tm,
                     bool graphs)
    : file_(std::move(file)), cfg_(std::move(cfg)), arch_(arch), d_(dims_of(cfg_, S, C, Tm)), use_graphs_(graphs) {
  cfg_.rope_neox = arch.rope_neox;
  const GgufFile& f = *file_;
  if (d_.F <= 0) throw key_error(cfg_.arch, cfg_.arch + ".feed_forward_length", "is " + std::to_string(d_.F), "a positive number");
  if (d_.D % 32 != 0)
    throw key_error(cfg_.arch, cfg_.arch + ".embedding_length", "is " + std::to_string(d_.D),
                    "a multiple of 32 on CUDA (rows are gathered in 32-value blocks)");
  // What the attention kernels are built for (attention.cuh): a start-up error, not a failed step.
  if (d_.Dh != 64 && d_.Dh != 128 && d_.Dh != 256)
    throw key_error(cfg_.arch, cfg_.arch + ".attention.key_length", "gives a head dim of " + std::to_string(d_.Dh),
                    "64, 128 or 256 on CUDA");
  if (d_.Hk <= 0 || d_.H % d_.Hk != 0 || d_.H / d_.Hk > 32)
    throw key_error(cfg_.arch, cfg_.arch + ".attention.head_count_kv", "is " + std::to_string(d_.Hk) + " for " + std::to_string(d_.H) + " heads",
                    "a divisor of the head count, at most 32 query heads per KV head on CUDA");
  for (int il = 0; il < d_.L; il++)
    for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
      const std::string name = WeightLoader::blk(il) + b;
      if (f.tensor(name))
        throw tensor_error(cfg_.arch, name, "is present", "no Q/K/V biases on CUDA (the CUDA model does not add them; use --device cpu)");
    }

  // Every matrix checked (shape, type) before anything is allocated on the device.
  const WeightLoader w(f, cfg_);
  auto check_cuda_type = [&](const std::string& name, const QMatrix& m) {
    if (!cuda::supported(m.type))
      throw tensor_error(cfg_.arch, name, std::string("has type ") + ggml_type_name(m.type),
                         "one the CUDA kernels read: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K");
    if (m.K % 32 != 0 || m.K % ggml_block_elems(m.type) != 0)
      throw tensor_error(cfg_.arch, name, "has rows of " + std::to_string(m.K) + " values",
                         "a multiple of 32 and of the type's block on CUDA (the kernels read 32-value sub-blocks)");
  };
  token_embd_ = w.token_embd();
  output_ = w.output(token_embd_);
  check_cuda_type("token_embd.weight", token_embd_);
  check_cuda_type(f.tensor("output.weight") ? "output.weight" : "token_embd.weight", output_);
  std::vector<float> norms;                 // host copy of norms_
  std::vector<size_t> norm_at;              // where each norm starts in it, in the order taken
  auto take_norm = [&](std::vector<float> v) {
    norm_at.push_back(norms.size());
    norms.insert(norms.end(), v.begin(), v.end());
  };
  take_norm(w.vector("output_norm.weight", d_.D));
  layers_.resize(d_.L);
  for (int il = 0; il < d_.L; il++) {
    const std::string p = WeightLoader::blk(il);
    const model_detail::AttentionWeights a = w.attention(il, model_detail::Biases::optional);
    const model_detail::SwiGluWeights s = w.swiglu(il);
    Layer& l = layers_[il];
    l = Layer{a.wq, a.wk, a.wv, a.wo, s.gate, s.up, s.down, nullptr, nullptr, nullptr, nullptr};
    const char* names[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    const QMatrix* ms[] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down};
    for (int i = 0; i < 7; i++) check_cuda_type(p + names[i] + ".weight", *ms[i]);
    take_norm(a.norm);
    take_norm(s.norm);
    if (arch_.qk_norm) {
      take_norm(w.vector(p + "attn_q_norm.weight", d_.Dh));
      take_norm(w.vector(p + "attn_k_norm.weight", d_.Dh));
    }
  }

  // The device, and room on it.
  const cuda::DeviceInfo dev = cuda::probe_device();
  if (dev.count == 0)
    throw std::runtime_error("model: device cuda: asked for a CUDA device, found none (" + dev.error + ")");
  const CudaFootprint fp = cuda_footprint(f, S, C, Tm);
  if (fp.total() + kDeviceReserve > dev.free_bytes)
    throw std::runtime_error("model: device cuda: this model needs " + gib(fp.total() + kDeviceReserve) +
                             " on the device (weights " + gib(fp.weight_bytes) + ", KV cache " + gib(fp.kv_bytes) +
                             " for " + std::to_string(S) + " slots x " + std::to_string(C) + " tokens, scratch " +
                             gib(fp.scratch_bytes) + ", reserve " + gib(kDeviceReserve) + ") but " + dev.name +
                             " has " + gib(dev.free_bytes) + " free of " + gib(dev.total_bytes) +
                             "; use fewer --slots, a smaller --ctx, or --device cpu");
  cuda::check((int)cudaSetDevice(0), "cudaSetDevice");
  cuda::check((int)cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking), "cudaStreamCreate");
  blas_ = std::make_unique<cuda::CublasHandle>(st_);

  // The first matrix of each weight type, on the host still: the start-up gate's samples.
  std::vector<QMatrix> samples;
  auto sample = [&](const QMatrix& m) {
    for (const QMatrix& s : samples)
      if (s.type == m.type) return;
    samples.push_back(m);
  };
  sample(token_embd_);
  sample(output_);
  for (const Layer& l : layers_)
    for (const QMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) sample(*m);

  // Weights: one upload; each matrix points at its own bytes inside it.
  const TensorSpan span = tensor_span(f);
  weights_ = DevBuf<uint8_t>(span.bytes);
  cuda::upload(weights_.get(), span.lo, span.bytes, st_);
  auto on_device = [&](QMatrix& m) { m.data = weights_.get() + (m.data - span.lo); };
  on_device(token_embd_);
  on_device(output_);
  for (Layer& l : layers_)
    for (QMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) on_device(*m);
  norms_ = DevBuf<float>(norms.size());
  cuda::upload(norms_.get(), norms.data(), norms.size() * sizeof(float), st_);
  size_t ni = 0;
  output_norm_ = norms_.get() + norm_at[ni++];
  for (Layer& l : layers_) {
    l.attn_norm = norms_.get() + norm_at[ni++];
    l.ffn_norm = norms_.get() + norm_at[ni++];
    if (arch_.qk_norm) {
      l.q_norm = norms_.get() + norm_at[ni++];
      l.k_norm = norms_.get() + norm_at[ni++];
    }
  }

  const size_t kv_n = size_t(d_.S) * d_.Hk * d_.C * d_.Dh;
  for (int il = 0; il < d_.L; il++) {
    k_cache_.emplace_back(kv_n);
    v_cache_.emplace_back(kv_n);
    // Zeros, not garbage: a split-K block past a row's keys never reads them, but NaN bits in an
    // unwritten position would poison any kernel that ever did.
    cuda::check((int)cudaMemsetAsync(k_cache_.back().get(), 0, kv_n * sizeof(uint16_t), st_), "cudaMemsetAsync");
    cuda::check((int)cudaMemsetAsync(v_cache_.back().get(), 0, kv_n * sizeof(uint16_t), st_), "cudaMemsetAsync");
  }
  slot_len_.assign(d_.S, 0);
  len_scratch_.assign(d_.S, 0);

  const size_t Tm_ = size_t(d_.Tm), HD = size_t(d_.H) * d_.Dh, KD = size_t(d_.Hk) * d_.Dh;
  x_ = DevBuf<float>(Tm_ * d_.D);
  xn_ = DevBuf<float>(Tm_ * d_.D);
  y_ = DevBuf<float>(Tm_ * d_.D);
  q_ = DevBuf<float>(Tm_ * HD);
  att_ = DevBuf<float>(Tm_ * HD);
  k_ = DevBuf<float>(Tm_ * KD);
  v_ = DevBuf<float>(Tm_ * KD);
  gate_ = DevBuf<float>(Tm_ * d_.F);
  up_ = DevBuf<float>(Tm_ * d_.F);
  last_ = DevBuf<float>(size_t(d_.Wm) * d_.D);
  logits_ = DevBuf<float>(size_t(d_.Wm) * d_.V);
  part_ = DevBuf<float>(cuda::attention_decode_scratch_floats(d_.Gm, d_.H, d_.Dh, d_.C, kKvChunk));
  x16_ = DevBuf<uint16_t>(Tm_ * d_.Kmax);
  tok_ = DevBuf<int32_t>(Tm_);
  pos_ = DevBuf<int32_t>(Tm_);
  slot_ = DevBuf<int32_t>(Tm_);
  rows_ = DevBuf<int32_t>(Tm_);
  rows_host_.reserve(Tm_);
  graphs_.resize(size_t(d_.Gm) + 1);
  cuda::sync(st_);  // loaded means on the device: a bad upload fails the load, not the first step
  certify(samples, span.lo, dev.name);
}

// The start-up gate on this device (the CPU's is certify_kernels): for each weight type the model
// holds, the first rows of its first matrix through the decode matvec (T = 1) and the batched path
// (T = 9, when max_batch allows it: the tensor-core GEMM, or cuBLAS for F16/BF16) against
// dequantize_row and a double sum.
// Off by more than rounding (f32 sums; f16 operands in the GEMM) refuses the load: a kernel that is
// wrong on this chip would answer wrong tokens.
void CudaModel::certify(const std::vector<QMatrix>& samples, const uint8_t* span_lo, const std::string& device_name) {
  const int T = std::min(cuda::kMatvecMaxT + 1, d_.Tm);  // the batched path runs only past kMatvecMaxT rows
  for (const QMatrix& h : samples) {
    const int64_t K = h.K, N = std::min<int64_t>(h.N, 256);
    std::vector<float> w(size_t(N) * K), x(size_t(T) * K), y1(static_cast<size_t>(N)), yT(size_t(T) * N);  // w [N, K], x [T, K]
    for (int64_t n = 0; n < N; n++) dequantize_row(h, n, &w[size_t(n) * K]);
    for (size_t i = 0; i < x.size(); i++) x[i] = std::sin(0.37f * float(i % 1021)) * (1.f + float(i % 7) * 0.25f);
    const QMatrix dm{h.type, K, N, weights_.get() + (h.data - span_lo)};
    DevBuf<float> dx(x.size()), dy1(y1.size()), dyT(yT.size());
    cuda::upload(dx.get(), x.data(), x.size() * sizeof(float), st_);
    cuda::matmul(dm, dx.get(), dy1.get(), 1, st_);
    mm(dm, dx.get(), dyT.get(), T);
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
      throw std::runtime_error("model: device cuda: the CUDA kernels disagree with the reference on " + device_name + " for " +
                               ggml_type_name(h.type) + " weights: " + b);
    }
  }
}

CudaModel::~CudaModel() {
  if (st_) (void)cudaStreamSynchronize(st_);
  for (Graph& g : graphs_)
    if (g.exec) (void)cudaGraphExecDestroy(g.exec);
  blas_.reset();
  if (st_) (void)cudaStreamDestroy(st_);
}

// The same checks as Transformer::validate: rows in range, each slot continued without a hole.
void CudaModel::validate(const Batch& b) {
  const int T = (int)b.token.size();
  if ((int)b.pos.size() != T || (int)b.slot.size() != T || (int)b.logits.size() != T)
    throw std::invalid_argument("model: batch arrays differ in length");
  std::vector<int>& len = len_scratch_;  // committed to slot_len_ only if the whole batch is valid
  len = slot_len_;
  for (int t = 0; t < T; t++) {
    const int s = b.slot[t], p = b.pos[t], tok = b.token[t];
    std::string err;
    if (s < 0 || s >= d_.S) err = "slot " + std::to_string(s) + " out of range";
    else if (p < 0 || p >= d_.C) err = "position " + std::to_string(p) + " outside the context of " + std::to_string(d_.C);
    else if (p > len[s]) err = "position " + std::to_string(p) + " leaves a hole in slot " + std::to_string(s);
    else if (tok < 0 || tok >= d_.V) err = "token id " + std::to_string(tok) + " outside the vocabulary";
    if (!err.empty()) throw std::invalid_argument("model: batch row " + std::to_string(t) + ": " + err);
    len[s] = std::max(len[s], p + 1);
  }
  slot_len_.swap(len_scratch_);
}

void CudaModel::forward(const Batch& b, float* out) {
  validate(b);
  try {
    const int T = (int)b.token.size();
    size_t n_out = 0;
    for (int t0 = 0; t0 < T; t0 += d_.Tm) {
      const int n = std::min(d_.Tm, T - t0);
      n_out += size_t(run_chunk(b, t0, n, out + n_out * size_t(d_.V)));
    }
    cuda::sync(st_);
  } catch (const std::exception& e) {
    throw DeviceError(std::string("device cuda: ") + e.what());
  }
}

int CudaModel::run_chunk(const Batch& b, int t0, int T, float* out) {
  // Pageable sources: cudaMemcpyAsync has read them by the time it returns.
  cuda::upload(tok_.get(), &b.token[t0], size_t(T) * sizeof(int32_t), st_);
  cuda::upload(pos_.get(), &b.pos[t0], size_t(T) * sizeof(int32_t), st_);
  cuda::upload(slot_.get(), &b.slot[t0], size_t(T) * sizeof(int32_t), st_);
  rows_host_.clear();
  int max_pos = 0;
  for (int t = 0; t < T; t++) {
    if (b.logits[t0 + t]) rows_host_.push_back(t);
    max_pos = std::max(max_pos, b.pos[t0 + t]);
  }
  const int nw = (int)rows_host_.size();
  if (nw > 0) cuda::upload(rows_.get(), rows_host_.data(), size_t(nw) * sizeof(int32_t), st_);
  const bool decode = T <= d_.Gm;
  if (use_graphs_ && decode && nw == T) {
    Graph& g = graphs_[T];
    if (g.state == Graph::warm) capture(T);
    if (g.state == Graph::captured) {
      cuda::check((int)cudaGraphLaunch(g.exec, st_), "cudaGraphLaunch");
      cuda::download(out, logits_.get(), size_t(T) * d_.V * sizeof(float), st_);
      return nw;
    }
    if (g.state == Graph::cold) g.state = Graph::warm;
  }
  enqueue_layers(T, max_pos + 1, decode);
  for (int w0 = 0; w0 < nw; w0 += d_.Wm) {
    const int n = std::min(d_.Wm, nw - w0);
    enqueue_logits(w0, n);
    cuda::download(out + size_t(w0) * d_.V, logits_.get(), size_t(n) * d_.V * sizeof(float), st_);
  }
  return nw;
}

void CudaModel::enqueue_layers(int T, int max_keys, bool decode) {
  const int D = d_.D, H = d_.H, Hk = d_.Hk, Dh = d_.Dh;
  const float eps = cfg_.rms_eps, scale = 1.f / std::sqrt((float)Dh);
  cuda::get_rows(token_embd_, tok_.get(), T, x_.get(), st_);                              // x [T, D]
  for (int il = 0; il < d_.L; il++) {
    const Layer& l = layers_[il];
    cuda::rmsnorm_rows(xn_.get(), x_.get(), l.attn_norm, T, D, eps, st_);                 // xn [T, D]
    mm(l.wq, xn_.get(), q_.get(), T);                                                     // q [T, H*Dh]
    mm(l.wk, xn_.get(), k_.get(), T);                                                     // k [T, Hk*Dh]
    mm(l.wv, xn_.get(), v_.get(), T);                                                     // v [T, Hk*Dh]
    if (arch_.qk_norm) {
      cuda::rmsnorm_rows(q_.get(), q_.get(), l.q_norm, T * H, Dh, eps, st_);
      cuda::rmsnorm_rows(k_.get(), k_.get(), l.k_norm, T * Hk, Dh, eps, st_);
    }
    cuda::rope(q_.get(), pos_.get(), T, H, Dh, cfg_.rope_dim, cfg_.rope_freq_base, cfg_.rope_neox, st_);
    cuda::rope(k_.get(), pos_.get(), T, Hk, Dh, cfg_.rope_dim, cfg_.rope_freq_base, cfg_.rope_neox, st_);
    const cuda::KvLayer kv{k_cache_[il].get(), v_cache_[il].get(), d_.S, Hk, d_.C, Dh};
    cuda::store_kv(kv, k_.get(), v_.get(), slot_.get(), pos_.get(), T, st_);
    if (decode)
      cuda::attention_decode(kv, q_.get(), att_.get(), slot_.get(), pos_.get(), T, H, scale, max_keys, kKvChunk,
                             part_.get(), st_);                                           // att [T, H*Dh]
    else
      cuda::attention_prefill(kv, q_.get(), att_.get(), slot_.get(), pos_.get(), T, H, scale, st_);
    mm(l.wo, att_.get(), y_.get(), T);                                                    // y [T, D]
    cuda::add(x_.get(), y_.get(), int64_t(T) * D, st_);
    cuda::rmsnorm_rows(xn_.get(), x_.get(), l.ffn_norm, T, D, eps, st_);                  // xn [T, D]
    mm(l.gate, xn_.get(), gate_.get(), T);                                                // gate [T, F]
    mm(l.up, xn_.get(), up_.get(), T);                                                    // up [T, F]
    cuda::silu_mul(gate_.get(), up_.get(), int64_t(T) * d_.F, st_);
    mm(l.down, gate_.get(), y_.get(), T);                                                 // y [T, D]
    cuda::add(x_.get(), y_.get(), int64_t(T) * D, st_);
  }
}

void CudaModel::enqueue_logits(int w0, int n) {
  // x read as an F32 matrix of Tm rows, so the wanted rows are gathered by the embedding kernel.
  const QMatrix x_rows{GgmlType::F32, d_.D, d_.Tm, reinterpret_cast<const uint8_t*>(x_.get())};
  cuda::get_rows(x_rows, rows_.get() + w0, n, last_.get(), st_);                           // last [n, D]
  cuda::rmsnorm_rows(last_.get(), last_.get(), output_norm_, n, d_.D, cfg_.rms_eps, st_);
  mm(output_, last_.get(), logits_.get(), n);                                              // logits [n, V]
}

void CudaModel::capture(int T) {
  Graph& g = graphs_[T];
  cudaGraph_t graph = nullptr;
  std::string err;
  cuda::check((int)cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    enqueue_layers(T, d_.C, true);
    enqueue_logits(0, T);
  } catch (const std::exception& e) {
    err = e.what();
  }
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
    std::fprintf(stderr, "mashbox: cuda model: a decode step of %d rows was not captured as a CUDA graph (%s); it runs without one\n",
                 T, err.c_str());
    return;
  }
  g.state = Graph::captured;
  captures_++;
}

void CudaModel::kv_copy(int src, int dst, int n) {
  if (src < 0 || src >= d_.S || dst < 0 || dst >= d_.S) throw std::out_of_range("model: kv_copy slot out of range");
  if (n < 0 || n > slot_len_[src]) throw std::out_of_range("model: kv_copy beyond the source slot's length");
  if (src == dst) return;
  try {
    // One (layer, slot) is Hk rows of C*Dh values; the first n*Dh of each row are copied.
    const size_t pitch = size_t(d_.C) * d_.Dh * sizeof(uint16_t), width = size_t(n) * d_.Dh * sizeof(uint16_t);
    const size_t slot_elems = size_t(d_.Hk) * d_.C * d_.Dh;
    for (int il = 0; il < d_.L && n > 0; il++)
      for (auto* cache : {&k_cache_, &v_cache_}) {
        uint16_t* base = (*cache)[il].get();
        cuda::check((int)cudaMemcpy2DAsync(base + size_t(dst) * slot_elems, pitch, base + size_t(src) * slot_elems, pitch,
                                           width, size_t(d_.Hk), cudaMemcpyDeviceToDevice, st_),
                    "kv_copy");
      }
  } catch (const std::exception& e) {
    throw DeviceError(std::string("device cuda: ") + e.what());
  }
  slot_len_[dst] = n;
}

void CudaModel::kv_transfer(int slot, int pos, int n, uint8_t* host, bool to_host) const {
  const size_t row = size_t(d_.Dh) * sizeof(uint16_t), token = kv_token_bytes();
  try {
    for (int il = 0; il < d_.L && n > 0; il++)
      for (int kv = 0; kv < 2; kv++)
        for (int g = 0; g < d_.Hk; g++) {
          uint16_t* dev = (kv ? v_cache_ : k_cache_)[il].get() + ((size_t(slot) * d_.Hk + g) * d_.C + pos) * d_.Dh;
          uint8_t* h = host + ((size_t(il) * 2 + kv) * d_.Hk + g) * row;
          if (to_host)
            cuda::check((int)cudaMemcpy2DAsync(h, token, dev, row, row, size_t(n), cudaMemcpyDeviceToHost, st_), "kv_read");
          else
            cuda::check((int)cudaMemcpy2DAsync(dev, row, h, token, row, size_t(n), cudaMemcpyHostToDevice, st_), "kv_write");
        }
    cuda::sync(st_);
  } catch (const std::exception& e) {
    throw DeviceError(std::string("device cuda: ") + e.what());
  }
}

void CudaModel::kv_read(int slot, int pos, int n, uint8_t* dst) const {
  if (slot < 0 || slot >= d_.S) throw std::out_of_range("model: kv_read slot out of range");
  if (pos < 0 || n < 0 || pos + n > slot_len_[slot]) throw std::out_of_range("model: kv_read beyond the slot's length");
  kv_transfer(slot, pos, n, dst, true);
}

void CudaModel::kv_write(int slot, int pos, int n, const uint8_t* src) {
  if (slot < 0 || slot >= d_.S) throw std::out_of_range("model: kv_write slot out of range");
  if (pos < 0 || n < 0 || pos > slot_len_[slot] || pos + n > d_.C) throw std::out_of_range("model: kv_write outside the slot");
  kv_transfer(slot, pos, n, const_cast<uint8_t*>(src), false);  // read only: the host side is the source
  slot_len_[slot] = pos + n;
}

}  // namespace

const char* cuda_architectures() { return "llama, qwen3"; }

CudaFootprint cuda_footprint(const GgufFile& file, int n_slots, int n_ctx, int max_batch) {
  arch_of(file.get_str("general.architecture", ""));
  const ModelConfig cfg = read_config(file);
  const Dims d = dims_of(cfg, n_slots, n_ctx, max_batch);
  CudaFootprint fp;
  fp.arch = cfg.arch;
  fp.weight_bytes = tensor_span(file).bytes;
  fp.kv_bytes = 2 * size_t(d.L) * d.S * d.Hk * d.C * d.Dh * sizeof(uint16_t);
  fp.scratch_bytes = scratch_floats(d) * sizeof(float);
  return fp;
}

std::unique_ptr<Model> load_cuda(std::shared_ptr<GgufFile> file, int n_slots, int n_ctx, int max_batch) {
  if (!file) throw std::invalid_argument("model: no GGUF file");
  if (n_slots < 1 || n_ctx < 1 || max_batch < 1) throw std::invalid_argument("model: slots, context and batch must be >= 1");
  const Arch& arch = arch_of(file->get_str("general.architecture", ""));
  ModelConfig cfg = read_config(*file);
  const char* graphs = std::getenv("MB_CUDA_GRAPHS");
  return std::make_unique<CudaModel>(std::move(file), std::move(cfg), arch, n_slots, n_ctx, max_batch,
                                     !(graphs && std::string(graphs) == "0"));
}

}  // namespace mb
