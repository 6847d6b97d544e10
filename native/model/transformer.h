// Internal to native/model: what every decoder-only architecture here shares, so that each
// model_<arch>.cpp can spell out its forward pass in a screenful. Transformer implements the
// engine-facing Model calls (batch checks, splitting a batch into chunks of at most Tm tokens,
// the f16 KV cache and its slots), loads the embedding and output head every architecture here
// has, and owns the activation buffers; the architecture loads its layers and implements
// forward_chunk() from the helpers below.
//
// Dimension legend (see model.h): T tokens in this chunk (<= Tm, the max batch given at load),
// D n_embd, H heads, Hk KV heads, G = H / Hk query heads per KV head, Dh head dim, F n_ff (per
// expert for MoE), E experts, Ek experts per token, V n_vocab, S slots, C context per slot,
// L layers, P threads in the pool, Bq query positions per attention work item.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/backend.h"
#include "model/loader.h"
#include "model/model.h"

namespace mb {
namespace model_detail {

struct Capacity {
  int n_slots;    // S
  int n_ctx;      // C
  int max_batch;  // Tm
};

// f32 -> IEEE binary16 bits, round to nearest even as ggml does for its f16 KV cache.
uint16_t f32_to_f16(float f);

class Transformer : public Model {
 public:
  // own_kv = false: the architecture keeps its own K/V (gemma3's sliding-window rings) in kv_,
  // so no [L][S][Hk][C][Dh] buffer is allocated here.
  Transformer(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap,
              std::unique_ptr<Backend> backend, bool own_kv = true);
  const ModelConfig& config() const override { return cfg_; }
  void forward(const Batch& batch, float* out) override;
  void kv_truncate(int slot, int pos) override;
  void kv_copy(int src, int dst, int n) override;
  size_t kv_bytes() const override;
  size_t kv_token_bytes() const override;
  std::string kv_type() const override { return "f16"; }  // kv_ below
  void kv_read(int slot, int pos, int n, uint8_t* dst) const override;
  void kv_write(int slot, int pos, int n, const uint8_t* src) override;
  std::vector<std::pair<std::string, int64_t>> routed_expert_calls() const override;
  int64_t graph_captures() const override { return be_->graph_captures(); }
  // Every weight is placed: the backend may check its kernels on them.
  void loaded() { be_->loaded(); }

 protected:
  // The architecture's forward pass over one chunk, as backend ops: writes K/V of every row into
  // the cache and logits[n_wanted, V] (backend memory) for the rows with want[t] == 1, in order.
  virtual void forward_chunk(const Chunk& c, float* logits) = 0;

  int slot_len(int slot) const { return slot_len_[slot]; }  // positions [0, len) of the slot hold K/V

  // ---- helpers for forward_chunk; "rows" means the T rows of a [T, D] buffer ----
  QMatrix matrix(const QMatrix& m, const std::string& name) { return be_->matrix(name, m); }
  void mm(const QMatrix& W, const float* x, float* y, int T) { be_->matmul(W, x, y, T); }  // y[T, N] = x[T, K]·W^T
  void embed(float* x) { be_->embed(token_embd_, x); }  // x[T, D] = token_embd rows of the chunk's tokens
  // out[T, D] = rmsnorm(x[T, D]) * w[D], row by row.
  void rmsnorm_rows(float* out, const float* x, const float* w, int T) { be_->rmsnorm(out, x, w, T, D_, cfg_.rms_eps); }
  void add_rows(float* x, const float* y, int T) { be_->add(x, y, T, D_); }  // x[T, D] += y[T, D]
  // q_[T, H*Dh], k_[T, Hk*Dh], v_[T, Hk*Dh] = xn·Wq, xn·Wk, xn·Wv, plus the biases w carries.
  void project_qkv(const AttentionWeights& w, const float* xn, int T);
  // RMSNorm of each Dh-long head of x[T, n_heads * Dh], with the same weight w[Dh] for every head.
  void rmsnorm_heads(float* x, int n_heads, const float* w, int T) {
    be_->rmsnorm(x, x, w, T * n_heads, Dh_, cfg_.rms_eps);
  }
  // RoPE of each head of x[T, n_heads * Dh] at its row's position, as the config says (dims, base, neox).
  void rope_heads(float* x, int n_heads, int T) {
    be_->rope(x, n_heads, Dh_, RopeArgs{cfg_.rope_dim, cfg_.rope_freq_base, cfg_.rope_neox}, T);
  }
  // Rows' k_, v_ [T, Hk*Dh] into layer il of the cache at their (slot, pos), rounded to f16.
  void store_kv(int il, int T) { be_->store_kv(kv_[0], il, k_, v_, T); }
  // att[T, H*Dh] = causal softmax(q·K^T / sqrt(Dh)) · V of each row against its slot's cache.
  // kq_scale 0 means 1/sqrt(Dh); an architecture that scales q itself (phi3) passes 1. window > 0:
  // a row at p sees only keys [p - window + 1, p]; sinks [H]: a logit per head that joins the
  // softmax without a value (gpt-oss); see mb::attention.
  void attention(int il, const float* q, float* att, int T, float kq_scale = 0.f, int window = 0,
                 const float* sinks = nullptr);
  // out[T, D] = (silu(xn·Wgate) * (xn·Wup)) · Wdown, through gate_ and up_.
  void swiglu(const SwiGluWeights& w, const float* xn, float* out, int T);
  // For mixture-of-experts layers: res[t, k, :] = expert sel[t, k] of xn[t], counted for Health.
  void run_experts(const ExpertFfn& f, const float* xn, int Ek, const int32_t* sel, float* res, int T) {
    const int ran = be_->experts(f, xn, Ek, sel, res, T);
    gate_exps_calls_ += ran; up_exps_calls_ += ran; down_exps_calls_ += ran;
  }
  // logits[n_wanted, V] = (rmsnorm(x[t]) * output_norm) · output^T for the wanted rows only.
  void logits_of_wanted(const Chunk& c, float* x, float* logits);
  // The last layer, once every row's K and V are stored, only matters for the rows whose logits
  // are wanted (one row in a prompt's last chunk, none in the others): moves those rows of each
  // (buffer, row width) to the front, in order, and returns the chunk of just them, now the
  // backend's current rows. Rows do not depend on each other, so they get the same bits as with
  // the whole chunk.
  Chunk wanted_rows(const Chunk& c, std::initializer_list<std::pair<float*, int>> bufs);

