#include "scheduler_phases.h"

#include <algorithm>

namespace mb {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t l = 0;
  while (l < n && a[l] == b[l]) l++;
  return l;
}

SlotChoice pick_slot(const std::vector<SlotView>& slots, const std::vector<int32_t>& prompt) {
  SlotChoice c;
  for (int i = 0; i < int(slots.size()); i++) {
    if (slots[i].busy) continue;
    const size_t l = common_prefix(*slots[i].cached, prompt);
    if (c.slot < 0 || l > c.lcp || (l == c.lcp && slots[i].cached->size() < slots[c.slot].cached->size())) {
      c.slot = i;
      c.lcp = l;
    }
  }
  if (c.slot < 0) return c;
  c.donor_lcp = c.lcp;
  for (int i = 0; i < int(slots.size()); i++) {
    if (!slots[i].busy) continue;
    const size_t l = common_prefix(*slots[i].cached, prompt);
    if (l > c.donor_lcp) {
      c.donor = i;
      c.donor_lcp = l;
    }
  }
  return c;
}

size_t next_waiting(const std::vector<WaitingView>& waiting, const OvertakePolicy& p) {
  const size_t n = std::min(waiting.size(), size_t(std::max(p.look, 1)));
  for (size_t i = 0; i < n; i++) {
    if (waiting[i].uncached <= p.quick_tokens) return i;
    if (waiting[i].passed >= p.max_passed) return 0;  // due: nothing goes before it
  }
  return 0;
}

int pick_victim(const std::vector<PrefillView>& running, size_t uncached, const OvertakePolicy& p) {
  if (uncached > p.quick_tokens) return -1;
  int best = -1;
  for (int i = 0; i < int(running.size()); i++) {
    const PrefillView& r = running[i];
    if (r.displaced >= p.max_displaced || r.prompt_left < p.min_victim_left) continue;
    if (r.prompt_left < p.victim_ratio * std::max<size_t>(uncached, 1)) continue;
    if (best < 0 || r.prompt_left > running[best].prompt_left) best = i;
  }
  return best;
}

ReuseFrom choose_reuse(const SlotChoice& c, size_t host_n, bool donor_ok, size_t min_copy) {
  if (c.donor >= 0 && c.donor_lcp >= c.lcp + min_copy && c.donor_lcp >= host_n && donor_ok) return ReuseFrom::Donor;
  if (host_n >= c.lcp + min_copy) return ReuseFrom::Host;
  return ReuseFrom::Slot;
}

BatchPlan plan_batch(const std::vector<SeqWork>& seqs, int max_batch, double depth_unit) {
  BatchPlan p;
  for (int i = 0; i < int(seqs.size()); i++)
    if (seqs[i].decoding) {
      const int n = 1 + seqs[i].n_draft;
      p.parts.push_back({i, n, seqs[i].pos, true, false});
      p.rows += n;
    }
  int budget = max_batch - p.rows;
  // A step that yields a token (a decode, or a prompt's last chunk) is someone's latency: deep
  // in a long prompt a chunk then shrinks to tens of tokens, and a concurrent stream keeps
  // getting tokens every fraction of a second instead of one per multi-second full chunk.
  bool latency = p.rows > 0;
  double cost_left = max_batch / 4.0;
  // Shortest remaining prompt first (stable: equal prompts keep their admission order), so a
  // request admitted behind a long prefill has its own prefill in the very next step.
  std::vector<int> prefilling;
  for (int i = 0; i < int(seqs.size()); i++)
    if (!seqs[i].decoding && seqs[i].prompt_left > 0) prefilling.push_back(i);
  std::stable_sort(prefilling.begin(), prefilling.end(),
                   [&](int a, int b) { return seqs[a].prompt_left < seqs[b].prompt_left; });
  for (int i : prefilling) {
    if (budget <= 0) break;
    size_t k = std::min(seqs[i].prompt_left, size_t(budget));
    if (latency) {
      if (cost_left <= 0) break;
      size_t fit = 0;
      while (fit < k && cost_left > 0) {
        cost_left -= depth_unit > 0 ? 1.0 + double(seqs[i].pos + fit) / depth_unit : 1.0;
        fit++;
      }
      k = fit;
    }
    const bool last = k == seqs[i].prompt_left;
    p.parts.push_back({i, int(k), seqs[i].pos, false, last});
    p.rows += int(k);
    budget -= int(k);
    // A prompt finishing here gets its first token from this step: the longer ones behind it
    // ride along by cost too, so that the step stays short.
    if (last) latency = true;
  }
  return p;
}

