// Per-request token sampler with llama.cpp semantics. Each request owns one Sampler (and so its
// own RNG): a fixed seed reproduces a generation regardless of what else is batched with it.
//
// Dimension legend: V n_vocab, W penalty window (last_n tokens).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace mb {

struct SamplerParams {
  float temperature = 0.f;       // <= 0: greedy argmax (after penalties)
  int top_k = 0;                 // 0 = off
  float top_p = 1.f;             // 1 = off
  float min_p = 0.f;             // 0 = off
  float repeat_penalty = 1.f;    // 1 = off; llama.cpp divides positive logits, multiplies negative
  float frequency_penalty = 0.f; // subtracted count times
  float presence_penalty = 0.f;  // subtracted once if the token occurred
  int penalty_last_n = 64;       // llama-server's default window
  bool has_seed = false;
  uint64_t seed = 0;
};

// Which tokens may come next (grammar-constrained decoding, see grammar.h). The sampler asks
// allows() about single tokens on the greedy fast path and mask()s the whole row otherwise.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool allows(int32_t tok) = 0;
  virtual void mask(float* logits, int n_vocab) = 0;  // rejected tokens' logits -> -inf
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Picks a token from logits [V]; logits is used as scratch and left modified. With a
  // constraint, only a token it allows; -1 when it allows none. penalize = false draws again
  // from a row this sampler already penalized.
  int32_t sample(float* logits, int n_vocab, TokenConstraint* constraint = nullptr, bool penalize = true);
  // Records a token in the penalty window (prompt tokens too, as llama-server does).
  void accept(int32_t tok);
  const SamplerParams& params() const { return p_; }

 private:
  struct Cand { float logit; int32_t id; };
  void apply_penalties(float* logits, int n_vocab);
  SamplerParams p_;
  std::mt19937 rng_;
  std::vector<int32_t> window_;   // [W] ring buffer of recent tokens
  size_t window_head_ = 0;
  size_t window_fill_ = 0;
  std::vector<Cand> cands_;       // [V] scratch
};

}  // namespace mb
