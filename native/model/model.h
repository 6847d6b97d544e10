// Engine-facing model interface. Each architecture's whole forward pass is written out in one
// file: model_llama.cpp (llama, and qwen2 whose graph is the same), model_qwen3.cpp,
// model_qwen3moe.cpp, model_phi3.cpp, model_gemma3.cpp, model_gptoss.cpp; they are built from the
// shared pieces in transformer.h as calls on a backend (backend.h: the CPU kernels, or CUDA), and
// loader.h reads the GGUF for them.
//
// Dimension legend used in every model file:
//   T  tokens in the current batch      D  n_embd (embedding_length)
//   H  attention heads                  Hk KV heads (GQA)        Dh head dim = D / H (or key_length)
//   F  feed_forward_length              V  n_vocab
//   S  KV slots (--slots)               C  context per slot (--ctx)
//   L  layers (block_count)             E  experts, Ek experts used per token (MoE)
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mb {
class GgufFile;
class ThreadPool;

// The GGUF's `<arch>.*` keys, plus what the architecture implies (rope_neox).
struct ModelConfig {
  std::string arch;          // general.architecture
  int n_layer = 0;           // block_count
  int n_embd = 0;            // embedding_length
  int n_ff = 0;              // feed_forward_length (expert_feed_forward_length for MoE)
  int n_head = 0;            // attention.head_count
  int n_head_kv = 0;         // attention.head_count_kv
  int head_dim = 0;          // attention.key_length, else n_embd / n_head
  int n_ctx_train = 0;       // context_length
  int n_vocab = 0;           // rows of token_embd.weight
  float rms_eps = 1e-6f;     // attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.f;
  int rope_dim = 0;          // rope.dimension_count
  bool rope_neox = false;    // rotate halves (qwen2/qwen3/qwen3moe/phi3), not adjacent pairs (llama)
  int n_expert = 0;          // expert_count
  int n_expert_used = 0;     // expert_used_count
};

// Where a model's forward pass runs. cuda: the CUDA backend (model/cuda/backend_cuda.h), in builds
// configured with -DMB_CUDA=ON; it runs in full the architectures cuda_architectures() names and
// refuses the others at load, naming the op it lacks.
enum class Device { cpu, cuda };

// A step failed on the device (a CUDA error): the device state, and with a sticky error the
// process's whole CUDA context, is lost. The scheduler fails the batch as a fault and the worker
// process exits with its own status, so the server starts a fresh one.
struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One step's inputs: T tokens, each belonging to a slot at a position. Several sequences mix
// freely (continuous batching); tokens of one sequence appear in position order.
struct Batch {
  std::vector<int32_t> token;    // [T]
  std::vector<int32_t> pos;      // [T] position inside its slot's context
  std::vector<int32_t> slot;     // [T] which KV slot
  std::vector<uint8_t> logits;   // [T] 1 = this row's logits are wanted
};

class Model {
 public:
  // Loads weights (no copy where the mmap layout is usable), allocates S*C KV cache and scratch
  // for max_batch tokens per internal step (forward() splits larger batches, in order).
  // Throws std::runtime_error naming the unsupported architecture or tensor type, or the missing
  // tensor and the architecture that requires it.
  // device cuda: a build without the CUDA backend, an architecture needing an op it lacks, no
  // device, or a device too small for the weights and KV each throw std::runtime_error saying which.
  static std::unique_ptr<Model> load(std::shared_ptr<GgufFile> file, int n_slots, int n_ctx, ThreadPool* pool,
                                     int max_batch = 512, Device device = Device::cpu);
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs the batch, writes K/V for every token into its slot, and writes logits for each
  // row with logits[t] == 1, in batch order, into out: [n_wanted, V]. Returns logits only.
  virtual void forward(const Batch& batch, float* out) = 0;
  // Forget KV positions >= pos of a slot (prefix reuse keeps [0, pos)).
  virtual void kv_truncate(int slot, int pos) = 0;
  // Copy slot src's KV [0, n) to dst (prefix sharing between slots); n must be kv_reusable.
  virtual void kv_copy(int src, int dst, int n) = 0;
  // The longest prefix [0, m), m <= n <= the slot's length, that the slot can be truncated to and
  // continued from: n, unless the model keeps only part of the past (a sliding-window layer
  // holds only its window, so a prefix that ends before the window is gone is not usable; then 0).
  virtual int kv_reusable(int slot, int n) const { (void)slot; return n; }
  // Whether a slot can always be cut back to a few positions ago (speculative decoding drops
  // the K/V of rejected draft tokens so): false for a model whose sliding-window ring may already
  // have overwritten what those positions need.
  virtual bool kv_rewindable() const { return true; }
  virtual size_t kv_bytes() const = 0;
  // The host prompt cache (engine/prompt_cache.h) saves and restores K/V through these. One
  // position of a slot, every layer, is kv_token_bytes() bytes; runs are token-major
  // ([n][kv_token_bytes]) so the first m positions of a saved run are its first m * bytes.
  // 0 = the model cannot hand out its state (the cache stays off).
  virtual size_t kv_token_bytes() const { return 0; }
  // Element type of those bytes ("f16", ...): part of what a saved state is valid for.
  virtual std::string kv_type() const { return ""; }
  // dst [n][kv_token_bytes] = slot's K/V at positions [pos, pos + n) (all < the slot's length).
  virtual void kv_read(int, int, int, uint8_t*) const { throw std::logic_error("model: kv_read unsupported"); }
  // Slot's K/V at [pos, pos + n) = src; pos <= the slot's length, which becomes pos + n.
  virtual void kv_write(int, int, int, const uint8_t*) { throw std::logic_error("model: kv_write unsupported"); }
  // Mixture-of-experts models: each routed-expert call site (a tensor role, e.g. ffn_up_exps) and
  // how many expert matmuls it has run so far; empty for a dense model. Health reports the path
  // they run on from it, so it counts calls that happened, not the ones the code could make.
  virtual std::vector<std::pair<std::string, int64_t>> routed_expert_calls() const { return {}; }
  // Launch sequences compiled while serving (a CUDA model captures a decode step of each batch
  // width as a CUDA graph and instantiates it); the engine reports those after ready as
  // compiles_after_ready. 0 for the CPU models, whose kernels are all compiled ahead of time.
  virtual int64_t graph_captures() const { return 0; }
};
}  // namespace mb
