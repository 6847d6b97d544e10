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
#include "model/loader.h"
#include "model/model.h"
#include "util/threadpool.h"

namespace mb {
namespace model_detail {

struct Capacity {
  int n_slots;    // S
  int n_ctx;      // C
  int max_batch;  // Tm
};

// f32 -> IEEE binary16 bits, round to nearest even as ggml does for its f16 KV cache.
uint16_t f32_to_f16(float f);

// Up to Tm consecutive rows of a Batch.
struct Chunk {
  const int32_t* token;  // [T]
  const int32_t* pos;    // [T]
  const int32_t* slot;   // [T]
  const uint8_t* want;   // [T] 1 = this row's logits are wanted
  int T;
};

class Transformer : public Model {
 public:
  // own_kv = false: the architecture keeps its own K/V (gemma3's sliding-window rings), so no
  // [L][S][Hk][C][Dh] cache or attention scratch is allocated here and the kv_* calls below only
  // keep the slot lengths; the architecture overrides them.
  Transformer(std::shared_ptr<GgufFile> file, const ModelConfig& cfg, const Capacity& cap, ThreadPool* pool,
              bool own_kv = true);
  const ModelConfig& config() const override { return cfg_; }
  void forward(const Batch& batch, float* out) override;
  void kv_truncate(int slot, int pos) override;
  void kv_copy(int src, int dst, int n) override;
  size_t kv_bytes() const override;
  size_t kv_token_bytes() const override;
  std::string kv_type() const override { return "f16"; }  // k_cache_ / v_cache_ below
  void kv_read(int slot, int pos, int n, uint8_t* dst) const override;
  void kv_write(int slot, int pos, int n, const uint8_t* src) override;
  std::vector<std::pair<std::string, int64_t>> routed_expert_calls() const override;

 protected:
  // The architecture's forward pass over one chunk: writes K/V of every row into the cache and
  // logits[n_wanted, V] for the rows with want[t] == 1, in order.
  virtual void forward_chunk(const Chunk& c, float* logits) = 0;

  int slot_len(int slot) const { return slot_len_[slot]; }  // positions [0, len) of the slot hold K/V
  // For architectures with their own expert loop: one routed expert's gate, up and down ran.
  void count_routed_expert() { gate_exps_calls_++; up_exps_calls_++; down_exps_calls_++; }

  // ---- helpers for forward_chunk; "rows" means the T rows of a [T, D] buffer ----
  // Runs fn(i) for i in [0, n) over the pool, strided so neighbouring items land on different threads.
  template <class Fn>
  void par_for(int n, const Fn& fn);
  // y[T, N] = x[T, K] · W^T through the model's own matmul scratch (no allocation per call).
  void mm(const QMatrix& W, const std::vector<float>& x, std::vector<float>& y, int T) {
    matmul(W, x.data(), y.data(), T, pool_, &mm_scratch_);
  }
  void embed(const Chunk& c, std::vector<float>& x);  // x[T, D] = token_embd rows of the chunk's tokens
  // out[T, D] = rmsnorm(x[T, D]) * w[D], row by row.
  void rmsnorm_rows(std::vector<float>& out, const std::vector<float>& x, const std::vector<float>& w, int T);
  void add_rows(std::vector<float>& x, const std::vector<float>& y, int T);  // x[T, D] += y[T, D]
  // q_[T, H*Dh], k_[T, Hk*Dh], v_[T, Hk*Dh] = xn·Wq, xn·Wk, xn·Wv, plus the biases w carries.
  void project_qkv(const AttentionWeights& w, const std::vector<float>& xn, int T);
  float* q_row(int t) { return &q_[(size_t)t * HD_]; }  // [H*Dh]
  float* k_row(int t) { return &k_[(size_t)t * KD_]; }  // [Hk*Dh]
  float* v_row(int t) { return &v_[(size_t)t * KD_]; }  // [Hk*Dh]
  // RMSNorm of each Dh-long head of x[n_heads * Dh], with the same weight w[Dh] for every head.
  void rmsnorm_heads(float* x, int n_heads, const std::vector<float>& w) const;
  // RoPE of each head of x[n_heads * Dh] at position pos, as the config says (dims, base, neox).
  void rope_heads(float* x, int n_heads, int pos) const;
  // Row t's k, v [Hk*Dh] into layer il's cache at its (slot, pos), rounded to f16.
  void store_kv(int il, const Chunk& c, int t);
  // att[T, H*Dh] = causal softmax(q·K^T / sqrt(Dh)) · V of each row against its slot's cache.
  // kq_scale 0 means 1/sqrt(Dh); an architecture that scales q itself (phi3) passes 1. window > 0:
  // a row at p sees only keys [p - window + 1, p]; sinks [H]: a logit per head that joins the
  // softmax without a value (gpt-oss); see mb::attention.
  void attention(int il, const Chunk& c, const std::vector<float>& q, std::vector<float>& att, float kq_scale = 0.f,
                 int window = 0, const float* sinks = nullptr);
  // out[T, D] = (silu(xn·Wgate) * (xn·Wup)) · Wdown, through gate_ and up_.
  void swiglu(const SwiGluWeights& w, const std::vector<float>& xn, std::vector<float>& out, int T);
  // MoE routing of one token: probs[E] = softmax(router logits) in place; sel[Ek] = the Ek
  // likeliest experts, best first; weight[Ek] = their probabilities renormalized to sum 1.
  static void route_top_k(float* probs, int E, int Ek, int* sel, float* weight);
  // res[t, k, :] = expert sel[t, k]'s SwiGLU of xn[t] for every (t, k). Each expert's weights
  // are read once for all the rows routed to it.
  void run_experts(const MoeWeights& w, const std::vector<float>& xn, const std::vector<int>& sel, int T,
                   std::vector<float>& res);
  // logits[n_wanted, V] = (rmsnorm(x[t]) * output_norm) · output^T for the wanted rows only.
  void logits_of_wanted(const Chunk& c, const std::vector<float>& x, float* logits);
  // The last layer, once every row's K and V are stored, only matters for the rows whose logits
  // are wanted (one row in a prompt's last chunk, none in the others): moves those rows of each
  // (buffer, row width) to the front, in order, and returns the chunk of just them. Rows do not
  // depend on each other, so they get the same bits as with the whole chunk.
  Chunk wanted_rows(const Chunk& c, std::initializer_list<std::pair<std::vector<float>*, int>> bufs);

