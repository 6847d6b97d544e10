#include "scheduler.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "../model/model.h"
#include "../tokenizer/tokenizer.h"

namespace mb {

struct Scheduler::Seq {
  explicit Seq(EngineRequest r) : req(std::move(r)), sampler(req.sampling) {}
  EngineRequest req;
  Sampler sampler;
  Utf8Stream utf8;
  Clock::time_point t_submit, t_admit, t_first, t_last;
  int slot = -1;
  size_t prompt_done = 0;     // prompt tokens whose K/V is in the slot
  bool state_point_saved = false;
  int cached_tokens = 0;      // prompt tokens served from the prefix cache
  int n_gen = 0;
  std::vector<int32_t> draft;  // this step's draft tokens, fed after `pending`
  int draft_cur = 0;           // draft length to try next (adapt_draft)
  double acceptance = 1.0;     // recent share of drafts kept (update_acceptance)
  int held_back = 0;           // steps in a row draft_budget gave it nothing
  int draft_n = 0, draft_accepted = 0;
  int32_t pending = -1;       // sampled but not yet fed back (decode input of the next step)
  bool done = false;
  bool admitted = false;      // had a slot once (Start sent); back in the queue when displaced
  int passed = 0;             // waiting, times a quick request went first (OvertakePolicy)
  int displaced = 0;          // times its prefill gave its slot up to a quick request
  std::unique_ptr<GrammarConstraint> grammar;  // null = unconstrained
  std::unique_ptr<TriggerScanner> triggers;    // lazy grammar not yet triggered; null otherwise
  std::unique_ptr<GrammarConstraint> call;     // the lazy grammar, from its trigger on
  std::unique_ptr<CallConstraint> call_both;   // call, and `grammar` while the two agree
  // What the sampler obeys now.
  TokenConstraint* constraint() {
    if (call_both) return call_both.get();
    return grammar.get();
  }
};

// Below this many extra tokens a prefix copy from a running slot is not worth its memory traffic.
static constexpr size_t kMinCopyTokens = 16;
// Rows a step spends on draft tokens, at most, less one per decoding sequence (Scheduler::draft).
static constexpr int kSpecRows = 16;
// History tokens a sequence's draft model slot catches up on per step, at most.
static constexpr size_t kDraftCatchUp = 128;

// The step-cost averages follow a lower reading fast and a higher one slowly: being preempted
// (a shared machine, a busy page cache) only ever adds time, so the low readings are the closer
// to what a step of that size costs, and one slow step must not stop drafting for long.
static double ema(double avg, double x) {
  if (avg <= 0) return x;
  return x < avg ? 0.5 * avg + 0.5 * x : 0.9 * avg + 0.1 * x;
}

static double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

Scheduler::Scheduler(std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, SchedulerOptions opts, Sink sink)
    : Scheduler(std::move(model), nullptr, std::move(tok), std::move(opts), std::move(sink)) {}

Scheduler::Scheduler(std::unique_ptr<Model> model, std::unique_ptr<Model> draft_model, std::shared_ptr<const Tokenizer> tok,
                     SchedulerOptions opts, Sink sink)
    : model_(std::move(model)), draft_model_(std::move(draft_model)), tok_(std::move(tok)), opts_(opts), sink_(std::move(sink)) {
  if (opts_.n_slots < 1 || opts_.n_ctx < 1) throw std::invalid_argument("scheduler: slots and ctx must be >= 1");
  if (draft_model_) {
    // The engine's load checks say which models and why; these guard the invariants the draft
    // path relies on (one row layout, rollback).
    if (draft_model_->config().n_vocab != model_->config().n_vocab)
      throw std::invalid_argument("scheduler: the draft model's vocabulary size differs from the model's");
    if (!draft_model_->kv_rewindable() || !model_->kv_rewindable())
      throw std::invalid_argument("scheduler: speculative decoding with a draft model needs both models to roll back K/V");
  }
  // Every sequence needs room for at least its decode token in a step.
  opts_.max_batch = std::max(opts_.max_batch, opts_.n_slots);
  n_vocab_ = model_->config().n_vocab;
  {
    // Multiply-adds per token: the projections and the FFN (the routed experts on MoE models),
    // against 2 per head dim per cached position for QK and PV.
    const ModelConfig& c = model_->config();
    const double q = double(c.n_head) * c.head_dim, kv = double(c.n_head_kv) * c.head_dim;
    const double ffn = 3.0 * c.n_embd * c.n_ff * std::max(1, c.n_expert_used);
    const double matmul = c.n_embd * (2 * q + 2 * kv) + ffn;
    if (q > 0 && matmul > 0) attention_depth_unit_ = matmul / (2 * q);
  }
  slots_.resize(opts_.n_slots);
  // Only the last prompt token or the decode token of a sequence wants logits: one row per slot,
  // plus a row per draft token.
  opts_.spec_draft_max = std::max(1, opts_.spec_draft_max);
  rewindable_ = model_->kv_rewindable();
  const bool spec = opts_.spec_ngram || draft_model_;
  logits_.resize((size_t(opts_.n_slots) + size_t(spec ? kSpecRows : 0)) * size_t(n_vocab_));
  if (draft_model_) draft_logits_.resize(size_t(opts_.n_slots) * size_t(n_vocab_));
  step_ms_.assign(size_t(opts_.n_slots + kSpecRows + 1), 0.0);
  stats_.slots_total = opts_.n_slots;
  stats_.kv_tokens_total = int64_t(opts_.n_slots) * opts_.n_ctx;
  // The draft model's host cache shares the budget: --cache-ram and --cache-disk stay what the
  // server uses in all, split in proportion to bytes of K/V per token, so that both caches hold
  // about as many tokens and the draft model's prefix is there for the prompts whose model
  // prefix is (an equal cap each would double what the operator asked for; an even split would
  // leave the smaller model room for prompts the model has long evicted).
  const size_t bt = model_->kv_token_bytes(), bd = draft_model_ ? draft_model_->kv_token_bytes() : 0;
  const bool draft_cache = opts_.cache_bytes > 0 && bt > 0 && bd > 0 && !opts_.draft_cache_namespace.empty();
  auto share = [&](uint64_t bytes) { return draft_cache ? uint64_t(double(bytes) * double(bd) / double(bt + bd)) : 0; };
  const uint64_t draft_ram = share(opts_.cache_bytes), draft_disk = share(opts_.cache_disk_bytes);
  auto open_cache = [](const std::string& path, uint64_t bytes, size_t token_bytes, const std::string& ns,
                       const PromptCacheDisk& disk, const char* whose) -> std::unique_ptr<PromptCache> {
    try {
      auto c = std::make_unique<PromptCache>(path, bytes, token_bytes, ns, disk);
      if (c->enabled()) return c;  // else the cap holds less than one block
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mashbox: %s host prompt cache off: %s\n", whose, e.what());
    }
    return nullptr;
  };
  if (opts_.cache_bytes > 0 && bt > 0)
    cache_ = open_cache(opts_.cache_path, opts_.cache_bytes - draft_ram, bt, opts_.cache_namespace,
                        PromptCacheDisk{opts_.cache_dir, opts_.cache_disk_bytes - draft_disk}, "the model's");
  if (cache_ && draft_cache) {
    // A file and a disk directory of its own: at start-up a disk tier removes other namespaces'
    // block files over an hour old while the directory is over its cap, which with the draft
    // model's files beside the model's it would be (its cap is its share), so each would trim
    // the other's. The role is in the namespace so that a model drafting for itself keeps the
    // two apart all the same.
    const std::string path = opts_.cache_path.empty() ? std::string() : opts_.cache_path + ".draft";
    const std::string dir = opts_.cache_dir.empty() ? std::string() : opts_.cache_dir + "/draft";
    draft_cache_ = open_cache(path, draft_ram, bd, "role=draft\n" + opts_.draft_cache_namespace, PromptCacheDisk{dir, draft_disk},
                              "the draft model's");
  }
  // Earlier prompts draft too (Scheduler::draft), wherever drafts can be rolled back.
  if (cache_ && spec && rewindable_) cache_->index_drafts();
  if (cache_) stats_.host_cache = cache_->stats();
  if (draft_cache_) stats_.draft_host_cache = draft_cache_->stats();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (!thread_.joinable()) return;
  thread_.join();
  // The thread is gone, so this one may touch the slots: what they hold outlives the server
  // when the cache has a disk tier (its writer drains when the cache is destroyed).
  if (cache_ && !opts_.cache_dir.empty())
    for (int i = 0; i < opts_.n_slots; i++)
      if (!slots_[i].cached.empty()) save_to_host(i, slots_[i].cached.size());
}

void Scheduler::submit(EngineRequest req) {
  // cache_ is fixed once the thread runs, and prefetch_disk is safe from any thread.
  if (cache_) cache_->prefetch_disk(req.prompt.data(), req.prompt.size());
  if (draft_cache_) draft_cache_->prefetch_disk(req.prompt.data(), req.prompt.size());
  auto s = std::make_unique<Seq>(std::move(req));
  s->t_submit = Clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    incoming_.push_back(std::move(s));
    stats_.waiting++;
  }
  cv_.notify_all();
}