  std::unique_ptr<Backend> be_;             // declared first: every buffer below is its memory
  std::shared_ptr<GgufFile> file_;
  ModelConfig cfg_;
  int S_, C_, Tm_;
  int L_, D_, H_, Hk_, G_, Dh_, F_, V_;
  int HD_, KD_;                             // H*Dh, Hk*Dh

  QMatrix token_embd_;                      // [D -> V], rows are embeddings
  QMatrix output_;                          // [D -> V], token_embd_ when the file ties them
  const float* output_norm_;                // [D]

  // Activations in backend memory, sized for Tm tokens at load so a step allocates nothing.
  float* x_;                                // [Tm, D] residual stream
  float* xn_;                               // [Tm, D] normed input of a sublayer
  float* q_;                                // [Tm, H*Dh]
  float* k_;                                // [Tm, Hk*Dh]
  float* v_;                                // [Tm, Hk*Dh]
  float* att_;                              // [Tm, H*Dh] attention output before wo
  float* y_;                                // [Tm, D] sublayer output before the residual add
  float* gate_;                             // [Tm, F] SwiGLU gate, then silu(gate) * up
  float* up_;                               // [Tm, F]
  // K/V in f16, llama.cpp's default cache type: kv_[0] is [L][S][Hk][C][Dh], unless the
  // architecture allocates its own (gemma3: one for global layers, one ring for local ones).
  std::vector<KvBuf> kv_;

 private:
  void validate(const Batch& b);
  // Runs fn; on a device backend any failure inside is the device's (DeviceError).
  template <class Fn>
  void device_call(const Fn& fn) const {
    if (be_->on_host()) return fn();
    try {
      fn();
    } catch (const DeviceError&) {
      throw;
    } catch (const std::exception& e) {
      throw DeviceError(std::string("device ") + be_->name() + ": " + e.what());
    }
  }

  std::vector<int> slot_len_;               // [S] positions [0, len) hold valid KV
  std::vector<int> len_scratch_;            // [S] slot_len_ while a batch is being validated
  float* logits_ = nullptr;                 // [Tm, V] a device backend's logits, read back per chunk
  std::vector<int> rows_;                   // [Tm] rows whose logits are wanted
  std::vector<int32_t> kept_token_, kept_pos_, kept_slot_;  // [Tm] wanted_rows' chunk
  std::vector<uint8_t> kept_want_;                          // [Tm]
  int64_t gate_exps_calls_ = 0, up_exps_calls_ = 0, down_exps_calls_ = 0;  // matmuls run per site
};

}  // namespace model_detail

// One factory per architecture; Model::load picks by general.architecture.
std::unique_ptr<model_detail::Transformer> load_llama(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                  const model_detail::Capacity& cap, std::unique_ptr<model_detail::Backend> be);
std::unique_ptr<model_detail::Transformer> load_qwen2(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                  const model_detail::Capacity& cap, std::unique_ptr<model_detail::Backend> be);
std::unique_ptr<model_detail::Transformer> load_qwen3(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                  const model_detail::Capacity& cap, std::unique_ptr<model_detail::Backend> be);
std::unique_ptr<model_detail::Transformer> load_qwen3moe(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                     const model_detail::Capacity& cap, std::unique_ptr<model_detail::Backend> be);
std::unique_ptr<model_detail::Transformer> load_gptoss(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                   const model_detail::Capacity& cap, std::unique_ptr<model_detail::Backend> be);
std::unique_ptr<model_detail::Transformer> load_phi3(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                 const model_detail::Capacity& cap, std::unique_ptr<model_detail::Backend> be);
std::unique_ptr<model_detail::Transformer> load_gemma3(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                   const model_detail::Capacity& cap, std::unique_ptr<model_detail::Backend> be);
}  // namespace mb
