#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace mb {

Sampler::Sampler(const SamplerParams& p) : p_(p) {
  uint64_t seed = p.has_seed ? p.seed : std::random_device{}();
  // mt19937 takes 32 bits; fold the high half in so 64-bit seeds that differ only there differ.
  rng_.seed(static_cast<uint32_t>(seed ^ (seed >> 32)));
  window_.assign(std::max(0, p.penalty_last_n), 0);
}

void Sampler::accept(int32_t tok) {
  if (window_.empty()) return;
  window_[window_head_] = tok;
  window_head_ = (window_head_ + 1) % window_.size();
  if (window_fill_ < window_.size()) window_fill_++;
}

void Sampler::apply_penalties(float* logits, int n_vocab) {
  const bool any = p_.repeat_penalty != 1.f || p_.frequency_penalty != 0.f || p_.presence_penalty != 0.f;
  if (!any || window_fill_ == 0) return;
  std::unordered_map<int32_t, int> count;
  for (size_t i = 0; i < window_fill_; i++) count[window_[i]]++;
  for (const auto& [tok, n] : count) {
    if (tok < 0 || tok >= n_vocab) continue;
    float& l = logits[tok];
    // Same order as llama.cpp: multiplicative penalty first, then the OpenAI-style additive ones.
    if (l <= 0.f) l *= p_.repeat_penalty; else l /= p_.repeat_penalty;
    l -= float(n) * p_.frequency_penalty + (n > 0 ? 1.f : 0.f) * p_.presence_penalty;
  }
}

static int32_t argmax(const float* logits, int n_vocab) {
  int32_t best = 0;
  for (int i = 1; i < n_vocab; i++) if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t Sampler::sample(float* logits, int n_vocab, TokenConstraint* constraint, bool penalize) {
  if (penalize) apply_penalties(logits, n_vocab);
  if (p_.temperature <= 0.f) {
    int32_t best = argmax(logits, n_vocab);
    if (!constraint) return best;
    // Greedy fast path: where the grammar is permissive (inside a JSON string) the unconstrained
    // choice is usually allowed, and checking one token costs far less than masking the row.
    if (constraint->allows(best)) return best;
    constraint->mask(logits, n_vocab);
    best = argmax(logits, n_vocab);
    return logits[best] == -INFINITY ? -1 : best;
  }
  // Constrained sampling masks first, then runs the normal chain over the allowed tokens only
  // (the filters then see the grammar's distribution, as in llama.cpp).
  if (constraint) constraint->mask(logits, n_vocab);
  cands_.resize(n_vocab);
  size_t n = 0;
  for (int i = 0; i < n_vocab; i++)
    if (!constraint || logits[i] != -INFINITY) cands_[n++] = {logits[i], i};
  if (n == 0) return -1;
  cands_.resize(n);
  size_t sorted = 0;  // cands_[0, sorted) is in descending order and holds the largest logits
  auto by_logit = [](const Cand& a, const Cand& b) { return a.logit > b.logit; };
  // llama.cpp chain order: top_k -> top_p -> min_p -> temperature -> dist. Sorting all V logits
  // per token costs milliseconds, so sort only as far as a filter needs.
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(cands_.begin(), cands_.begin() + p_.top_k, cands_.end(), by_logit);
    n = sorted = size_t(p_.top_k);
  }
  if (p_.top_p < 1.f) {
    // Softmax over the (unscaled) candidates; keep the smallest prefix whose mass reaches top_p.
    size_t want = std::min(n, std::max<size_t>(sorted, 256));
    if (sorted < want) {
      std::partial_sort(cands_.begin(), cands_.begin() + want, cands_.begin() + n, by_logit);
      sorted = want;
    }
    const float mx = cands_[0].logit;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += std::exp(double(cands_[i].logit - mx));
    double cum = 0;
    size_t keep = 0;
    for (size_t i = 0; i < n && keep == 0; i++) {
      if (i == sorted) {  // the mass is spread thin: sort the rest too
        std::sort(cands_.begin() + sorted, cands_.begin() + n, by_logit);
        sorted = n;
      }
      cum += std::exp(double(cands_[i].logit - mx)) / sum;
      if (cum >= p_.top_p) keep = i + 1;
    }
    n = std::max<size_t>(1, keep ? keep : n);
  }
  if (p_.min_p > 0.f) {
    // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p); order is kept.
    float mx = cands_[0].logit;
    if (sorted == 0) for (size_t i = 1; i < n; i++) mx = std::max(mx, cands_[i].logit);
    const float thr = mx + std::log(p_.min_p);
    size_t keep = 0;
    for (size_t i = 0; i < n; i++)
      if (cands_[i].logit >= thr) cands_[keep++] = cands_[i];
    n = std::max<size_t>(1, keep);
  }
  float mx = cands_[0].logit;
  for (size_t i = 1; i < n; i++) mx = std::max(mx, cands_[i].logit);
  std::vector<double> probs(n);
  double sum = 0;
  for (size_t i = 0; i < n; i++) { probs[i] = std::exp(double(cands_[i].logit - mx) / p_.temperature); sum += probs[i]; }
  std::uniform_real_distribution<double> uni(0.0, sum);
  double r = uni(rng_);
  for (size_t i = 0; i < n; i++) {
    r -= probs[i];
    if (r < 0) return cands_[i].id;
  }
  return cands_[n - 1].id;
}

}  // namespace mb