void Scheduler::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Scheduler::publish_stats() {
  SchedulerStats st;
  st.slots_total = opts_.n_slots;
  st.kv_tokens_total = int64_t(opts_.n_slots) * opts_.n_ctx;
  for (const auto& sl : slots_) {
    if (sl.seq) st.slots_in_use++;
    st.kv_tokens_used += int64_t(sl.cached.size());
  }
  st.prefix_lookups = prefix_lookups_;
  st.prefix_hit_tokens = prefix_hit_tokens_;
  st.prefix_lookup_tokens = prefix_lookup_tokens_;
  st.steps = steps_;
  st.spec_draft_tokens = spec_draft_tokens_;
  st.spec_accepted_tokens = spec_accepted_tokens_;
  if (cache_) st.host_cache = cache_->stats();
  if (draft_cache_) st.draft_host_cache = draft_cache_->stats();
  st.routed_expert_calls = model_->routed_expert_calls();  // this thread runs the forward passes
  st.graph_captures = model_->graph_captures();
  std::lock_guard<std::mutex> lk(mu_);
  st.waiting = int(waiting_.size() + incoming_.size());
  stats_ = st;
}

void Scheduler::loop() {
  for (;;) {
    std::vector<uint64_t> cancels;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stopping_ || !incoming_.empty() || !cancels_.empty() || !waiting_.empty() || !running_.empty();
      });
      if (stopping_) return;
      while (!incoming_.empty()) {
        waiting_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      cancels.swap(cancels_);
    }
    std::vector<EngineEvent> out;
    for (uint64_t id : cancels) {
      for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
        if ((*it)->req.id != id) continue;
        if ((*it)->admitted) {  // displaced: it had its Start, so it ends like a running one
          finish(**it, "cancelled", out);
          waiting_.erase(it);
          break;
        }
        EngineEvent ev;
        ev.kind = EngineEvent::Done;
        ev.id = id;
        ev.finish = "cancelled";
        ev.prompt_tokens = int((*it)->req.prompt.size());
        ev.queue_ms = ms_between((*it)->t_submit, Clock::now());
        out.push_back(std::move(ev));
        waiting_.erase(it);
        break;
      }
      for (auto& s : running_)
        if (s->req.id == id && !s->done) finish(*s, "cancelled", out);
    }
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->done; }), running_.end());
    step(out);
    publish_stats();
    if (!out.empty()) sink_(std::move(out));
  }
}

