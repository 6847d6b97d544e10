// The scheduler's phases (scheduler_phases.h) on plain records: slot choice, prefix reuse
// choice, batch planning, n-gram drafting, draft length adaptation and the acceptance rule,
// with a chi-square test that verifying a point-mass draft by sampling keeps the distribution
// (and that a wrong rule is caught by the same test).
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../sampler.h"
#include "../scheduler_phases.h"
#include "../../util/tests/check.h"

using namespace mb;
using Toks = std::vector<int32_t>;

static void test_pick_slot() {
  const Toks prompt = {1, 2, 3, 4, 5};
  Toks a = {1, 2, 9}, b = {1, 2, 3, 7, 7, 7}, c = {1, 2, 3, 4, 8}, d = {}, e = {1, 2, 3};
  // b and e share 3; e caches less, so e is taken; busy c shares 4 and is the donor.
  SlotChoice ch = pick_slot({{&a, false}, {&b, false}, {&c, true}, {&e, false}}, prompt);
  CHECK_EQ(ch.slot, 3);
  CHECK_EQ(ch.lcp, size_t(3));
  CHECK_EQ(ch.donor, 2);
  CHECK_EQ(ch.donor_lcp, size_t(4));
  // No busy slot shares more: no donor.
  ch = pick_slot({{&c, false}, {&b, true}}, prompt);
  CHECK_EQ(ch.slot, 0);
  CHECK_EQ(ch.donor, -1);
  // Nothing free.
  ch = pick_slot({{&a, true}}, prompt);
  CHECK_EQ(ch.slot, -1);
  // Empty caches tie at 0: the first.
  ch = pick_slot({{&d, false}, {&d, false}}, prompt);
  CHECK_EQ(ch.slot, 0);
  CHECK_EQ(common_prefix(a, prompt), size_t(2));
}

static void test_choose_reuse() {
  SlotChoice c;
  c.slot = 0;
  c.lcp = 10;
  c.donor = 1;
  c.donor_lcp = 30;
  CHECK(choose_reuse(c, 0, true, 16) == ReuseFrom::Donor);
  CHECK(choose_reuse(c, 0, false, 16) == ReuseFrom::Slot);    // donor's window gone
  CHECK(choose_reuse(c, 40, true, 16) == ReuseFrom::Host);    // host holds more
  CHECK(choose_reuse(c, 30, true, 16) == ReuseFrom::Donor);   // a tie goes to the slot copy
  c.donor_lcp = 20;                                            // gains under 16
  CHECK(choose_reuse(c, 0, true, 16) == ReuseFrom::Slot);
  CHECK(choose_reuse(c, 26, true, 16) == ReuseFrom::Host);
  CHECK(choose_reuse(c, 25, true, 16) == ReuseFrom::Slot);
}

static void test_plan_batch() {
  // Two decoders (one with 3 drafts), two prefills: decodes first, in input order, then the
  // shorter prompt first.
  std::vector<SeqWork> w(4);
  w[0] = {0, 100, false, 0, 50};
  w[1] = {1, 7, true, 3, 0};
  w[2] = {2, 0, false, 0, 5};
  w[3] = {3, 9, true, 0, 0};
  BatchPlan p = plan_batch(w, 512, 0);
  CHECK_EQ(p.parts.size(), size_t(4));
  CHECK_EQ(p.parts[0].seq, 1);
  CHECK_EQ(p.parts[0].n, 4);
  CHECK_EQ(p.parts[0].pos0, size_t(7));
  CHECK(p.parts[0].decode);
  CHECK_EQ(p.parts[1].seq, 3);
  CHECK_EQ(p.parts[1].n, 1);
  CHECK_EQ(p.parts[2].seq, 2);  // 5 left < 50 left
  CHECK_EQ(p.parts[2].n, 5);
  CHECK(p.parts[2].last_chunk);
  // Latency: at most a quarter batch (128 at depth 0) of prefill rides with decodes: 50 fits.
  CHECK_EQ(p.parts[3].seq, 0);
  CHECK_EQ(p.parts[3].n, 50);
  CHECK_EQ(p.rows, 4 + 1 + 5 + 50);
  // Alone, a prefill takes the whole batch; the rest waits.
  std::vector<SeqWork> big = {{0, 0, false, 0, 1000}, {1, 0, false, 0, 2000}};
  p = plan_batch(big, 512, 0);
  CHECK_EQ(p.parts.size(), size_t(1));
  CHECK_EQ(p.parts[0].n, 512);
  CHECK(!p.parts[0].last_chunk);
  // With a decoder aboard, deep prefill tokens cost more: at depth 320 with unit 320 each costs
  // 2+, so fewer than 64 of the 128-cost quarter batch fit.
  std::vector<SeqWork> deep = {{0, 50, true, 0, 0}, {1, 320, false, 0, 1000}};
  p = plan_batch(deep, 512, 320);
  CHECK_EQ(p.parts.size(), size_t(2));
  CHECK(p.parts[1].n > 40 && p.parts[1].n < 64);
  // Nothing to do.
  CHECK_EQ(plan_batch({{0, 3, false, 0, 0}}, 512, 0).rows, 0);
}

