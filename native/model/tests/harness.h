// The harnesses' CPU side (no CUDA needed; test_backend_ops, test_cuda_model and the CUDA kernels'
// test_cuda_ops share it): random weight matrices, a random-weight model of a given shape written as
// an in-memory GGUF (so the CPU backend loads it exactly as it loads a file, and only the shape
// travels to the GPU machine, not gigabytes of weights), the scalar reference of device-side
// sampling, and the harness's one-line JSON report.
//
// Dimension legend: L layers, D n_embd, H heads, Hk KV heads, Dh head dim, F n_ff, V n_vocab.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"

namespace mb {
namespace harness {

struct ModelShape {
  std::string name;
  int L = 0, D = 0, H = 0, Hk = 0, Dh = 0, F = 0, V = 0;
  GgmlType wtype = GgmlType::F32;  // every matrix; norms are F32
  std::string arch = "qwen3";      // qwen3: attn_{q,k}_norm, own output.weight; llama: neither (tied head)
};
// "qwen3-8b" (36 x 4096, 32/8 heads of 128, F 12288, V 151936), "qwen3-tiny" (2 x 256, 4/2 heads
// of 64, F 512, V 1024), "smollm2-135m" (llama: 30 x 576, 9/3 heads of 64, F 1536, V 49152, the
// default model's shape), "llama-tiny" (llama: 2 x 384, 6/2 heads of 64, F 512, V 1024), with the
// weight type given. Throws for an unknown name.
ModelShape shape_preset(const std::string& name, GgmlType wtype);
// Weight bytes one decode step reads: every matrix once (the embedding lookup reads one row).
uint64_t step_weight_bytes(const ModelShape& s);

// A GGUF v3 image of the shape's architecture with deterministic random weights (same seed, same bytes). Quantized
// blocks get random payloads and scales chosen so each matrix has values of about 1/sqrt(K), which
// keeps activations bounded through many layers. threads: generator threads (0 = hardware).
std::vector<uint8_t> make_random_gguf(const ModelShape& s, uint64_t seed, int threads = 0);

// N rows of K values of type t (K a multiple of its block), values of spread about sd, the same
// bytes for the same seed (the generator make_random_gguf fills its matrices with).
std::vector<uint8_t> random_matrix(GgmlType t, int64_t K, int64_t N, float sd, uint64_t seed);

// Scalar definition of cuda::sample for one row (same tie and cut rules).
int32_t sample_ref(const float* logits, int V, int top_k, float top_p, float temperature, float u);

// {"k": v, ...} built in order; values are numbers, strings, booleans or raw JSON.
class JsonLine {
 public:
  JsonLine& num(const std::string& k, double v);
  JsonLine& str(const std::string& k, const std::string& v);
  JsonLine& boolean(const std::string& k, bool v);
  JsonLine& raw(const std::string& k, const std::string& json);
  std::string done() const;

 private:
  std::vector<std::pair<std::string, std::string>> items_;
};
std::string json_quote(const std::string& s);

}  // namespace harness
}  // namespace mb
