// The scheduler's decisions as pure functions over plain records, so each can be read and
// unit-tested alone (tests/test_scheduler_phases.cpp). Scheduler (scheduler.cpp) owns the state
// and the side effects and calls these in order, once per step:
//
//   admit:  next_waiting (-> pick_victim when no slot is free) -> pick_slot -> choose_reuse -> (Scheduler::reuse_prefix: K/V copy, restore or truncate)
//   step:   draft_budget per decoding sequence -> draft_ngram (or the draft model's greedy steps)
//           -> plan_batch -> (Scheduler::run: forward)
//           -> (Scheduler::process_outputs: sample, grammar, stop, detokenize; accepted_prefix,
//              update_acceptance)
//
// Dimension legend: S slots, P prompt tokens, H a sequence's history (prompt + output).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mb {

// Tokens a and b share from the start.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

// ---- pick a slot -------------------------------------------------------------------------------
struct SlotView {
  const std::vector<int32_t>* cached = nullptr;  // tokens whose K/V the slot holds
  bool busy = false;                              // a sequence runs in it
};
struct SlotChoice {
  int slot = -1;        // free slot to run in; -1 = none free
  size_t lcp = 0;       // prompt tokens it already holds
  int donor = -1;       // busy slot holding a longer shared prefix; -1 = none
  size_t donor_lcp = 0;
};
// The free slot sharing the longest prefix with the prompt; ties go to the slot caching the
// least, so longer caches survive for the requests that can use them. A busy slot sharing more
// than that is the donor (concurrent chats with one system prompt).
SlotChoice pick_slot(const std::vector<SlotView>& slots, const std::vector<int32_t>& prompt);

// ---- overtake ----------------------------------------------------------------------------------
// A request whose prompt is almost all cached (an agent's next turn, a new conversation of the
// same client) needs a fraction of a second of prefill; behind a cold prompt of 18k tokens it
// would wait minutes for a slot. So a quick request goes ahead of slow ones in the queue, and
// when no slot is free it takes the slot of the running prefill with the most left, whose
// progress the host cache keeps (it resumes from there). Both are bounded, so that no request
// waits forever: a request is passed by at most max_passed others, and displaced at most
// max_displaced times.
struct OvertakePolicy {
  size_t quick_tokens = 1024;     // a request is quick with at most this many tokens to prefill
  size_t min_victim_left = 2048;  // a prefill is displaced only with at least this many left
  size_t victim_ratio = 4;        // ... and this many times what the quick request has to do
  // An agent's turns come every few seconds while a cold first prompt of another client prefills
  // for minutes: at 2 the cold one stopped yielding after its first two, and the rest waited.
  int max_passed = 8;
  int max_displaced = 8;
  int look = 8;                   // waiting requests considered, from the front
};
struct WaitingView {
  size_t uncached = 0;  // prompt tokens no slot and no cache holds
  int passed = 0;       // times a later request went first
};
// The waiting request to admit next: the front one, unless a quick one among the first
// p.look comes before it and every request it would pass may still be passed.
size_t next_waiting(const std::vector<WaitingView>& waiting, const OvertakePolicy& p);
struct PrefillView {
  size_t prompt_left = 0;  // tokens it has yet to prefill
  int displaced = 0;       // times it was displaced already
};
// Which running prefill (index into `running`) gives up its slot to a request with `uncached`
// tokens to prefill, when no slot is free; -1 = none (it waits).
int pick_victim(const std::vector<PrefillView>& running, size_t uncached, const OvertakePolicy& p);

// ---- reuse a prefix ----------------------------------------------------------------------------
enum class ReuseFrom { Slot, Donor, Host };
// Where the prompt's prefix K/V comes from. host_n: tokens the host cache holds for the prompt
// (0 = none or off); donor_ok: the donor's prefix is reusable (kv_reusable) in full. A copy must
// gain at least min_copy tokens over what the slot already shares to be worth its traffic.
ReuseFrom choose_reuse(const SlotChoice& c, size_t host_n, bool donor_ok, size_t min_copy);

