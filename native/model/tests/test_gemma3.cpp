// gemma3's sliding-window K/V on the fixture (test/fixtures/gemma3-q8_0.gguf: window W = 20,
// layers 0-4 and 6 local, 5 global). A local layer keeps a ring of R = min(C, W + max batch)
// positions per slot, so these check what a ring can and cannot do, against a model whose ring
// is the whole context (max batch 64 = C: nothing is ever overwritten):
//  - a prefill in chunks of 4 (R = 24: the ring wraps twice) and a one-token-at-a-time decode give
//    the same logits, bit for bit;
//  - kv_reusable: a prefix still has its window or it is 0; kv_truncate to a reusable prefix and
//    kv_copy of one continue exactly as a recompute; to a prefix whose window is gone they throw;
//  - after truncating to 0 the slot starts over cleanly;
//  - kv_bytes is the global layers' C positions plus the local layers' R; the host prompt cache
//    is off (kv_token_bytes 0);
//  - deeper than the attention kernel's key alignment (64 positions: a local layer's keys then
//    start at its window's start rounded down to it, with the ring's cells below the window
//    reused by later positions), chunks of 4 and one token at a time still give the whole-context
//    model's logits bit for bit.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "util/threadpool.h"
#include "../../util/tests/check.h"

namespace {
constexpr int kCtx = 64, kWindow = 20, kN = 60;

std::vector<int> tokens(int n = kN) {
  std::vector<int> t;
  for (int i = 0; i < n; i++) t.push_back(100 + (i * 7919) % 250000);
  return t;
}

// logits of positions [from, to) of `toks`, run through `slot` in one forward()
std::vector<float> run(mb::Model& m, int slot, const std::vector<int>& toks, int from, int to) {
  const int V = m.config().n_vocab;
  mb::Batch b;
  for (int p = from; p < to; p++) {
    b.token.push_back(toks[p]);
    b.pos.push_back(p);
    b.slot.push_back(slot);
    b.logits.push_back(1);
  }
  std::vector<float> out((size_t)(to - from) * V);
  m.forward(b, out.data());
  return out;
}

bool same_rows(const std::vector<float>& got, const std::vector<float>& ref, int ref_from, int V) {
  return std::memcmp(got.data(), ref.data() + (size_t)ref_from * V, got.size() * sizeof(float)) == 0;
}

template <class Fn>
bool throws_logic_error(Fn fn) {
  try { fn(); } catch (const std::logic_error&) { return true; }
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string path = std::string(argc > 1 ? argv[1] : "test/fixtures") + "/gemma3-q8_0.gguf";
  std::shared_ptr<mb::GgufFile> f;
  try { f = mb::GgufFile::open(path); } catch (const std::exception& e) {
    std::printf("skipped: %s (npm run fixtures after mashbox pull gemma3-270m)\n", e.what());
    return 0;
  }
  mb::ThreadPool pool(2);
  const auto toks = tokens();

  auto whole = mb::Model::load(f, 1, kCtx, &pool, kCtx);  // R = C: the reference
  const int V = whole->config().n_vocab;
  const auto ref = run(*whole, 0, toks, 0, kN);

  auto m = mb::Model::load(f, 2, kCtx, &pool, 4);  // R = 24
  const auto& cfg = m->config();
  const int L = cfg.n_layer, Hk = cfg.n_head_kv, Dh = cfg.head_dim, R = kWindow + 4;
  CHECK_EQ(L, 7);
  const size_t per_pos = (size_t)2 * Hk * Dh * 2 * 2;  // K and V, f16, both slots
  check(m->kv_bytes() == per_pos * (1 * kCtx + 6 * R),
        "kv_bytes " + std::to_string(m->kv_bytes()) + " != 1 global layer x C + 6 local x R");
  CHECK_EQ(m->kv_token_bytes(), size_t(0));

  // chunks of 4 through a ring of 24
  check(same_rows(run(*m, 0, toks, 0, kN), ref, 0, V), "prefill in chunks of 4 differs from the whole-context model");

  // one token at a time in slot 1
  bool decode_same = true;
  for (int p = 0; p < kN; p++) decode_same &= same_rows(run(*m, 1, toks, p, p + 1), ref, p, V);
  check(decode_same, "one-token decode through the ring differs");

  // slot 0 holds [0, 60); the ring keeps [36, 60): continuing from n needs [n - 19, n)
  CHECK_EQ(m->kv_reusable(0, kN), kN);
  CHECK_EQ(m->kv_reusable(0, 55), 55);   // needs [36, 55)
  CHECK_EQ(m->kv_reusable(0, 54), 0);    // needs 35: overwritten by 59
  CHECK_EQ(m->kv_reusable(0, 80), kN);   // clamped to the slot's length
  CHECK_EQ(whole->kv_reusable(0, 10), 10);  // nothing overwritten: any prefix

  m->kv_truncate(0, 55);
  check(same_rows(run(*m, 0, toks, 55, kN), ref, 55, V), "continuing after kv_truncate(55) differs");
  CHECK(throws_logic_error([&] { m->kv_truncate(0, 40); }));
  CHECK(throws_logic_error([&] { m->kv_copy(0, 1, 40); }));

  m->kv_copy(0, 1, 56);
  check(same_rows(run(*m, 1, toks, 56, kN), ref, 56, V), "continuing after kv_copy(56) differs");

  m->kv_truncate(0, 0);
  CHECK_EQ(m->kv_reusable(0, 0), 0);
  check(same_rows(run(*m, 0, toks, 0, 30), ref, 0, V), "a slot truncated to 0 does not start over cleanly");
  CHECK_EQ(m->kv_reusable(0, 30), 30);  // positions 6..29 in the ring: 30 - 19 = 11 >= 6

  {
    constexpr int kDeepCtx = 192, kDeepN = 180;
    const auto deep = tokens(kDeepN);
    auto whole_deep = mb::Model::load(f, 1, kDeepCtx, &pool, kDeepCtx);  // R = C
    const auto ref_deep = run(*whole_deep, 0, deep, 0, kDeepN);
    auto ring = mb::Model::load(f, 2, kDeepCtx, &pool, 4);               // R = 24
    bool chunks_same = true, decode_same_deep = true;
    for (int p = 0; p < kDeepN; p += 4) chunks_same &= same_rows(run(*ring, 0, deep, p, p + 4), ref_deep, p, V);
    for (int p = 0; p < kDeepN; p++) decode_same_deep &= same_rows(run(*ring, 1, deep, p, p + 1), ref_deep, p, V);
    check(chunks_same, "180 positions in chunks of 4 differ from the whole-context model");
    check(decode_same_deep, "180 positions one at a time differ from the whole-context model");
  }
  TEST_MAIN_END();
}