  std::shared_ptr<GgufFile> file_;
  ModelConfig cfg_;
  ThreadPool* pool_;
  int S_, C_, Tm_;
  int L_, D_, H_, Hk_, G_, Dh_, F_, V_;
  int HD_, KD_;                             // H*Dh, Hk*Dh

  QMatrix token_embd_;                      // [D -> V], rows are embeddings
  QMatrix output_;                          // [D -> V], token_embd_ when the file ties them
  std::vector<float> output_norm_;          // [D]

  // Activations, sized for Tm tokens at load so a step allocates nothing.
  std::vector<float> x_;                    // [Tm, D] residual stream
  std::vector<float> xn_;                   // [Tm, D] normed input of a sublayer
  std::vector<float> q_;                    // [Tm, H*Dh]
  std::vector<float> k_;                    // [Tm, Hk*Dh]
  std::vector<float> v_;                    // [Tm, Hk*Dh]
  std::vector<float> att_;                  // [Tm, H*Dh] attention output before wo
  std::vector<float> y_;                    // [Tm, D] sublayer output before the residual add
  std::vector<float> gate_;                 // [Tm, F] SwiGLU gate, then silu(gate) * up
  std::vector<float> up_;                   // [Tm, F]

 private:
  void validate(const Batch& b);

  // KV cache in f16, llama.cpp's default cache type: the attention kernel reads both as f16 and
  // rounds q to f16 for the scores as ggml does. One (layer, slot, head) is C positions in a row,
  // which is what the kernel walks.
  std::vector<uint16_t> k_cache_;           // [L][S][Hk][C][Dh]
  std::vector<uint16_t> v_cache_;           // [L][S][Hk][C][Dh]
  std::vector<int> slot_len_;               // [S] positions [0, len) hold valid KV
  std::vector<int> len_scratch_;            // [S] slot_len_ while a batch is being validated
  size_t kv_index(int il, int slot, int g, int pos) const {
    return ((((size_t)il * S_ + slot) * Hk_ + g) * C_ + pos) * Dh_;
  }

  std::vector<int> rows_;                   // [Tm] rows whose logits are wanted
  std::vector<int32_t> kept_token_, kept_pos_, kept_slot_;  // [Tm] wanted_rows' chunk
  std::vector<uint8_t> kept_want_;                          // [Tm]
  MatmulScratch mm_scratch_;                // quantized activations of the current matmul

  // Attention work: one item per (run of <= Bq consecutive positions of one slot, KV head).
  struct AttnItem {
    int t0, n, g;   // chunk rows [t0, t0 + n), KV head g
    double cost;    // ~ query rows x keys, for largest-first scheduling
  };
  int Bq_;                                  // positions per item: ~96 query rows (Bq * G)
  std::vector<AttnItem> attn_items_;        // [<= Tm * Hk] this chunk's items, reserved at load
  size_t attn_scratch_n_;                   // floats of attention scratch per thread (~Bq*G*(C + 16*Dh))
  std::vector<float> attn_scratch_;         // [P][attn_scratch_n_]

  // MoE only (empty for dense models): one expert's share of a chunk.
  std::vector<int> members_;                // [Tm] (t * Ek + k) routed to the current expert
  std::vector<float> xe_;                   // [Tm, D] their inputs, gathered
  std::vector<float> ye_;                   // [Tm, D] the expert's outputs
  int64_t gate_exps_calls_ = 0, up_exps_calls_ = 0, down_exps_calls_ = 0;  // matmuls run per site
};

template <class Fn>
void Transformer::par_for(int n, const Fn& fn) {
  const int nth = pool_ ? pool_->size() : 1;
  if (nth <= 1 || n <= 1) {
    for (int i = 0; i < n; i++) fn(i);
    return;
  }
  pool_->run([&](int ith, int nt) {
    for (int i = ith; i < n; i += nt) fn(i);
  });
}

}  // namespace model_detail

// One factory per architecture; Model::load picks by general.architecture.
std::unique_ptr<Model> load_llama(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                  const model_detail::Capacity& cap, ThreadPool* pool);
std::unique_ptr<Model> load_qwen2(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                  const model_detail::Capacity& cap, ThreadPool* pool);
std::unique_ptr<Model> load_qwen3(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                  const model_detail::Capacity& cap, ThreadPool* pool);
std::unique_ptr<Model> load_qwen3moe(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                     const model_detail::Capacity& cap, ThreadPool* pool);
std::unique_ptr<Model> load_gptoss(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                   const model_detail::Capacity& cap, ThreadPool* pool);
std::unique_ptr<Model> load_phi3(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                 const model_detail::Capacity& cap, ThreadPool* pool);
std::unique_ptr<Model> load_gemma3(std::shared_ptr<GgufFile> file, ModelConfig cfg,
                                   const model_detail::Capacity& cap, ThreadPool* pool);
}  // namespace mb
