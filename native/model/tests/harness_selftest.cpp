// CPU-side checks of test_cuda_model's parts, run by ctest in every build (no GPU, no nvcc): the random
// model generator (the CPU backend loads it and its logits are finite and depend on the seed),
// the block decoding the CUDA kernels run (kernels/cuda/quants.cuh, compiled here for the host)
// against ref::dequantize for every type, what Model::load(Device::cuda) refuses before it looks for
// a device (and cuda_footprint's K/V bytes), the sampling reference, and the JSON line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "model/tests/test_cuda_model.h"
#include "model/tests/harness.h"
#include "kernels/cuda/quants.cuh"
#include "kernels/ref/ref.h"
#include "model/model.h"
#include "util/threadpool.h"
#ifdef MB_HAVE_CUDA
#include "model/cuda/backend_cuda.h"
#endif

namespace mb {
namespace harness {
namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) failures++;
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

void check_model(const std::string& shape, GgmlType t) {
  const ModelShape s = shape_preset(shape, t);
  const auto img = make_random_gguf(s, 7, 2);
  const auto again = make_random_gguf(s, 7, 1);
  expect(img == again, std::string("generator is deterministic across thread counts (") + ggml_type_name(t) + ")");
  std::shared_ptr<GgufFile> f(GgufFile::parse(img.data(), img.size()));
  uint64_t mat_bytes = 0;
  for (const auto& ten : f->tensors())
    if (ten.type != GgmlType::F32 || ten.name.find("norm") == std::string::npos) mat_bytes += ten.n_bytes;
  // a step reads every matrix but only one embedding row (all of it when it is the tied head too)
  const uint64_t emb = f->tensor("token_embd.weight")->n_bytes;
  const uint64_t per_row = emb / (uint64_t)s.V;
  const bool tied = f->tensor("output.weight") == nullptr;
  expect(tied == (s.arch == "llama"), shape + ": the llama shapes tie the head to the embedding");
  const uint64_t base = mat_bytes - (tied ? 0 : emb);
  expect(step_weight_bytes(s) > base && step_weight_bytes(s) < base + per_row + 4 * 1024 * 1024,
         shape + ": step_weight_bytes matches the generated tensors");

  // every block of every matrix decodes the same through quants.cuh as through ref::dequantize
  const GgufTensor* w = f->tensor("blk.0.ffn_down.weight");
  const int64_t K = w->ne[0];
  const size_t rb = ggml_row_bytes(t, K);
  std::vector<float> want(K), got(K);
  bool same = true;
  for (int64_t r = 0; r < w->ne[1] && same; r++) {
    kq::ref::dequantize(t, w->data + r * rb, want.data(), K);
    for (int64_t sb = 0; sb < K / 32; sb++)
      cuda::dequant_sub32_any((cuda::QType)(uint32_t)t, w->data + r * rb, sb, got.data() + sb * 32);
    same = std::memcmp(want.data(), got.data(), K * sizeof(float)) == 0;
  }
  expect(same, std::string("quants.cuh decodes ") + ggml_type_name(t) + " bit for bit as ref::dequantize");

  ThreadPool pool(2);
  auto m = Model::load(f, 1, 64, &pool, 16);
  Batch b;
  for (int i = 0; i < 8; i++) {
    b.token.push_back((i * 37) % s.V);
    b.pos.push_back(i);
    b.slot.push_back(0);
    b.logits.push_back(i == 7);
  }
  std::vector<float> logits(s.V);
  m->forward(b, logits.data());
  double sumsq = 0;
  bool finite = true;
  for (float v : logits) {
    finite &= std::isfinite(v);
    sumsq += (double)v * v;
  }
  const double rms = std::sqrt(sumsq / s.V);
  expect(finite && rms > 1e-3 && rms < 1e3,
         "CPU backend runs the random " + shape + " " + ggml_type_name(t) + " model (logit rms " + std::to_string(rms) + ")");
}

// Model::load with Device::cuda refuses what it cannot run before it looks for a device: a build
// without the CUDA model says so; with it, another architecture is named with the ones that run.
void check_device_refusals() {
  const ModelShape s = shape_preset("qwen3-tiny", GgmlType::Q8_0);
  auto img = make_random_gguf(s, 3, 1);
  auto refusal = [&](const std::vector<uint8_t>& bytes) {
    std::shared_ptr<GgufFile> f(GgufFile::parse(bytes.data(), bytes.size()));
    try {
      Model::load(f, 1, 64, nullptr, 16, Device::cuda);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
#ifdef MB_HAVE_CUDA
  // general.architecture's value and every qwen3.* key become qwen2 (same length, so the image
  // stays valid): a qwen2 file, whose Q/K/V biases the CUDA backend cannot add yet
  const std::string key = "general.architecture", from = "qwen3";
  const auto at = std::search(img.begin(), img.end(), key.begin(), key.end()) - img.begin();
  const size_t value = (size_t)at + key.size() + 4 + 8;  // type u32, length u64
  expect(std::string(img.begin() + value, img.begin() + value + 5) == "qwen3", "the image names its architecture");
  for (auto it = img.begin(); (it = std::search(it, img.end(), from.begin(), from.end())) != img.end(); it += 5) it[4] = '2';
  const std::string err = refusal(img);
  expect(err.find("architecture 'qwen2' does not run on the cuda backend") != std::string::npos &&
             err.find("'add_bias'") != std::string::npos,
         "device cuda refuses qwen2 at load, naming the op it lacks: " + err);
  const auto lt = make_random_gguf(shape_preset("llama-tiny", GgmlType::Q4_1), 3, 1);
  std::shared_ptr<GgufFile> lf(GgufFile::parse(lt.data(), lt.size()));
  const CudaFootprint fp = cuda_footprint(*lf, 3, 100, 16);
  expect(fp.arch == "llama" && fp.kv_bytes == 2ull * 2 * 3 * 2 * 100 * 64 * 2 && fp.weight_bytes > 0 && fp.scratch_bytes > 0,
         "cuda_footprint: K and V of 2 layers x 3 slots x 2 KV heads x 100 positions x 64 f16");
#else
  const std::string err = refusal(img);
  expect(err.find("this build has no CUDA model") != std::string::npos, "device cuda in a CPU build: " + err);
#endif
}

void check_sampling() {
  const int V = 1000;
  std::vector<float> l(V);
  for (int i = 0; i < V; i++) l[i] = std::sin((float)i * 0.37f) * 3.f;
  l[123] = 10.f;
  l[456] = 10.f;  // tie: the lower index wins
  expect(sample_ref(l.data(), V, 40, 0.9f, 0.f, 0.5f) == 123, "greedy picks the argmax, lower index on ties");
  expect(sample_ref(l.data(), V, 1, 1.f, 1.f, 0.99f) == 123, "top_k 1 is greedy");
  expect(sample_ref(l.data(), V, 40, 1e-6f, 1.f, 0.99f) == 123, "a tiny top_p keeps only the best");
  expect(sample_ref(l.data(), V, 2, 1.f, 1.f, 0.75f) == 456, "u splits two equal candidates in index order");
  int hits = 0;
  for (int i = 0; i < 100; i++) hits += sample_ref(l.data(), V, 40, 1.f, 100.f, (float)i / 100.f) != 123;
  expect(hits > 50, "a high temperature spreads the picks");
}

void check_json() {
  JsonLine j;
  j.str("a", "x\"y").num("b", 1.5).boolean("c", true).raw("d", "[1,2]").num("e", NAN);
  expect(j.done() == "{\"a\":\"x\\\"y\",\"b\":1.5,\"c\":true,\"d\":[1,2],\"e\":null}", "JSON line: " + j.done());
}

}  // namespace

int run_selftest() {
  failures = 0;
  for (GgmlType t : kTypes) check_model("qwen3-tiny", t);
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q8_0}) check_model("llama-tiny", t);
  check_device_refusals();
  check_sampling();
  check_json();
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "pass", failures);
  return failures;
}

}  // namespace harness
}  // namespace mb
