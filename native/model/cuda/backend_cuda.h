// The CUDA backend (backend.h) on the CUDA kernel set (kernels/cuda/cuda_ops.h): every op
// enqueued on one stream, decode steps recorded and replayed as CUDA graphs inside it. Built into
// mb_model only with -DMB_CUDA=ON; Model::load(..., Device::cuda) comes here. Plain C++ header
// (no CUDA types).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "model/backend.h"
#include "model/model.h"
#include "model/transformer.h"

namespace mb {

// "llama, qwen3": the architectures whose every op the CUDA backend runs (start-up errors name
// them); the others are refused at load, naming the op it lacks.
const char* cuda_architectures();

// What a model takes on the device, known from the GGUF header before anything is allocated.
struct CudaFootprint {
  std::string arch;
  size_t weight_bytes = 0;   // tensor data, uploaded once
  size_t kv_bytes = 0;       // K and V of every layer: [L][S][Hk][C][Dh] f16 each
  size_t scratch_bytes = 0;  // activations for max_batch rows, their logits, attention partials
  size_t total() const { return weight_bytes + kv_bytes + scratch_bytes; }
};
// Throws std::runtime_error for an architecture the CUDA backend does not run in full.
CudaFootprint cuda_footprint(const GgufFile& file, int n_slots, int n_ctx, int max_batch);

// The backend on CUDA device 0. Throws std::runtime_error naming what was asked and found when
// there is no device or its free memory is smaller than cuda_footprint(), and (from matrix())
// naming the tensor for a weight type or shape the kernels do not take. MB_CUDA_GRAPHS=0 in the
// environment runs every step without CUDA graphs.
std::unique_ptr<model_detail::Backend> cuda_backend(std::shared_ptr<GgufFile> file, const ModelConfig& cfg,
                                                    const model_detail::Capacity& cap);

}  // namespace mb