// Phase 0: a request the engine can take (its grammar compiles, its prompt fits). No slot yet.
bool Scheduler::accept_request(Seq& s, std::vector<EngineEvent>& out) {
  auto error = [&](std::string message) {
    EngineEvent ev;
    ev.kind = EngineEvent::Error;
    ev.id = s.req.id;
    ev.message = std::move(message);
    out.push_back(std::move(ev));
    return false;
  };
  if (s.req.compiled_grammar || !s.req.grammar.empty()) {
    // A grammar the caller did not compile is compiled here, so a bad one is an Error event
    // for this request alone (never an exception on the caller's thread).
    try {
      auto g = s.req.compiled_grammar ? s.req.compiled_grammar : Grammar::parse(s.req.grammar);
      s.grammar = std::make_unique<GrammarConstraint>(std::move(g), trie());
    } catch (const std::exception& e) {
      return error(std::string("invalid grammar: ") + e.what());
    }
  }
  if (s.req.lazy_grammar && !s.req.triggers.empty()) s.triggers = std::make_unique<TriggerScanner>(s.req.triggers, s.req.trigger_options);
  const auto& prompt = s.req.prompt;
  if (prompt.empty()) return error("empty prompt");
  if (int(prompt.size()) > opts_.n_ctx) return error("prompt does not fit in the context window");
  return true;
}

// Phase 2: give slot c.slot the longest prefix of `prompt` it can get, from itself, the donor
// slot or the host cache; returns how many prompt tokens need no prefill.
size_t Scheduler::reuse_prefix(const SlotChoice& c, const std::vector<int32_t>& prompt) {
  const int best = c.slot;
  // The last prompt token is always evaluated again: its logits are the first sample.
  const size_t max_reuse = prompt.size() - 1;
  Slot& sl = slots_[best];
  // Whatever path is taken, the slot keeps at most its shared prefix: save the rest first.
  if (cache_ && sl.cached.size() > std::min(c.lcp, max_reuse)) save_to_host(best, sl.cached.size());
  PromptCache::Match host;
  if (cache_) host = cache_->lookup(prompt.data(), prompt.size());
  // A model that keeps only a window of the past (sliding-window layers) may not be able to
  // continue from an arbitrary prefix: kv_reusable says how much of a slot is usable.
  const size_t donor_reuse = c.donor >= 0 ? std::min(c.donor_lcp, max_reuse) : 0;
  const bool donor_ok = c.donor >= 0 && size_t(model_->kv_reusable(c.donor, int(donor_reuse))) == donor_reuse;
  size_t reuse = 0;
  switch (choose_reuse(c, host.n, donor_ok, kMinCopyTokens)) {
    case ReuseFrom::Donor:
      reuse = donor_reuse;
      model_->kv_truncate(best, 0);
      model_->kv_copy(c.donor, best, int(reuse));
      sl.cached.assign(prompt.begin(), prompt.begin() + reuse);
      break;
    case ReuseFrom::Host: {
      // Restore from host memory on top of what the slot already shares with the prompt.
      const size_t keep = size_t(model_->kv_reusable(best, int(std::min(c.lcp, max_reuse))));
      model_->kv_truncate(best, int(keep));
      sl.cached.resize(keep);
      size_t end = keep;
      try {
        end = cache_->restore(host, keep, std::min(host.n, max_reuse), [&](size_t pos, size_t n, const uint8_t* bytes) {
          model_->kv_write(best, int(pos), int(n), bytes);
        });
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mashbox: host prompt cache restore failed: %s\n", e.what());
        end = keep;
        model_->kv_truncate(best, int(keep));
      }
      reuse = end;
      sl.cached.assign(prompt.begin(), prompt.begin() + reuse);
      break;
    }
    case ReuseFrom::Slot:
      reuse = size_t(model_->kv_reusable(best, int(std::min(c.lcp, max_reuse))));
      if (sl.cached.size() > reuse) {
        model_->kv_truncate(best, int(reuse));
        sl.cached.resize(reuse);
      }
      break;
  }
  reuse_draft_prefix(c, prompt);
  return reuse;
}

// The draft model's slot takes the longest prefix of `prompt` it can get by the same rules, from
// what it holds, the donor's draft slot or its own host cache, chosen apart from the model's
// (either cache may have evicted what the other holds), so that draft_with_model catches up on
// the rest only. Its slot was saved with the model's (reuse_prefix, save_to_host).
void Scheduler::reuse_draft_prefix(const SlotChoice& c, const std::vector<int32_t>& prompt) {
  if (!draft_model_) return;
  const int best = c.slot;
  const size_t max_reuse = prompt.size() - 1;
  Slot& sl = slots_[best];
  try {
    SlotChoice d = c;
    d.lcp = size_t(draft_model_->kv_reusable(best, int(std::min(common_prefix(sl.draft_cached, prompt), max_reuse))));
    d.donor_lcp = c.donor >= 0 ? std::min(common_prefix(slots_[c.donor].draft_cached, prompt), max_reuse) : 0;
    const bool donor_ok = c.donor >= 0 && size_t(draft_model_->kv_reusable(c.donor, int(d.donor_lcp))) == d.donor_lcp;
    PromptCache::Match host;
    if (draft_cache_) host = draft_cache_->lookup(prompt.data(), prompt.size());
    size_t keep = d.lcp;
    switch (choose_reuse(d, host.n, donor_ok, kMinCopyTokens)) {
      case ReuseFrom::Donor:
        draft_model_->kv_truncate(best, 0);
        draft_model_->kv_copy(c.donor, best, int(d.donor_lcp));
        keep = d.donor_lcp;
        break;
      case ReuseFrom::Host:
        draft_model_->kv_truncate(best, int(d.lcp));
        // A bad block stops the restore where it is: keep is what was written.
        keep = draft_cache_->restore(host, d.lcp, std::min(host.n, max_reuse), [&](size_t pos, size_t n, const uint8_t* bytes) {
          draft_model_->kv_write(best, int(pos), int(n), bytes);
        });
        break;
      case ReuseFrom::Slot:
        break;
    }
    draft_model_->kv_truncate(best, int(keep));
    sl.draft_cached.assign(prompt.begin(), prompt.begin() + long(keep));
  } catch (const std::exception& e) {
    // The draft model's K/V only feeds guesses: it starts this slot over rather than fail a request.
    std::fprintf(stderr, "mashbox: the draft model's prefix reuse failed, it catches up instead: %s\n", e.what());
    draft_model_->kv_truncate(best, 0);
    sl.draft_cached.clear();
  }
}

