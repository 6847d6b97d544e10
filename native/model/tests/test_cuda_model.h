// Entry points of test_cuda_model's halves (test_cuda_model.cpp holds main).
#pragma once
#include <string>
#include <vector>

namespace mb {
namespace harness {

struct HarnessArgs {
  std::string shape = "qwen3-8b";
  std::string wtype = "q4_k";        // q4_k | bf16 | any ggml type name the kernels read
  std::string gguf;                  // a real model instead of random weights
  std::string engine_gguf;           // a real model (with its tokenizer) to run through the scheduler
                                     // on the CPU and on the CUDA model (checks phase)
  int parity_layers = 2;             // layers of the model checked against the CPU backend
  int steps = 64;                    // teacher-forced decode steps checked
  int prefill = 512;                 // prompt length of the prefill benchmark
  std::vector<int> batches{1, 8, 32, 64};
  int iters = 10;                    // timed decode steps per batch size
  unsigned long long seed = 1;
  std::string only;                  // "checks" (--parity) or "bench" (--perf): run that phase alone
};

// CPU-only checks of the harness's own parts; returns failures (0 = pass). Prints one line each.
int run_selftest();
// The device half (cuda_model_check.cpp): logits parity, the engine check, benchmarks; prints the JSON line. Returns the
// process exit code.
int run_on_device(const HarnessArgs& a);

}  // namespace harness
}  // namespace mb
