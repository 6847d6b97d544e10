// Model::load: picks the backend by device and the architecture file by general.architecture.
#include <stdexcept>
#include <string>

#include "model/backend.h"
#include "model/loader.h"
#include "model/transformer.h"
#ifdef MB_HAVE_CUDA
#include "model/cuda/backend_cuda.h"
#endif

namespace mb {

std::unique_ptr<Model> Model::load(std::shared_ptr<GgufFile> file, int n_slots, int n_ctx, ThreadPool* pool,
                                   int max_batch, Device device) {
  if (!file) throw std::invalid_argument("model: no GGUF file");
  using Factory = std::unique_ptr<model_detail::Transformer> (*)(std::shared_ptr<GgufFile>, ModelConfig,
                                                                 const model_detail::Capacity&,
                                                                 std::unique_ptr<model_detail::Backend>);
  static const struct {
    const char* arch;
    Factory load;
  } kArchitectures[] = {{"llama", load_llama}, {"qwen2", load_qwen2}, {"qwen3", load_qwen3}, {"qwen3moe", load_qwen3moe},
                        {"gpt-oss", load_gptoss},
                        {"phi3", load_phi3}, {"gemma3", load_gemma3}};
  const std::string arch = file->get_str("general.architecture", "");
  for (const auto& a : kArchitectures)
    if (arch == a.arch) {
      ModelConfig cfg = model_detail::read_config(*file);
      const model_detail::Capacity cap{n_slots, n_ctx, max_batch};
      std::unique_ptr<model_detail::Backend> be;
      if (device == Device::cuda) {
#ifdef MB_HAVE_CUDA
        be = cuda_backend(file, cfg, cap);
#else
        throw std::runtime_error("model: device cuda: this build has no CUDA model (configure with -DMB_CUDA=ON: npm run build:cuda)");
#endif
      } else {
        be = model_detail::cpu_backend(pool, max_batch > 0 ? max_batch : 1);
      }
      std::unique_ptr<model_detail::Transformer> m = a.load(std::move(file), std::move(cfg), cap, std::move(be));
      m->loaded();
      return m;
    }
  std::string supported;
  for (const auto& a : kArchitectures) supported += std::string(supported.empty() ? "" : ", ") + a.arch;
  throw std::runtime_error("model: unsupported architecture '" + arch + "'; expected one of: " + supported);
}

}  // namespace mb