// Prompt tokens of `prompt` that some slot or the host cache holds already.
size_t Scheduler::known_prefix(const std::vector<int32_t>& prompt) {
  size_t known = 0;
  for (const auto& sl : slots_) known = std::max(known, common_prefix(sl.cached, prompt));
  if (cache_) known = std::max(known, cache_->known(prompt.data(), prompt.size()));
  return known;
}

// Phase 1a: which waiting request goes next and, when every slot is busy, whether it may take
// a running prefill's slot (next_waiting, pick_victim). Returns its index in waiting_, or -1
// when it waits. A displaced prefill goes back to the queue right behind it.
int Scheduler::choose_next(bool any_free) {
  if (any_free && waiting_.size() == 1) return 0;  // nothing to reorder: no lookup to pay
  std::vector<WaitingView> wv;
  for (size_t i = 0; i < waiting_.size() && int(i) < overtake_.look; i++) {
    const auto& p = waiting_[i]->req.prompt;
    wv.push_back({p.size() - std::min(known_prefix(p), p.size()), waiting_[i]->passed});
  }
  const size_t pick = next_waiting(wv, overtake_);
  if (any_free) return int(pick);
  // The displaced prefill's K/V must survive in the host cache (reuse_prefix saves it there
  // when the slot changes hands), or its work would be lost.
  if (!cache_) return -1;
  std::vector<PrefillView> pv;
  std::vector<size_t> idx;
  for (size_t i = 0; i < running_.size(); i++) {
    const Seq& r = *running_[i];
    if (r.done || r.slot < 0 || r.n_gen > 0 || r.pending >= 0 || r.prompt_done >= r.req.prompt.size()) continue;
    pv.push_back({r.req.prompt.size() - r.prompt_done, r.displaced});
    idx.push_back(i);
  }
  const int v = pick_victim(pv, wv[pick].uncached, overtake_);
  if (v < 0) return -1;
  std::unique_ptr<Seq> victim = std::move(running_[idx[size_t(v)]]);
  running_.erase(running_.begin() + long(idx[size_t(v)]));
  slots_[victim->slot].seq = nullptr;  // its K/V stays in the slot until the next owner saves it
  victim->slot = -1;
  victim->prompt_done = 0;
  victim->displaced++;
  waiting_.insert(waiting_.begin() + long(pick) + 1, std::move(victim));
  return int(pick);
}

void Scheduler::admit(std::vector<EngineEvent>& out) {
  while (!waiting_.empty()) {
    // Phase 1: pick a request, a slot (free, sharing the most with the prompt), and a donor.
    bool any_free = false;
    for (const auto& sl : slots_) any_free = any_free || !sl.seq;
    const int next = choose_next(any_free);
    if (next < 0) return;
    std::vector<SlotView> views(slots_.size());
    for (size_t i = 0; i < slots_.size(); i++) views[i] = {&slots_[i].cached, slots_[i].seq != nullptr};
    for (int i = 0; i < next; i++) waiting_[size_t(i)]->passed++;
    std::unique_ptr<Seq> s = std::move(waiting_[size_t(next)]);
    waiting_.erase(waiting_.begin() + next);
    const auto now = Clock::now();
    const bool again = s->admitted;  // displaced before: grammar, sampler and Start are done
    if (!again && !accept_request(*s, out)) continue;
    const auto& prompt = s->req.prompt;
    const SlotChoice c = pick_slot(views, prompt);
    const size_t reuse = reuse_prefix(c, prompt);
    s->slot = c.slot;
    s->prompt_done = reuse;
    slots_[c.slot].seq = s.get();
    if (again) {
      running_.push_back(std::move(s));
      continue;
    }
    prefix_lookups_++;
    prefix_lookup_tokens_ += int64_t(prompt.size());
    prefix_hit_tokens_ += int64_t(reuse);
    s->admitted = true;
    s->cached_tokens = int(reuse);
    s->state_point_saved = s->req.state_point <= 0 || size_t(s->req.state_point) > prompt.size();
    s->t_admit = now;
    s->draft_cur = opts_.spec_draft_max;
    const size_t w = size_t(std::max(0, s->req.sampling.penalty_last_n));
    for (size_t i = prompt.size() > w ? prompt.size() - w : 0; i < prompt.size(); i++) s->sampler.accept(prompt[i]);

    EngineEvent ev;
    ev.kind = EngineEvent::Start;
    ev.id = s->req.id;
    ev.prompt_tokens = int(prompt.size());
    ev.cached_tokens = int(reuse);
    ev.queue_ms = ms_between(s->t_submit, now);
    out.push_back(std::move(ev));
    running_.push_back(std::move(s));
    if (running_.back()->req.max_tokens == 0) finish(*running_.back(), "length", out);
  }
}