static void test_draft_ngram() {
  // "a b c d e ... a b" -> the continuation after the earlier "a b" is "c d e".
  const Toks h = {1, 2, 3, 4, 5, 9, 1, 2};
  CHECK(draft_ngram(h.data(), h.size(), 2, 4, 3) == Toks({3, 4, 5}));
  CHECK(draft_ngram(h.data(), h.size(), 2, 4, 8) == Toks({3, 4, 5, 9, 1, 2}));  // up to the end
  CHECK(draft_ngram(h.data(), h.size(), 3, 4, 3).empty());                       // no 3-gram recurs
  CHECK(draft_ngram(h.data(), h.size(), 2, 4, 0).empty());
  // The longest suffix wins over a later shorter match: "7 1 2" occurs once early, "1 2" late.
  const Toks g = {7, 1, 2, 10, 11, 1, 2, 20, 7, 1, 2};
  CHECK(draft_ngram(g.data(), g.size(), 2, 4, 2) == Toks({10, 11}));
  // Among equal lengths the latest earlier occurrence.
  const Toks l = {1, 2, 10, 1, 2, 20, 1, 2};
  CHECK(draft_ngram(l.data(), l.size(), 2, 2, 1) == Toks({20}));
  // Too short a history.
  CHECK(draft_ngram(l.data(), 1, 2, 4, 4).empty());
  CHECK(draft_ngram(l.data(), 0, 2, 4, 4).empty());
}

static void test_adapt_and_accept() {
  CHECK_EQ(adapt_draft(4, 4, 4, 8), 6);
  CHECK_EQ(adapt_draft(8, 8, 8, 8), 8);
  CHECK_EQ(adapt_draft(4, 4, 0, 8), 2);
  CHECK_EQ(adapt_draft(1, 1, 0, 8), 1);
  CHECK_EQ(adapt_draft(4, 4, 2, 8), 4);
  CHECK_EQ(adapt_draft(4, 0, 0, 8), 4);   // nothing drafted: unchanged
  CHECK_EQ(accepted_prefix({5, 6, 7}, {5, 6, 9, 1}), 2);
  CHECK_EQ(accepted_prefix({5, 6, 7}, {5, 6, 7, 1}), 3);
  CHECK_EQ(accepted_prefix({5}, {4, 1}), 0);
  CHECK_EQ(accepted_prefix({}, {4}), 0);
}

