// The CUDA model: the llama and qwen3 forward passes on the CUDA kernel set (kernels/cuda), behind
// the engine's Model interface. Built into mb_model only with -DMB_CUDA=ON; Model::load(...,
// Device::cuda) comes here. Plain C++ header (no CUDA types).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "model/model.h"

namespace mb {

// "llama, qwen3": the architectures the CUDA model runs (start-up errors name them).
const char* cuda_architectures();

// What a model takes on the device, known from the GGUF header before anything is allocated.
struct CudaFootprint {
  std::string arch;
  size_t weight_bytes = 0;   // tensor data, uploaded once
  size_t kv_bytes = 0;       // K and V of every layer: [L][S][Hk][C][Dh] f16 each
  size_t scratch_bytes = 0;  // activations for max_batch rows, logits rows, attention partials
  size_t total() const { return weight_bytes + kv_bytes + scratch_bytes; }
};
// Throws std::runtime_error for an architecture the CUDA model does not run.
CudaFootprint cuda_footprint(const GgufFile& file, int n_slots, int n_ctx, int max_batch);

// Loads the model onto CUDA device 0. Throws std::runtime_error naming the architecture (and the
// ones that run) when it is not one of cuda_architectures(), naming what was asked and found when
// there is no device or the device's free memory is smaller than cuda_footprint(), and naming the
// tensor for a weight type or shape the kernels do not take. A CUDA error inside forward() is
// thrown as DeviceError. MB_CUDA_GRAPHS=0 in the environment runs every step without CUDA graphs.
std::unique_ptr<Model> load_cuda(std::shared_ptr<GgufFile> file, int n_slots, int n_ctx, int max_batch);

}  // namespace mb
