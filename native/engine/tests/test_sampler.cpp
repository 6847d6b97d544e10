// Sampler semantics against hand-computed cases (llama.cpp's penalty and filter rules).
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "../sampler.h"
#include "../../util/tests/check.h"

using mb::Sampler;
using mb::SamplerParams;

static std::map<int, int> histogram(const SamplerParams& p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::map<int, int> h;
  for (int i = 0; i < n; i++) {
    auto l = logits;
    h[s.sample(l.data(), int(l.size()))]++;
  }
  return h;
}

int main() {
  const std::vector<float> base = {1.0f, 3.0f, 2.0f, -1.0f, 2.9f};
  {  // greedy is argmax
    SamplerParams p;
    auto l = base;
    CHECK_EQ(Sampler(p).sample(l.data(), 5), 1);
  }
  {  // repetition penalty: positive logit divided, negative multiplied; 3/2 = 1.5 < 2.9
    SamplerParams p;
    p.repeat_penalty = 2.f;
    Sampler s(p);
    s.accept(1);
    s.accept(3);
    auto l = base;
    CHECK_EQ(s.sample(l.data(), 5), 4);
    CHECK(std::fabs(l[1] - 1.5f) < 1e-6f);
    CHECK(std::fabs(l[3] + 2.0f) < 1e-6f);
  }
  {  // frequency counts occurrences, presence once: 3 - 2*0.1 - 0.5 = 2.3 < 2.9
    SamplerParams p;
    p.frequency_penalty = 0.1f;
    p.presence_penalty = 0.5f;
    Sampler s(p);
    s.accept(1);
    s.accept(1);
    auto l = base;
    CHECK_EQ(s.sample(l.data(), 5), 4);
    CHECK(std::fabs(l[1] - 2.3f) < 1e-5f);
  }
  {  // the window forgets tokens older than penalty_last_n
    SamplerParams p;
    p.repeat_penalty = 100.f;
    p.penalty_last_n = 2;
    Sampler s(p);
    s.accept(1);
    s.accept(0);
    s.accept(2);
    auto l = base;
    CHECK_EQ(s.sample(l.data(), 5), 1);
  }
  {  // top_k = 2 keeps only {1, 4}
    SamplerParams p;
    p.temperature = 1.f;
    p.top_k = 2;
    p.has_seed = true;
    p.seed = 7;
    auto h = histogram(p, base, 2000);
    CHECK_EQ(h.size(), size_t(2));
    CHECK(h.count(1) && h.count(4));
  }
  {  // min_p = 0.5: keep logits >= 3 + ln 0.5 = 2.307 -> {1, 4}
    SamplerParams p;
    p.temperature = 1.f;
    p.min_p = 0.5f;
    p.has_seed = true;
    p.seed = 1;
    auto h = histogram(p, base, 2000);
    CHECK_EQ(h.size(), size_t(2));
    CHECK(h.count(1) && h.count(4));
  }
  {  // top_p small keeps only the top token
    SamplerParams p;
    p.temperature = 1.f;
    p.top_p = 0.1f;
    auto h = histogram(p, base, 200);
    CHECK_EQ(h.size(), size_t(1));
    CHECK(h.count(1));
  }
  {  // full distribution: empirical frequency follows softmax(logits / T)
    SamplerParams p;
    p.temperature = 0.5f;
    p.has_seed = true;
    p.seed = 3;
    const int n = 20000;
    auto h = histogram(p, base, n);
    double z = 0;
    for (float x : base) z += std::exp(x / 0.5);
    for (int i = 0; i < 5; i++) {
      const double expect = std::exp(base[i] / 0.5) / z;
      CHECK(std::fabs(double(h[i]) / n - expect) < 0.02);
    }
  }
  {  // top_p over a long flat tail (past the first partial sort): the kept prefix is exact
    std::vector<float> l(4000);
    for (int i = 0; i < 4000; i++) l[(i * 7919) % 4000] = -0.0005f * float(i);  // rank i at a scattered id
    double z = 0;
    for (int i = 0; i < 4000; i++) z += std::exp(-0.0005 * i);
    int keep = 0;
    for (double cum = 0; keep < 4000;) { cum += std::exp(-0.0005 * keep) / z; keep++; if (cum >= 0.8) break; }
    SamplerParams p;
    p.temperature = 1.f;
    p.top_p = 0.8f;
    p.has_seed = true;
    p.seed = 5;
    auto h = histogram(p, l, 4000);
    int max_rank = 0;
    for (auto& [id, n] : h) {
      int rank = 0;
      while ((rank * 7919) % 4000 != id) rank++;
      max_rank = std::max(max_rank, rank);
    }
    CHECK(keep > 256);
    CHECK(max_rank < keep);
    CHECK(max_rank > keep - 200);  // the tail up to the cut is really sampled
  }
  {  // same seed -> same sequence; different seed -> (almost surely) different
    SamplerParams p;
    p.temperature = 1.5f;
    p.has_seed = true;
    p.seed = 42;
    std::vector<float> flat(100, 0.f);
    auto run = [&](uint64_t seed) {
      p.seed = seed;
      Sampler s(p);
      std::vector<int> out;
      for (int i = 0; i < 32; i++) {
        auto l = flat;
        out.push_back(s.sample(l.data(), 100));
      }
      return out;
    };
    CHECK(run(42) == run(42));
    CHECK(run(42) != run(43));
  }
  TEST_MAIN_END();
}