// Chi-square statistic of counts against probabilities p over n draws.
// The draft budget: a step's extra rows are cheap only while it stays bound by reading weights.
static void test_draft_budget() {
  DraftPolicy p;  // draft_max 8, 16 spec rows, floor 0.3, probe every 8
  CHECK_EQ(draft_budget(p, 1, 1.0, 0), p.draft_max);  // one sequence, predictable text: all of it
  CHECK_EQ(draft_budget(p, 0, 1.0, 0), 0);
  // Non-increasing in the number of decoding sequences, at every acceptance, and nothing left
  // once the step carries spec_rows decode rows.
  for (double a : {1.0, 0.8, 0.5, 0.31, 0.2, 0.0})
    for (int held : {0, 3, 8, 20}) {
      int prev = draft_budget(p, 1, a, held);
      for (int n = 2; n <= 40; n++) {
        const int b = draft_budget(p, n, a, held);
        check(b <= prev, "draft budget non-increasing in decoding sequences (n " + std::to_string(n) + ")");
        check(b >= 0 && b <= p.draft_max, "draft budget within [0, draft_max]");
        if (n >= p.spec_rows) CHECK_EQ(b, 0);
        prev = b;
      }
    }
  CHECK(draft_budget(p, 2, 1.0, 0) < p.draft_max);
  CHECK(draft_budget(p, 4, 1.0, 0) > 0);
  // Below the acceptance floor: nothing, except the one-token probe after probe_every steps.
  for (int held = 0; held < p.probe_every; held++) CHECK_EQ(draft_budget(p, 1, 0.29, held), 0);
  CHECK_EQ(draft_budget(p, 1, 0.29, p.probe_every), 1);
  CHECK_EQ(draft_budget(p, 1, 0.0, 100), 1);
  CHECK_EQ(draft_budget(p, p.spec_rows, 0.0, 100), 0);  // no probe where no rows are left
  CHECK_EQ(draft_budget(p, 1, 0.3, 0), p.draft_max);  // at the floor, drafting goes on
  // The acceptance estimate: a run of rejections takes it under the floor within a few steps, a
  // run of acceptances back above it; steps without drafts leave it alone.
  double a = 1.0;
  int steps = 0;
  while (a >= p.acceptance_floor) {
    a = update_acceptance(a, 4, 0);
    steps++;
  }
  CHECK(steps >= 2 && steps <= 5);
  CHECK_EQ(update_acceptance(a, 0, 0), a);
  for (int i = 0; i < 3; i++) a = update_acceptance(a, 1, 1);
  CHECK(a >= p.acceptance_floor);
  CHECK(update_acceptance(0.5, 4, 4) > 0.5 && update_acceptance(0.5, 4, 0) < 0.5);
  DraftPolicy q = p;
  q.draft_max = 3;
  CHECK_EQ(draft_budget(q, 1, 1.0, 0), 3);
  // Measured costs. Step costs interpolate between measured sizes; past the largest, the largest.
  DraftPolicy m = p;
  m.step_cost = {0, 80, 0, 0, 0, 120, 0};
  CHECK_EQ(step_cost_at(m, 1), 80.0);
  CHECK_EQ(step_cost_at(m, 3), 100.0);
  CHECK_EQ(step_cost_at(m, 9), 120.0);
  CHECK_EQ(step_cost_at(DraftPolicy{}, 4), 1.0);
  CHECK_EQ(draft_budget(m, 2, 1.0, 0), 0);  // the plain step of 2 rows is not measured yet
  CHECK(draft_budget(m, 1, 1.0, 0) > 0);     // 1 row is, and more rows look free: drafts are tried
  // Verification rows that cost six decode steps (measured on a 2-core box: 1 row 83 ms, 2 rows
  // 100, 5 rows 508) and a draft model forward of 64 ms: no length pays, so nothing but the probe.
  m.step_cost = {0, 83, 100, 0, 0, 508, 0, 0, 0, 0};
  m.draft_forward_cost = 64;
  CHECK_EQ(draft_budget(m, 1, 1.0, 0), 0);
  CHECK_EQ(draft_budget(m, 1, 1.0, m.probe_every), 0);
  CHECK_EQ(draft_budget(m, 1, 1.0, m.probe_every * m.cost_probe_factor), 1);
  // The same rows with free n-gram drafts: one or two pay (1.95 tokens for 100 against 1 for 83).
  m.draft_forward_cost = 0;
  CHECK(draft_budget(m, 1, 1.0, 0) >= 1);
  // Rows nearly free (weight-bound decode), a draft forward a third of a step: long drafts at high
  // acceptance, shorter as it falls.
  m.step_cost = {0, 100, 102, 104, 106, 108, 110, 112, 114, 116};
  m.draft_forward_cost = 32;
  CHECK(draft_budget(m, 1, 1.0, 0) >= 5);
  CHECK_EQ(draft_budget(m, 1, 0.8, 0), 3);  // 2.95 tokens for 202 beats 2.44 / 168 and 3.36 / 236
  int prev = p.draft_max;
  for (double a : {1.0, 0.9, 0.8, 0.6, 0.4, 0.3}) {
    const int b = draft_budget(m, 1, a, 0);
    check(b <= prev, "costly drafts: shorter as acceptance falls");
    prev = b;
  }
  CHECK_EQ(draft_budget(m, 1, 0.2, 0), 0);
}

