// Batch invariance, the ground greedy speculation stands on: a token's logits (and the K/V it
// leaves behind) are the same bits whether the token is decoded alone or verified among k draft
// tokens of its sequence in one forward(), with another slot's decode row in the same batch.
// If any kernel summed differently with the batch's row count, a draft could be accepted that
// plain decoding would not have produced, and greedy output with speculation would drift.
//
// Run once per kernel set (ctest sets MB_KERNELS: ref, avx2, and the best the CPU has), on every
// fixture GGUF in the directory given.
#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "util/threadpool.h"
#include "../../util/tests/check.h"

namespace {
constexpr int kPrompt = 5;   // prompt tokens, prefilled in one batch in both runs
constexpr int kMaxDraft = 8;  // the longest verification run checked

// First differing float of two rows, or -1.
int first_diff(const float* a, const float* b, int n) {
  for (int i = 0; i < n; i++)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return i;
  return -1;
}

void test_file(const std::string& path, mb::ThreadPool* pool) {
  std::shared_ptr<mb::GgufFile> f = mb::GgufFile::open(path);
  auto m = mb::Model::load(f, 3, 64, pool, 16);
  const int V = m->config().n_vocab;
  // Tokens: any ids below the vocabulary; varied so every row differs.
  std::vector<int32_t> toks;
  for (int i = 0; i < kPrompt + kMaxDraft + 1; i++) toks.push_back(int32_t((i * 7 + 3) % V));
  std::vector<float> ref((kMaxDraft + 1) * size_t(V)), got((kMaxDraft + 2) * size_t(V)), one(V);
  auto prefill = [&](int slot) {
    mb::Batch b;
    for (int i = 0; i < kPrompt; i++) {
      b.token.push_back(toks[i]);
      b.pos.push_back(i);
      b.slot.push_back(slot);
      b.logits.push_back(i + 1 == kPrompt);
    }
    m->forward(b, one.data());
  };
  // Reference: slot 0 decodes every token alone (T = 1, the plain decode path).
  m->kv_truncate(0, 0);
  prefill(0);
  for (int j = 0; j <= kMaxDraft; j++) {
    mb::Batch b{{toks[kPrompt + j]}, {kPrompt + j}, {0}, {1}};
    m->forward(b, &ref[size_t(j) * V]);
  }
  int bad = 0;
  for (int k = 1; k <= kMaxDraft; k++) {
    // Slot 1 verifies k tokens in one forward, with slot 2's decode row first (the scheduler puts
    // decode rows before verification rows of later sequences, and either order must hold).
    m->kv_truncate(1, 0);
    m->kv_truncate(2, 0);
    prefill(1);
    prefill(2);
    mb::Batch b{{toks[kPrompt]}, {kPrompt}, {2}, {1}};
    for (int j = 0; j < k; j++) {
      b.token.push_back(toks[kPrompt + j]);
      b.pos.push_back(kPrompt + j);
      b.slot.push_back(1);
      b.logits.push_back(1);
    }
    m->forward(b, got.data());
    for (int j = 0; j < k; j++) {
      const int d = first_diff(&got[size_t(j + 1) * V], &ref[size_t(j) * V], V);
      if (d >= 0 && bad++ < 4)
        std::fprintf(stderr, "  %s k=%d row %d: logit %d differs (%.9g vs %.9g)\n", path.c_str(), k, j, d,
                     got[size_t(j + 1) * V + d], ref[size_t(j) * V + d]);
      check(d < 0, path + ": verify k=" + std::to_string(k) + " row " + std::to_string(j) + " vs decode alone");
    }
    check(first_diff(got.data(), ref.data(), V) < 0, path + ": the other slot's decode row, k=" + std::to_string(k));
    // The K/V the verification wrote is what decode would have written: the next token agrees.
    mb::Batch n{{toks[kPrompt + k]}, {kPrompt + k}, {1}, {1}};
    m->forward(n, one.data());
    check(first_diff(one.data(), &ref[size_t(k) * V], V) < 0, path + ": decode after verify k=" + std::to_string(k));
  }
  // A wide step (T >= 16: the kernels' 16-token GEMM regime): 8 verification rows beside another
  // slot's 13-token prefill chunk. Still the bits of decoding alone.
  {
    m->kv_truncate(1, 0);
    m->kv_truncate(2, 0);
    prefill(1);
    mb::Batch b;
    for (int j = 0; j < kMaxDraft; j++) {
      b.token.push_back(toks[kPrompt + j]);
      b.pos.push_back(kPrompt + j);
      b.slot.push_back(1);
      b.logits.push_back(1);
    }
    for (int i = 0; i < 13; i++) {
      b.token.push_back(toks[size_t(i) % toks.size()]);
      b.pos.push_back(i);
      b.slot.push_back(2);
      b.logits.push_back(i == 12);
    }
    m->forward(b, got.data());
    for (int j = 0; j < kMaxDraft; j++) {
      const int d = first_diff(&got[size_t(j) * V], &ref[size_t(j) * V], V);
      if (d >= 0 && bad++ < 4)
        std::fprintf(stderr, "  %s wide row %d: logit %d differs (%.9g vs %.9g)\n", path.c_str(), j, d, got[size_t(j) * V + d],
                     ref[size_t(j) * V + d]);
      check(d < 0, path + ": verify in a 21-row step, row " + std::to_string(j) + " vs decode alone");
    }
  }
  std::printf("%s %s\n", bad ? "FAIL" : "ok", path.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures";
  mb::ThreadPool pool(2);
  std::printf("kernels: %s\n", mb::kernels_backend());
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".gguf") == 0) names.push_back(n);
    }
    closedir(d);
  }
  int n = 0;
  for (const auto& name : names) {
    const std::string p = dir + "/" + name;
    try {
      test_file(p, &pool);
    } catch (const std::exception& e) {
      check(false, p + ": " + e.what());
    }
    n++;
  }
  check(n > 0, "fixture GGUFs in " + dir + " (run npm run fixtures)");
  std::printf("%d fixtures\n", n);
  TEST_MAIN_END();
}