void Scheduler::finish(Seq& s, const char* reason, std::vector<EngineEvent>& out) {
  const auto now = Clock::now();
  EngineEvent ev;
  ev.kind = EngineEvent::Done;
  ev.id = s.req.id;
  ev.finish = reason;
  ev.text = s.utf8.flush();
  ev.prompt_tokens = int(s.req.prompt.size());
  ev.cached_tokens = s.cached_tokens;
  ev.completion_tokens = s.n_gen;
  ev.draft_n = s.draft_n;
  ev.draft_n_accepted = s.draft_accepted;
  ev.queue_ms = ms_between(s.t_submit, s.t_admit);
  if (s.n_gen > 0) {
    ev.prompt_ms = ms_between(s.t_admit, s.t_first);
    ev.predicted_ms = ms_between(s.t_first, s.t_last);
  } else {
    ev.prompt_ms = ms_between(s.t_admit, now);
  }
  out.push_back(std::move(ev));
  s.done = true;
  if (s.slot >= 0) slots_[s.slot].seq = nullptr;  // K/V stays cached for prefix reuse
  s.slot = -1;
}

void Scheduler::fail(Seq& s, const std::string& message, std::vector<EngineEvent>& out) {
  EngineEvent ev;
  ev.kind = EngineEvent::Error;
  ev.id = s.req.id;
  ev.message = message;
  out.push_back(std::move(ev));
  s.done = true;
  if (s.slot >= 0) slots_[s.slot].seq = nullptr;  // the K/V written so far is still valid
  s.slot = -1;
}

