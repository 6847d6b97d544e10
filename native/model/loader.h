// Internal to native/model: reading a GGUF into a ModelConfig and typed weights. Everything a
// file's layout or naming needs (defaults for absent keys, the vocabulary taken from the
// embedding, a tied output head) is settled here, so the architecture files only say which
// tensors they use. Every failure names the tensor and the architecture that wanted it.
//
// Dimension legend (see model.h): D n_embd, H heads, Hk KV heads, Dh head dim, F n_ff
// (per expert for MoE), E experts, V n_vocab.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"

namespace mb {
namespace model_detail {

// Architecture-independent keys of `<arch>.*`; rope_neox is the architecture's to set.
ModelConfig read_config(const GgufFile& f);

// Every start-up error about a tensor reads the same way for every architecture, naming the
// architecture, the tensor, what the file has and what was expected:
//   model: architecture 'phi3': tensor 'blk.0.attn_qkv.weight' is missing; expected shape [256, 384], type one of F32, ...
//   model: architecture 'phi3': tensor 'blk.0.attn_qkv.weight' has shape [256, 380]; expected [256, 384]
//   model: architecture 'phi3': tensor 'blk.0.attn_qkv.weight' has type Q2_K; expected one of F32, ...
// An architecture file that checks a tensor of its own builds its error here too.
std::runtime_error tensor_error(const std::string& arch, const std::string& tensor, const std::string& found,
                                const std::string& expected);
// The same for a metadata key:
//   model: architecture 'phi3': key 'phi3.rope.dimension_count' is 40; expected an even number from 2 to ...
std::runtime_error key_error(const std::string& arch, const std::string& key, const std::string& found,
                             const std::string& expected);
std::string shape_str(const std::vector<int64_t>& ne);  // "[256, 384]"
// The weight types matmul (and dequantize_row) take, for "expected" in those errors.
bool is_weight_type(GgmlType t);
std::string weight_types_str();  // "one of F32, F16, ..."

// blk.N.attn_norm / attn_{q,k,v,output} (+ attn_{q,k,v}.bias).
// Vectors are f32 in the backend's memory (Backend::vector), nullptr when absent.
struct AttentionWeights {
  const float* norm;              // [D]
  QMatrix wq;                     // [D -> H*Dh]
  QMatrix wk, wv;                 // [D -> Hk*Dh]
  QMatrix wo;                     // [H*Dh -> D]
  const float* bq;                // [H*Dh]; nullptr when optional and absent
  const float* bk;                // [Hk*Dh]; likewise
  const float* bv;                // [Hk*Dh]; likewise
};

// blk.N.ffn_norm / ffn_{gate,up,down}.
struct SwiGluWeights {
  const float* norm;              // [D]
  QMatrix gate, up;               // [D -> F]
  QMatrix down;                   // [F -> D]
};

// E matrices of one shape stored back to back (ffn_*_exps).
struct ExpertMatrices {
  GgmlType type;
  int64_t K, N;                   // one expert is [K -> N]
  const uint8_t* data;            // [E][N rows of K]
  size_t expert_bytes;
  QMatrix expert(int e) const { return QMatrix{type, K, N, data + (size_t)e * expert_bytes}; }
};

// blk.N.ffn_norm / ffn_gate_inp / ffn_{gate,up,down}_exps.
struct MoeWeights {
  const float* norm;              // [D]
  QMatrix router;                 // [D -> E]
  ExpertMatrices gate, up;        // E x [D -> F]
  ExpertMatrices down;            // E x [F -> D]
};

enum class Biases { required, optional };

class Backend;

// With a backend, every matrix and vec() it hands out is placed in that backend's memory
// (Backend::matrix, Backend::vector); without one (read_config's callers), matrices stay in the
// file's mapping.
class WeightLoader {
 public:
  WeightLoader(const GgufFile& f, const ModelConfig& cfg, Backend* be = nullptr) : f_(f), cfg_(cfg), be_(be) {}

  QMatrix matrix(const std::string& name, int64_t K, int64_t N) const;                 // [K -> N]
  ExpertMatrices experts(const std::string& name, int64_t K, int64_t N, int64_t E) const;  // E x [K -> N]
  // Norm weights and biases, converted to f32.
  std::vector<float> vector(const std::string& name, int64_t n) const;
  std::vector<float> optional_vector(const std::string& name, int64_t n) const;  // empty when absent
  // The same in the backend's memory; optional_vec gives nullptr when absent.
  const float* vec(const std::string& name, int64_t n) const;
  const float* optional_vec(const std::string& name, int64_t n) const;

  QMatrix token_embd() const;                           // [D -> V], rows are embeddings
  // output.weight, or the embedding matrix when the file ties the head to it (no output.weight).
  QMatrix output(const QMatrix& token_embd) const;      // [D -> V]
  AttentionWeights attention(int il, Biases biases) const;
  SwiGluWeights swiglu(int il) const;
  MoeWeights moe(int il) const;
  static std::string blk(int il) { return "blk." + std::to_string(il) + "."; }
  // tensor_error for this file's architecture.
  std::runtime_error error(const std::string& tensor, const std::string& found, const std::string& expected) const {
    return tensor_error(cfg_.arch, tensor, found, expected);
  }

 private:
  // The tensor, or an error saying it is missing and what shape and type were expected.
  const GgufTensor& require(const std::string& name, const std::vector<int64_t>& want) const;
  void check_type(const GgufTensor& t) const;
  const GgufFile& f_;
  const ModelConfig& cfg_;
  Backend* be_;
};

}  // namespace model_detail
}  // namespace mb