// ---- plan the batch ----------------------------------------------------------------------------
// One running sequence as the planner sees it.
struct SeqWork {
  int slot = -1;
  size_t pos = 0;           // tokens its slot holds (the next row's position)
  bool decoding = false;    // it has a sampled token to feed back this step
  int n_draft = 0;          // draft tokens to verify behind that token
  size_t prompt_left = 0;   // prompt tokens not yet prefilled (sequences still prefilling)
};
// One contiguous run of rows of one sequence in the step's batch.
struct BatchPart {
  int seq = -1;             // index into the planner's input
  int n = 0;                // rows: 1 + n_draft for a decode, a chunk length for a prefill
  size_t pos0 = 0;          // position of its first row
  bool decode = false;      // decode (+ drafts): every row wants logits; prefill: the last only if
  bool last_chunk = false;  // ... the chunk ends the prompt
};
struct BatchPlan {
  std::vector<BatchPart> parts;  // decodes first in input order, then prefill chunks
  int rows = 0;
};
// Decode rows first, so their latency never waits on prefill; then prefill chunks, shortest
// remaining prompt first, within max_batch rows. With a token-yielding row aboard, prefill rides
// along only up to the cost of a quarter batch at depth 0, a prompt token at depth d costing
// 1 + d / depth_unit (depth_unit 0 = unknown: each costs 1).
BatchPlan plan_batch(const std::vector<SeqWork>& seqs, int max_batch, double depth_unit);

// ---- draft (n-gram prompt lookup) --------------------------------------------------------------
// The continuation, up to max_draft tokens, of the latest earlier occurrence of the history's
// longest suffix of min_n..max_n tokens. Empty when no suffix of min_n tokens recurs.
std::vector<int32_t> draft_ngram(const int32_t* hist, size_t n, int min_n, int max_n, int max_draft);

// Draft length for the next step from the last one's: a fully accepted draft earns two more
// tokens, a fully rejected one halves it; never below 1 nor above max.
int adapt_draft(int cur, int drafted, int accepted, int max);

// ---- draft budget -----------------------------------------------------------------------------
// How many draft tokens one decoding sequence may have verified this step, whichever way they are
// drafted. Decode is bound by reading the weights, so a few extra rows ride almost free while few
// sequences decode; as more do, the step turns compute-bound and every row costs, so the share of
// each shrinks: (spec_rows - n_decoding) / n_decoding, to nothing at spec_rows decoding sequences.
// A sequence whose recent acceptance (update_acceptance) is below acceptance_floor mostly loses
// its rows to verification it would waste; it drafts nothing, except one token every
// probe_every-th step it is held back, so that a turn back to predictable text is noticed.
// Within its share, a sequence drafts only as far as pays: at n decoding sequences a plain step
// yields n tokens for step_cost(n); k drafts at acceptance a yield n - 1 + (1 - a^(k+1)) / (1 - a)
// for step_cost(n + k) plus k draft forwards (a draft model's, shared by the n sequences). The
// length with the most tokens per cost wins; none when no length beats the plain step (the
// verification rows or the draft model cost more than they bring), but a rarer probe.
struct DraftPolicy {
  int draft_max = 8;              // SchedulerOptions::spec_draft_max
  int spec_rows = 16;             // draft rows a step may carry at one decoding sequence, plus one
  double acceptance_floor = 0.3;  // below this, no drafts but the probe
  int probe_every = 8;            // steps held back between two probes
  int cost_probe_factor = 8;      // ... times this when it is the costs that hold drafts back
  // Measured cost (any unit, e.g. ms) of a decode-only step of the model by its rows:
  // step_cost[r] for r rows, 0 = not measured. An unmeasured size costs what the nearest measured
  // sizes around it say (linearly), or the largest smaller one (so rows no step has carried yet
  // look free, and get tried); empty: every step costs the same. With a step_cost, no drafts
  // until the plain step of n_decoding rows is measured.
  std::vector<double> step_cost;
  double draft_forward_cost = 0;  // one draft model forward, same unit (0: n-gram drafts, free)
};
// The cost of a step of `rows` rows as DraftPolicy::step_cost says it.
double step_cost_at(const DraftPolicy& p, int rows);
// held_back: steps in a row this sequence drafted nothing.
int draft_budget(const DraftPolicy& p, int n_decoding, double acceptance, int held_back);

// The recent acceptance after a verification that kept `accepted` of `drafted` tokens: an
// exponential average (weight 0.3 on the newest), so a few steps of new text move it. drafted 0
// leaves it as it was.
double update_acceptance(double acceptance, int drafted, int accepted);

// ---- process outputs ---------------------------------------------------------------------------
// How many of `draft` the sampled tokens confirm: sampled[i] is the token drawn from the row
// after draft[i - 1] (sampled[0] from the decode row), and draft[i] stands only if
// sampled[i] == draft[i]. For a point-mass draft this is the standard speculative rule: draft d
// survives with probability p(d), and a rejected position keeps its token, drawn from p — which
// given that it is not d is exactly p with d removed and renormalized.
int accepted_prefix(const std::vector<int32_t>& draft, const std::vector<int32_t>& sampled);

}  // namespace mb