static double chi2(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double x = 0;
  for (size_t i = 0; i < p.size(); i++) {
    const double e = p[i] * n;
    x += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x;
}

// Speculative verification by sampling: the token kept at a drafted position is the one the
// sampler draws from the row (accepted iff it equals the draft). Over many seeds its law must
// be p itself, the sampler's own softmax. A wrong rule (accept the draft with probability
// p(d) but resample rejections from the full p, d included) must fail the same bound.
static void test_acceptance_distribution() {
  const int V = 6, N = 200000;
  const float logits[V] = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f};
  std::vector<double> p(V);
  double z = 0;
  for (int i = 0; i < V; i++) z += std::exp(double(logits[i]));
  for (int i = 0; i < V; i++) p[i] = std::exp(double(logits[i])) / z;
  // df 5: P(chi2 > 40) < 1e-7, so a correct rule fails by chance essentially never; the wrong
  // rule moves p(d) to p(d) + (1 - p(d)) p(d), a chi-square in the thousands at this N.
  const double bound = 40.0;
  for (int32_t d : {0, 3}) {
    std::vector<int> right(V, 0), wrong(V, 0), explicit_rule(V, 0);
    int accepted = 0;
    std::mt19937_64 u(1234);
    for (int i = 0; i < N; i++) {
      SamplerParams sp;
      sp.temperature = 1.0f;
      sp.has_seed = true;
      sp.seed = uint64_t(i) * 2654435761u + 17;
      sp.penalty_last_n = 0;
      Sampler s(sp);
      std::vector<float> row(logits, logits + V);
      const int32_t tok = s.sample(row.data(), V);
      right[size_t(tok)]++;
      accepted += tok == d;
      // The textbook rule spelled out: keep d with probability p(d), else draw from p without d.
      if (std::uniform_real_distribution<double>(0, 1)(u) < p[size_t(d)]) {
        explicit_rule[size_t(d)]++;
      } else {
        std::vector<float> row3(logits, logits + V);
        row3[size_t(d)] = -INFINITY;
        explicit_rule[size_t(s.sample(row3.data(), V))]++;
      }
      // The wrong rule.
      std::vector<float> row2(logits, logits + V);
      const bool keep = std::uniform_real_distribution<double>(0, 1)(u) < p[size_t(d)];
      const int32_t t2 = keep ? d : s.sample(row2.data(), V);
      wrong[size_t(t2)]++;
    }
    const double xr = chi2(right, p, N), xw = chi2(wrong, p, N), xe = chi2(explicit_rule, p, N);
    std::printf("acceptance, draft %d: chi2 %.2f (rule), %.2f (textbook rule), %.0f (wrong rule), bound %.0f\n", d, xr, xe,
                xw, bound);
    check(xr < bound, "verification by sampling keeps p (draft " + std::to_string(d) + ")");
    check(xe < bound, "the textbook rule keeps p (draft " + std::to_string(d) + ")");
    // The draft survives with probability p(d): within 6 standard deviations.
    const double sd = std::sqrt(p[size_t(d)] * (1 - p[size_t(d)]) / N);
    check(std::fabs(double(accepted) / N - p[size_t(d)]) < 6 * sd, "acceptance rate p(d) (draft " + std::to_string(d) + ")");
    check(xw > bound, "the wrong rule is caught (draft " + std::to_string(d) + ")");
  }
}

// Quick requests go first, within the bounds that keep every request moving.
static void test_overtake() {
  OvertakePolicy p;
  p.quick_tokens = 100;
  p.min_victim_left = 1000;
  p.victim_ratio = 4;
  p.max_passed = 2;
  p.max_displaced = 1;
  p.look = 3;
  // The front is quick, or nothing is: FIFO.
  CHECK_EQ(next_waiting({{50, 0}, {10, 0}}, p), size_t(0));
  CHECK_EQ(next_waiting({{500, 0}, {800, 0}}, p), size_t(0));
  CHECK_EQ(next_waiting({}, p), size_t(0));
  // The first quick one behind slow ones goes first ...
  CHECK_EQ(next_waiting({{500, 0}, {800, 1}, {100, 0}, {5, 0}}, p), size_t(2));
  // ... unless one it would pass was passed enough already ...
  CHECK_EQ(next_waiting({{500, 0}, {800, 2}, {100, 0}}, p), size_t(0));
  CHECK_EQ(next_waiting({{500, 2}, {10, 0}}, p), size_t(0));
  // ... but one behind a due request may not use it to jump ahead of the rest either.
  CHECK_EQ(next_waiting({{500, 1}, {10, 0}, {800, 2}}, p), size_t(1));
  // ... or it is beyond the window.
  CHECK_EQ(next_waiting({{500, 0}, {800, 0}, {900, 0}, {5, 0}}, p), size_t(0));

  // The victim: the prefill with the most left, if it has enough, and was not displaced too often.
  CHECK_EQ(pick_victim({{5000, 0}, {9000, 0}, {20000, 1}}, 50, p), 1);
  CHECK_EQ(pick_victim({{999, 0}}, 10, p), -1);        // too little left: it finishes first
  CHECK_EQ(pick_victim({{1000, 0}}, 10, p), 0);
  CHECK_EQ(pick_victim({{1000, 0}}, 100, p), 0);       // 1000 >= 4 * 100
  CHECK_EQ(pick_victim({{1000, 0}}, 101, p), -1);      // not quick
  p.quick_tokens = 1000;
  CHECK_EQ(pick_victim({{1000, 0}}, 300, p), -1);      // quick, but 1000 < 4 * 300
  CHECK_EQ(pick_victim({}, 1, p), -1);
}

int main() {
  test_pick_slot();
  test_choose_reuse();
  test_plan_batch();
  test_draft_ngram();
  test_adapt_and_accept();
  test_draft_budget();
  test_acceptance_distribution();
  test_overtake();
  TEST_MAIN_END();
}
