// test_cuda_model: the CUDA model (Model::load with Device::cuda) without Node. On a GPU it checks
// the logits of random models against the CPU backend over teacher-forced steps (and, with
// --engine-gguf, a real model through the engine's scheduler on both); --perf benchmarks prefill
// and decode at several batch sizes; one JSON line either way.
//   test_cuda_model --selftest              CPU-side checks of the harness's parts only (ctest)
//   test_cuda_model [--shape qwen3-8b] [--wtype q4_k|bf16|...] [--gguf PATH] [--parity-layers N]
//                   [--steps N] [--prefill N] [--batches 1,8,32,64] [--iters N] [--seed N]
//                   [--parity | --perf] [--engine-gguf PATH]
//   --parity runs the checks alone, --perf the benchmarks alone (both when neither is given);
//   --engine-gguf runs a real model (a test fixture) through the engine's scheduler on the CPU
//   backend and on the CUDA model and compares them (checks phase).
// Exit codes: 0 all checks passed; 1 a check failed; 2 bad arguments; 3 no usable CUDA device
// (the JSON line says what the runtime reported); 4 this build has no CUDA (configure with
// -DMB_CUDA=ON, npm run build:cuda).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "model/tests/test_cuda_model.h"
#include "model/tests/harness.h"

namespace {

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    char* end;
    const long x = std::strtol(p, &end, 10);
    if (end == p || x <= 0) throw std::invalid_argument(std::string("bad list '") + s + "'");
    v.push_back((int)x);
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') throw std::invalid_argument(std::string("bad list '") + s + "'");
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mb::harness;
  HarnessArgs a;
  bool selftest = false;
  try {
    for (int i = 1; i < argc; i++) {
      const std::string k = argv[i];
      auto val = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
        return argv[++i];
      };
      if (k == "--selftest") selftest = true;
      else if (k == "--shape") a.shape = val();
      else if (k == "--wtype") a.wtype = val();
      else if (k == "--gguf") a.gguf = val();
      else if (k == "--engine-gguf") a.engine_gguf = val();
      else if (k == "--parity-layers") a.parity_layers = std::atoi(val());
      else if (k == "--steps") a.steps = std::atoi(val());
      else if (k == "--prefill") a.prefill = std::atoi(val());
      else if (k == "--batches") a.batches = parse_list(val());
      else if (k == "--iters") a.iters = std::atoi(val());
      else if (k == "--seed") a.seed = std::strtoull(val(), nullptr, 10);
      else if (k == "--parity") a.only = "checks";
      else if (k == "--perf") a.only = "bench";
      else throw std::invalid_argument("unknown argument " + k);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_cuda_model: %s\n", e.what());
    return 2;
  }
  if (selftest) return run_selftest() == 0 ? 0 : 1;
#ifdef MB_HAVE_CUDA
  return run_on_device(a);
#else
  std::printf("%s\n", JsonLine()
                          .str("status", "no_cuda_build")
                          .str("error", "test_cuda_model was built without CUDA (configure with -DMB_CUDA=ON: npm run build:cuda)")
                          .done()
                          .c_str());
  return 4;
#endif
}