std::vector<int32_t> draft_ngram(const int32_t* hist, size_t n, int min_n, int max_n, int max_draft) {
  if (max_draft <= 0 || min_n < 1) return {};
  for (int m = std::min<int>(max_n, int(n) - 1); m >= min_n; m--) {
    const int32_t* suf = hist + n - size_t(m);
    // Latest earlier occurrence first: recent text predicts the next tokens best.
    for (size_t j = n - size_t(m); j-- > 0;) {
      if (!std::equal(suf, suf + m, hist + j)) continue;
      const size_t from = j + size_t(m), to = std::min(n, from + size_t(max_draft));
      return std::vector<int32_t>(hist + from, hist + to);
    }
  }
  return {};
}

int adapt_draft(int cur, int drafted, int accepted, int max) {
  if (drafted > 0 && accepted == drafted) cur += 2;
  else if (drafted > 0 && accepted == 0) cur /= 2;
  return std::max(1, std::min(cur, max));
}

double step_cost_at(const DraftPolicy& p, int rows) {
  const auto& c = p.step_cost;
  int lo = std::min(rows, int(c.size()) - 1);
  while (lo > 0 && c[size_t(lo)] <= 0) lo--;
  if (lo == rows) return c[size_t(rows)];
  int hi = rows + 1;
  while (hi < int(c.size()) && c[size_t(hi)] <= 0) hi++;
  const bool has_lo = lo > 0, has_hi = hi < int(c.size());
  if (has_lo && has_hi) return c[size_t(lo)] + (c[size_t(hi)] - c[size_t(lo)]) * double(rows - lo) / double(hi - lo);
  if (has_lo) return c[size_t(lo)];
  if (has_hi) return c[size_t(hi)];
  return 1.0;
}

int draft_budget(const DraftPolicy& p, int n_decoding, double acceptance, int held_back) {
  if (n_decoding < 1) return 0;
  const int share = std::max(0, std::min(p.draft_max, (p.spec_rows - n_decoding) / n_decoding));
  const int probe = held_back >= p.probe_every ? std::min(1, share) : 0;
  if (acceptance < p.acceptance_floor) return probe;
  // The plain step is what drafts are weighed against: measure it first (one step without drafts).
  if (!p.step_cost.empty() && (size_t(n_decoding) >= p.step_cost.size() || p.step_cost[size_t(n_decoding)] <= 0)) return 0;
  // An acceptance of 1 would make every length look sure; the estimate never is.
  const double a = std::min(acceptance, 0.95), n = double(n_decoding);
  const double plain = n / step_cost_at(p, n_decoding);
  int best = 0;
  double best_rate = plain, ak = a;  // ak = a^(k+1)
  for (int k = 1; k <= share; k++) {
    ak *= a;
    const double tokens = n - 1 + (1 - ak) / (1 - a);
    const double rate = tokens / (step_cost_at(p, n_decoding + k) + k * p.draft_forward_cost / n);
    if (rate > best_rate * (1 + 1e-9)) {
      best_rate = rate;
      best = k;
    }
  }
  if (best > 0) return best;
  // Drafting does not pay at these costs: measure again now and then, far less often than a
  // sequence whose text turned unpredictable (a probe costs a draft model its catch-up forward).
  return held_back >= p.probe_every * p.cost_probe_factor ? std::min(1, share) : 0;
}

double update_acceptance(double acceptance, int drafted, int accepted) {
  if (drafted <= 0) return acceptance;
  return 0.7 * acceptance + 0.3 * double(accepted) / double(drafted);
}

int accepted_prefix(const std::vector<int32_t>& draft, const std::vector<int32_t>& sampled) {
  int a = 0;
  while (size_t(a) < draft.size() && size_t(a) < sampled.size() && sampled[size_t(a)] == draft[size_t(a)]) a++;
  return a;
}

}  // namespace mb
