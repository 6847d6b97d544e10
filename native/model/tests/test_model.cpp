// Model invariants that need no oracle, on the fixture GGUFs (tiny random weights):
//  - a mixed batch (two slots, prefill chunk + decode rows interleaved) gives the same logits
//    as running each sequence alone one token at a time;
//  - kv_copy + kv_truncate give the same continuation as recomputing the prefix;
//  - batches bigger than the max batch are split without changing the result;
//  - an unsupported architecture fails with a message naming it.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "util/threadpool.h"
#include "../../util/tests/check.h"

namespace {
float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); i++) m = std::fmax(m, std::fabs(a[i] - b[i]));
  return m;
}

// logits of every position of `toks` in slot 0 of a fresh model, one token per forward()
std::vector<float> sequential(std::shared_ptr<mb::GgufFile> f, const std::vector<int>& toks, mb::ThreadPool* pool) {
  auto m = mb::Model::load(f, 1, 64, pool, 8);
  const int V = m->config().n_vocab;
  std::vector<float> out(toks.size() * V);
  for (size_t t = 0; t < toks.size(); t++) {
    mb::Batch b{{toks[t]}, {(int)t}, {0}, {1}};
    m->forward(b, &out[t * V]);
  }
  return out;
}

void test_file(const std::string& path, mb::ThreadPool* pool) {
  std::shared_ptr<mb::GgufFile> f = mb::GgufFile::open(path);
  const std::vector<int> a = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8};
  const std::vector<int> c = {3, 3, 14, 2, 5, 1};
  const auto ra = sequential(f, a, pool), rc = sequential(f, c, pool);

  // mixed batch: all of c (slot 2) interleaved with all of a (slot 0); max batch 4 forces splits
  auto m = mb::Model::load(f, 3, 64, pool, 4);
  const int V = m->config().n_vocab;
  mb::Batch b;
  std::vector<std::pair<int, int>> order;  // (seq, index)
  for (size_t i = 0; i < a.size(); i++) {
    order.push_back({0, (int)i});
    if (i < c.size()) order.push_back({1, (int)i});
  }
  for (auto [s, i] : order) {
    b.token.push_back(s ? c[i] : a[i]);
    b.pos.push_back(i);
    b.slot.push_back(s ? 2 : 0);
    b.logits.push_back(1);
  }
  std::vector<float> out(order.size() * V);
  m->forward(b, out.data());
  std::vector<float> got_a(a.size() * V), got_c(c.size() * V);
  for (size_t r = 0; r < order.size(); r++) {
    auto [s, i] = order[r];
    std::memcpy(s ? &got_c[i * V] : &got_a[i * V], &out[r * V], V * 4);
  }
  // activations are quantized per row, so batching must not change a row's numbers at all
  // beyond the order-independent GEMM: allow only float noise
  const float da = max_diff(got_a, ra), dc = max_diff(got_c, rc);
  check(da < 1e-4f && dc < 1e-4f, path + ": mixed batch vs sequential (" + std::to_string(da) + ", " + std::to_string(dc) + ")");

  // prefix sharing: copy a's first 6 positions to slot 1, drop slot 0 back to 6, continue both
  m->kv_copy(0, 1, 6);
  m->kv_truncate(0, 6);
  mb::Batch d{{a[6], a[6]}, {6, 6}, {0, 1}, {1, 1}};
  std::vector<float> o2(2 * V);
  m->forward(d, o2.data());
  std::vector<float> want(ra.begin() + 6 * V, ra.begin() + 7 * V);
  check(max_diff(std::vector<float>(o2.begin(), o2.begin() + V), want) < 1e-4f, path + ": kv_truncate continuation");
  check(max_diff(std::vector<float>(o2.begin() + V, o2.end()), want) < 1e-4f, path + ": kv_copy continuation");

  // a hole in a slot is rejected and leaves the model usable
  bool threw = false;
  try {
    mb::Batch h{{1}, {20}, {1}, {1}};
    m->forward(h, o2.data());
  } catch (const std::invalid_argument&) { threw = true; }
  check(threw, path + ": position hole rejected");
  std::printf("ok %s (mixed %.2g / %.2g)\n", path.c_str(), da, dc);
}
}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures";
  mb::ThreadPool pool(2);
  int n = 0;
  for (const char* name : {"llama-q4_1.gguf", "llama-q8_0.gguf", "llama-f16.gguf", "qwen2-q8_0.gguf", "qwen3-q8_0.gguf",
                           "qwen3moe-q8_0.gguf", "gpt-oss-mxfp4.gguf", "phi3-q8_0.gguf"}) {
    const std::string p = dir + "/" + name;
    if (FILE* fp = std::fopen(p.c_str(), "rb")) {
      std::fclose(fp);
      test_file(p, &pool);
      n++;
    }
  }
  // a GGUF claiming an unknown architecture
  {
    std::vector<uint8_t> buf;
    auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; i++) buf.push_back(uint8_t(v >> (8 * i))); };
    auto u64 = [&](uint64_t v) { for (int i = 0; i < 8; i++) buf.push_back(uint8_t(v >> (8 * i))); };
    auto str = [&](const std::string& s) { u64(s.size()); buf.insert(buf.end(), s.begin(), s.end()); };
    u32(0x46554747); u32(3); u64(0); u64(1);
    str("general.architecture"); u32(8); str("mamba9");
    std::shared_ptr<mb::GgufFile> f = mb::GgufFile::parse(buf.data(), buf.size());
    std::string msg;
    try { mb::Model::load(f, 1, 8, &pool); } catch (const std::exception& e) { msg = e.what(); }
    check(msg.find("mamba9") != std::string::npos, "unsupported architecture named in error: '" + msg + "'");
  }
  if (n == 0) {
    std::printf("FAIL no fixture GGUFs in %s (run npm run fixtures)\n", dir.c_str());
    return 1;
  }
  std::printf(g_failures ? "%d failures\n" : "all model tests passed\n", g_failures);
  return g_failures ? 1 : 0;
}