void Scheduler::save_to_host(int slot, size_t n) {
  const auto& c = slots_[slot].cached;
  n = std::min(n, c.size());
  try {
    cache_->save(c.data(), n, [&](size_t pos, size_t count, uint8_t* dst) { model_->kv_read(slot, int(pos), int(count), dst); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mashbox: host prompt cache save failed: %s\n", e.what());
  }
  if (!draft_cache_) return;
  // The draft model's slot may hold less (it catches up only while its sequence decodes) or
  // other tokens past the model's (drafts not yet trimmed): only the prefix both agree on is its
  // K/V of these tokens.
  const size_t nd = std::min(n, common_prefix(slots_[slot].draft_cached, c));
  if (nd == 0) return;
  try {
    draft_cache_->save(c.data(), nd, [&](size_t pos, size_t count, uint8_t* dst) { draft_model_->kv_read(slot, int(pos), int(count), dst); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mashbox: the draft model's host prompt cache save failed: %s\n", e.what());
  }
}

const std::shared_ptr<const TokenTrie>& Scheduler::trie() {
  if (!trie_) {
    // Pieces exactly as the detokenizer emits them, so the grammar sees the bytes the client
    // gets. Control tokens render as nothing and so stay out of the trie.
    const int32_t nv = tok_->n_vocab();
    std::vector<std::string> pieces(static_cast<size_t>(nv));
    std::vector<uint8_t> eog(static_cast<size_t>(nv), 0);
    for (int32_t i = 0; i < nv; i++) {
      pieces[size_t(i)] = tok_->piece(i, false);
      eog[size_t(i)] = tok_->is_eog(i) ? 1 : 0;
    }
    trie_ = std::make_shared<const TokenTrie>(pieces, eog);
  }
  return trie_;
}

// Phase 3a: drafts for the decoding sequences, each within its draft_budget and all within the
// step's rows. An n-gram draft is the continuation of the latest earlier occurrence of the
// history's last 2..4 tokens; with a draft model, its greedy continuation of the history, unless
// the history holds a match of 3..4 tokens: an edit or a quote of the context continues that match
// better than a small model guesses it, and costs no forward pass. Where the history has no match,
// the host cache's earlier prompts are asked for one (its draft index: the same agent's earlier
// turns, a file another session read): 3 tokens, or 4 before a draft model's guess, since in that
// much text a 3-token coincidence is common.
void Scheduler::draft(int n_decoding) {
  // Rows a step may spend on drafts, at most: past kSpecRows decoding sequences draft_budget
  // leaves none anyway, and max_batch must still hold every decode row.
  int budget = std::min(kSpecRows - n_decoding, opts_.max_batch - n_decoding);
  DraftPolicy policy;
  policy.draft_max = opts_.spec_draft_max;
  policy.spec_rows = kSpecRows;
  policy.step_cost = step_ms_;
  // Until a draft forward is measured it counts as free, so that the first drafts measure it.
  policy.draft_forward_cost = draft_model_ ? draft_forward_ms_ : 0.0;
  DraftPolicy lookup = policy;  // n-gram drafts cost no forward
  lookup.draft_forward_cost = 0.0;
  const bool on = (opts_.spec_ngram || draft_model_) && rewindable_;
  std::vector<int32_t> hist;
  std::vector<std::pair<Seq*, int>> by_model;  // sequences the draft model continues, and how far
  for (auto& s : running_) {
    s->draft.clear();
    if (s->pending < 0 || budget <= 0 || !on) continue;
    const auto& c = slots_[s->slot].cached;
    // Room: the drafts' K/V must fit the slot, and no more tokens than max_tokens allows.
    int room = opts_.n_ctx - int(c.size()) - 1;
    if (s->req.max_tokens >= 0) room = std::min(room, s->req.max_tokens - s->n_gen - 1);
    const int share = draft_budget(policy, n_decoding, s->acceptance, s->held_back);
    const int share_lookup = draft_model_ ? draft_budget(lookup, n_decoding, s->acceptance, s->held_back) : share;
    s->held_back = std::max(share, share_lookup) > 0 ? 0 : s->held_back + 1;
    const int n_lookup = std::min({s->draft_cur, share_lookup, room, budget});
    if (n_lookup > 0) {
      hist.assign(c.begin(), c.end());
      hist.push_back(s->pending);
      s->draft = draft_ngram(hist.data(), hist.size(), draft_model_ ? 3 : 2, 4, n_lookup);
      if (s->draft.empty() && cache_) {
        s->draft.resize(size_t(n_lookup));
        const size_t min_match = PromptCache::kDraftGram + (draft_model_ ? 1 : 0);
        s->draft.resize(cache_->continuation(hist.data(), hist.size(), min_match, s->draft.data(), s->draft.size()));
        // The cache does not checksum tokens it drafts: a torn block's ids stay out of forward().
        s->draft.erase(std::find_if(s->draft.begin(), s->draft.end(), [&](int32_t t) { return t < 0 || t >= n_vocab_; }),
                       s->draft.end());
      }
      budget -= int(s->draft.size());
      if (!s->draft.empty() || !draft_model_) continue;
    }
    const int n = std::min({s->draft_cur, share, room, budget});
    if (draft_model_ && n > 0) {
      by_model.emplace_back(s.get(), n);
      budget -= n;
    }
  }
  if (!by_model.empty()) draft_with_model(by_model);
}

// Greedy drafts from the draft model, batched across sequences: first one forward that brings
// each slot of the draft model up to its sequence's history (the target's slot tokens and the
// pending token; usually just those two, a new prompt kDraftCatchUp tokens a step) and gives the
// first draft token, then one forward per further draft position for every sequence still drafting.
// A greedy draft is a point mass, so accepted_prefix's rule keeps the output exactly the same.
void Scheduler::draft_with_model(const std::vector<std::pair<Seq*, int>>& want) {
  const int V = n_vocab_;
  auto argmax = [V](const float* row) {
    int best = 0;
    for (int v = 1; v < V; v++)
      if (row[v] > row[best]) best = v;
    return int32_t(best);
  };
  try {
    Batch b;
    // The sequences that draft this step and how far, and where each one's next draft token goes.
    std::vector<std::pair<Seq*, int>> drafting;
    std::vector<int32_t> next_pos;
    for (size_t j = 0; j < want.size(); j++) {
      Seq& s = *want[j].first;
      Slot& sl = slots_[s.slot];
      const size_t h = sl.cached.size() + 1;  // history: the slot's tokens, then pending
      auto at = [&](size_t i) { return i < sl.cached.size() ? sl.cached[i] : s.pending; };
      // What the draft slot already holds of the history (a reused slot, or one that fell behind
      // while it did not draft), less the last token, whose logits are needed now.
      size_t keep = 0;
      while (keep < sl.draft_cached.size() && keep < h - 1 && sl.draft_cached[keep] == at(keep)) keep++;
      keep = size_t(draft_model_->kv_reusable(s.slot, int(keep)));
      draft_model_->kv_truncate(s.slot, int(keep));
      sl.draft_cached.resize(keep);
      // A long way behind (a new prompt): catch up a chunk a step, as prefill rides along with
      // decode, and draft once caught up, so no step stalls on a whole prompt.
      const size_t end = std::min(h, keep + kDraftCatchUp);
      for (size_t i = keep; i < end; i++) {
        b.token.push_back(at(i));
        b.pos.push_back(int32_t(i));
        b.slot.push_back(s.slot);
        b.logits.push_back(i + 1 == h ? 1 : 0);
        sl.draft_cached.push_back(at(i));
      }
      if (end < h) continue;
      drafting.push_back(want[j]);
      next_pos.push_back(int32_t(h));
    }
    auto t0 = Clock::now();
    draft_model_->forward(b, draft_logits_.data());
    // A catch-up of a whole prompt is a prefill, not what a draft position costs.
    if (b.token.size() <= 4 * want.size()) draft_forward_ms_ = ema(draft_forward_ms_, ms_between(t0, Clock::now()));
    for (size_t j = 0; j < drafting.size(); j++) drafting[j].first->draft.push_back(argmax(draft_logits_.data() + j * size_t(V)));
    for (int k = 1;; k++) {
      Batch d;
      std::vector<Seq*> rows;
      for (size_t j = 0; j < drafting.size(); j++) {
        Seq& s = *drafting[j].first;
        if (drafting[j].second <= k) continue;
        d.token.push_back(s.draft.back());
        d.pos.push_back(next_pos[j]++);
        d.slot.push_back(s.slot);
        d.logits.push_back(1);
        slots_[s.slot].draft_cached.push_back(s.draft.back());
        rows.push_back(&s);
      }
      if (rows.empty()) break;
      t0 = Clock::now();
      draft_model_->forward(d, draft_logits_.data());
      draft_forward_ms_ = ema(draft_forward_ms_, ms_between(t0, Clock::now()));
      for (size_t r = 0; r < rows.size(); r++) rows[r]->draft.push_back(argmax(draft_logits_.data() + r * size_t(V)));
    }
  } catch (const std::exception& e) {
    // Drafts are only guesses: this step goes without them, and the draft model starts over.
    std::fprintf(stderr, "mashbox: draft model failed, drafting restarts: %s\n", e.what());
    for (const auto& [s, n] : want) s->draft.clear();
    for (int i = 0; i < opts_.n_slots; i++) {
      draft_model_->kv_truncate(i, 0);
      slots_[i].draft_cached.clear();
    }
  }
}

// The draft model's slot keeps only what the target's slot still holds (rejected drafts leave
// both).
void Scheduler::trim_draft_kv(int slot) {
  if (!draft_model_) return;
  auto& dc = slots_[slot].draft_cached;
  const size_t keep = common_prefix(dc, slots_[slot].cached);
  if (dc.size() > keep) {
    draft_model_->kv_truncate(slot, int(keep));
    dc.resize(keep);
  }
}

// Phase 3b: the plan as a Batch; parts[i] of plan belongs to seqs[i]. The tokens join their
// slots' `cached` now; rejected drafts leave again in process_outputs.
Batch Scheduler::build_batch(const BatchPlan& plan, const std::vector<Seq*>& seqs) {
  Batch b;
  for (const BatchPart& part : plan.parts) {
    Seq& s = *seqs[size_t(part.seq)];
    Slot& sl = slots_[s.slot];
    for (int i = 0; i < part.n; i++) {
      int32_t tok;
      if (part.decode) tok = i == 0 ? s.pending : s.draft[size_t(i - 1)];
      else tok = s.req.prompt[s.prompt_done + size_t(i)];
      b.token.push_back(tok);
      b.pos.push_back(int32_t(part.pos0) + i);
      b.slot.push_back(s.slot);
      b.logits.push_back(part.decode || (part.last_chunk && i + 1 == part.n) ? 1 : 0);
      sl.cached.push_back(tok);
    }
    if (part.decode) s.pending = -1;
    else s.prompt_done += size_t(part.n);
  }
  return b;
}

// Phase 4: run. On a fault the K/V of every slot in the batch is suspect: drop it all and fail
// every running sequence.
bool Scheduler::run(const Batch& b, std::vector<EngineEvent>& out) {
  try {
    model_->forward(b, logits_.data());
    steps_++;
    return true;
  } catch (const std::exception& e) {
    for (auto& s : running_) {
      EngineEvent ev;
      ev.kind = EngineEvent::Error;
      ev.id = s->req.id;
      ev.message = std::string("forward failed: ") + e.what();
      ev.fault = true;
      ev.device_fault = dynamic_cast<const DeviceError*>(&e) != nullptr;
      out.push_back(std::move(ev));
      s->done = true;
    }
    for (int i = 0; i < opts_.n_slots; i++) {
      model_->kv_truncate(i, 0);
      slots_[i].cached.clear();
      slots_[i].seq = nullptr;
    }
    running_.clear();
    return false;
  }
}

void Scheduler::note_step_ms(int rows, double ms) {
  if (rows > 0 && size_t(rows) < step_ms_.size()) step_ms_[size_t(rows)] = ema(step_ms_[size_t(rows)], ms);
}

// Phase 5a: draw the next token of s from its logits row, under its grammar; a lazy grammar's
// trigger opening here switches the constraint mid-token. -1 = the sequence failed.
int32_t Scheduler::sample_row(Seq& s, float* row, std::vector<EngineEvent>& out) {
  int32_t tok = s.sampler.sample(row, n_vocab_, s.constraint());
  // Lazy grammar: does this token open a call? Then the call grammar takes the trigger's
  // bytes, and this token's bytes past them; a token it cannot take is drawn again under it.
  size_t call_from = 0;  // bytes of this token's piece before the call begins
  bool triggered = false;
  if (tok >= 0 && s.triggers && !tok_->is_eog(tok)) {
    const std::string piece = tok_->piece(tok, false);
    const size_t at = s.triggers->scan(piece);
    if (at == TriggerScanner::npos) {
      s.triggers->append(piece);
    } else {
      triggered = true;
      const std::string& text = s.triggers->text();
      s.call = std::make_unique<GrammarConstraint>(s.req.lazy_grammar, trie());
      const size_t before = std::min(at, text.size());
      if (!s.call->matcher().accept(std::string_view(text).substr(before))) {
        fail(s, "grammar: the call grammar does not take its own trigger (internal error)", out);
        return -1;
      }
      call_from = at > text.size() ? at - text.size() : 0;
      s.call_both = std::make_unique<CallConstraint>(s.call.get(), s.grammar.get());
      if (!s.call->matcher().allows(std::string_view(piece).substr(call_from))) {
        // The row still holds this step's logits (penalties applied, a request grammar's
        // mask at most): draw again, the call grammar deciding from the trigger on.
        tok = s.sampler.sample(row, n_vocab_, s.call_both.get(), false);
        call_from = 0;
      }
      s.triggers.reset();
    }
  }
  if (tok < 0) {
    // Cannot happen with a grammar whose every prefix has a continuation the vocabulary
    // can spell; end the request rather than spin.
    GrammarConstraint* g = s.call ? s.call.get() : s.grammar.get();
    const std::string why = g && !g->error().empty() ? g->error() : "no token of the vocabulary can continue it";
    fail(s, "grammar: generation cannot continue: " + why, out);
    return -1;
  }
  if (s.call) {
    const bool ok = triggered && call_from > 0 ? s.call->matcher().accept(std::string_view(tok_->piece(tok, false)).substr(call_from)) : s.call->accept(tok);
    if (!ok) {
      fail(s, "grammar: the sampled token was rejected (internal error)", out);
      return -1;
    }
    // The request's own grammar narrows the call while it can; once it cannot, it is gone.
    if (s.grammar && (!s.call_both->own() || !s.grammar->accept(tok))) {
      s.call_both->drop_own();
      s.grammar.reset();
    }
  } else if (s.grammar && !s.grammar->accept(tok)) {
    fail(s, "grammar: the sampled token was rejected (internal error)", out);
    return -1;
  }
  return tok;
}

// Phase 5b: emit tok, then end s if it is done: end of generation, a finished grammar,
// max_tokens, or a full slot (held: tokens the slot holds once tok's input is counted).
// Returns whether s goes on.
bool Scheduler::emit(Seq& s, int32_t tok, size_t held, Clock::time_point now, std::vector<EngineEvent>& out) {
  s.sampler.accept(tok);
  s.t_last = now;
  if (tok_->is_eog(tok)) {
    finish(s, "stop", out);
    return false;
  }
  s.n_gen++;
  EngineEvent ev;
  ev.kind = EngineEvent::Token;
  ev.id = s.req.id;
  ev.token = tok;
  ev.text = s.utf8.push(tok_->piece(tok, false));
  if (s.n_gen == 1) {
    ev.first = true;
    ev.queue_ms = ms_between(s.t_submit, s.t_admit);
    ev.prompt_ms = ms_between(s.t_admit, s.t_first);
  }
  out.push_back(std::move(ev));
  // The grammar is complete and allows nothing more: stop now instead of spending a step on
  // an end-of-generation token (which also covers vocabularies without one).
  GrammarConstraint* ends = s.call ? s.call.get() : s.grammar.get();
  if (ends && ends->finished()) finish(s, "stop", out);
  else if (s.req.max_tokens >= 0 && s.n_gen >= s.req.max_tokens) finish(s, "length", out);
  else if (int(held) >= opts_.n_ctx) finish(s, "length", out);
  else return true;
  return false;
}

// Phase 5: every part's logits rows, in batch order. A decode part's rows are sampled in turn
// while each drawn token confirms the draft token fed after it (accepted_prefix's rule, applied
// as it goes); the K/V of the drafts past the first mismatch is dropped from the slot.
void Scheduler::process_outputs(const BatchPlan& plan, const std::vector<Seq*>& seqs, std::vector<EngineEvent>& out) {
  const auto now = Clock::now();
  size_t r = 0;  // logits row
  for (const BatchPart& part : plan.parts) {
    const bool wants = part.decode || part.last_chunk;
    if (!wants) continue;
    Seq& s = *seqs[size_t(part.seq)];
    const int slot = s.slot;
    const int first = part.decode ? 0 : part.n - 1;  // first row of the part with logits
    const int n_rows = part.n - first;
    int last = 0;  // index of the last row consumed
    // Counted as they go, so the Done event of a sequence ending mid-part has them.
    const int drafted = part.decode ? int(s.draft.size()) : 0;
    s.draft_n += drafted;
    spec_draft_tokens_ += drafted;
    for (int i = 0; i < n_rows; i++) {
      last = i;
      if (s.n_gen == 0) s.t_first = now;
      const int32_t tok = sample_row(s, logits_.data() + (r + size_t(i)) * size_t(n_vocab_), out);
      if (tok < 0) break;
      if (!emit(s, tok, part.pos0 + size_t(first + i) + 1, now, out)) break;
      // The next row holds the logits after draft[i]: usable only if tok is draft[i].
      if (i + 1 < n_rows && tok == s.draft[size_t(i)]) {
        s.draft_accepted++;
        spec_accepted_tokens_++;
        continue;
      }
      s.pending = tok;
      break;
    }
    if (drafted > 0) {
      s.draft_cur = adapt_draft(s.draft_cur, drafted, last, opts_.spec_draft_max);  // last = accepted
      s.acceptance = update_acceptance(s.acceptance, drafted, last);
      // Drafts never consumed leave the slot (and so never reach the host cache).
      const size_t keep = part.pos0 + size_t(last) + 1;
      if (slots_[slot].cached.size() > keep) {
        model_->kv_truncate(slot, int(keep));
        slots_[slot].cached.resize(keep);
      }
      trim_draft_kv(slot);
    }
    r += size_t(n_rows);
  }
}

void Scheduler::step(std::vector<EngineEvent>& out) {
  admit(out);
  // Start events leave before the forward pass: a client learns its request is admitted at
  // once, not after the first prefill chunk (seconds on a long prompt).
  if (!out.empty()) {
    publish_stats();
    sink_(std::move(out));
    out.clear();
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->done; }), running_.end());
  if (running_.empty()) return;

  int n_decoding = 0;
  for (auto& s : running_) n_decoding += s->pending >= 0;
  draft(n_decoding);
  std::vector<SeqWork> work;
  std::vector<Seq*> seqs;
  for (auto& s : running_) {
    SeqWork w;
    w.slot = s->slot;
    w.pos = slots_[s->slot].cached.size();
    w.decoding = s->pending >= 0;
    w.n_draft = int(s->draft.size());
    if (!w.decoding && s->n_gen == 0) w.prompt_left = s->req.prompt.size() - s->prompt_done;
    work.push_back(w);
    seqs.push_back(s.get());
  }
  const BatchPlan plan = plan_batch(work, opts_.max_batch, attention_depth_unit_);
  if (plan.rows == 0) return;
  const Batch b = build_batch(plan, seqs);
  const auto t0 = Clock::now();
  if (!run(b, out)) return;
  bool decode_only = true;
  for (const BatchPart& part : plan.parts) decode_only = decode_only && part.decode;
  if (decode_only) note_step_ms(plan.rows, ms_between(t0, Clock::now()));
  // State points whose prefill is complete go to the host cache now: the slot may be serving
  // someone else by the time a new session of this client arrives.
  if (cache_)
    for (auto& s : running_)
      if (!s->state_point_saved && s->prompt_done >= size_t(s->req.state_point)) {
        s->state_point_saved = true;
        save_to_host(s->slot, size_t(s->req.state_point));
      }
  process_outputs(plan, seqs, out);
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->done; }), running_.end());
}

}  // namespace mb
