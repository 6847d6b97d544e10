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
  int32_t pending = -1;       // sampled but not yet fed back (decode input of the next step)
  bool done = false;
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

static double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

Scheduler::Scheduler(std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, SchedulerOptions opts, Sink sink)
    : model_(std::move(model)), tok_(std::move(tok)), opts_(opts), sink_(std::move(sink)) {
  if (opts_.n_slots < 1 || opts_.n_ctx < 1) throw std::invalid_argument("scheduler: slots and ctx must be >= 1");
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
  // Only the last prompt token or the decode token of a sequence wants logits: one row per slot.
  logits_.resize(size_t(opts_.n_slots) * size_t(n_vocab_));
  stats_.slots_total = opts_.n_slots;
  stats_.kv_tokens_total = int64_t(opts_.n_slots) * opts_.n_ctx;
  if (opts_.cache_bytes > 0 && model_->kv_token_bytes() > 0) {
    try {
      cache_ = std::make_unique<PromptCache>(opts_.cache_path, opts_.cache_bytes, model_->kv_token_bytes(), opts_.cache_namespace,
                                             PromptCacheDisk{opts_.cache_dir, opts_.cache_disk_bytes});
      if (!cache_->enabled()) cache_.reset();  // the cap holds less than one block
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mashbox: host prompt cache off: %s\n", e.what());
      cache_.reset();
    }
  }
  if (cache_) stats_.host_cache = cache_->stats();
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
  if (cache_) st.host_cache = cache_->stats();
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

void Scheduler::admit(std::vector<EngineEvent>& out) {
  while (!waiting_.empty()) {
    int free_slot = -1;
    for (int i = 0; i < opts_.n_slots; i++)
      if (!slots_[i].seq) { free_slot = i; break; }
    if (free_slot < 0) return;
    std::unique_ptr<Seq> s = std::move(waiting_.front());
    waiting_.pop_front();
    const auto now = Clock::now();
    const auto& prompt = s->req.prompt;
    if (s->req.compiled_grammar || !s->req.grammar.empty()) {
      // A grammar the caller did not compile is compiled here, so a bad one is an Error event
      // for this request alone (never an exception on the caller's thread).
      try {
        auto g = s->req.compiled_grammar ? s->req.compiled_grammar : Grammar::parse(s->req.grammar);
        s->grammar = std::make_unique<GrammarConstraint>(std::move(g), trie());
      } catch (const std::exception& e) {
        EngineEvent ev;
        ev.kind = EngineEvent::Error;
        ev.id = s->req.id;
        ev.message = std::string("invalid grammar: ") + e.what();
        out.push_back(std::move(ev));
        continue;
      }
    }
    if (s->req.lazy_grammar && !s->req.triggers.empty()) s->triggers = std::make_unique<TriggerScanner>(s->req.triggers, s->req.trigger_options);
    if (prompt.empty() || int(prompt.size()) > opts_.n_ctx) {
      EngineEvent ev;
      ev.kind = EngineEvent::Error;
      ev.id = s->req.id;
      ev.message = prompt.empty() ? "empty prompt" : "prompt does not fit in the context window";
      out.push_back(std::move(ev));
      continue;
    }
    // Take the free slot whose cache shares the longest prefix with this prompt; on a tie the
    // slot holding the least, so longer caches survive for the requests that can use them.
    int best = -1;
    size_t best_lcp = 0;
    for (int i = 0; i < opts_.n_slots; i++) {
      if (slots_[i].seq) continue;
      const auto& c = slots_[i].cached;
      size_t n = std::min(c.size(), prompt.size()), l = 0;
      while (l < n && c[l] == prompt[l]) l++;
      if (best < 0 || l > best_lcp || (l == best_lcp && c.size() < slots_[best].cached.size())) {
        best = i;
        best_lcp = l;
      }
    }
    // A slot still running may hold a longer shared prefix (concurrent chats with one system
    // prompt): copying its K/V is far cheaper than prefilling the same tokens again.
    int donor = -1;
    size_t donor_lcp = best_lcp;
    for (int i = 0; i < opts_.n_slots; i++) {
      if (!slots_[i].seq) continue;
      const auto& c = slots_[i].cached;
      size_t n = std::min(c.size(), prompt.size()), l = 0;
      while (l < n && c[l] == prompt[l]) l++;
      if (l > donor_lcp) { donor = i; donor_lcp = l; }
    }
    // The last prompt token is always evaluated again: its logits are the first sample.
    const size_t max_reuse = prompt.size() - 1;
    Slot& sl = slots_[best];
    // Whatever path is taken, the slot keeps at most its shared prefix: save the rest first.
    if (cache_ && sl.cached.size() > std::min(best_lcp, max_reuse)) save_to_host(best, sl.cached.size());
    PromptCache::Match host;
    if (cache_) host = cache_->lookup(prompt.data(), prompt.size());
    size_t reuse;
    // A model that keeps only a window of the past (sliding-window layers) may not be able to
    // continue from an arbitrary prefix: kv_reusable says how much of a slot is usable.
    const size_t donor_reuse = donor >= 0 ? std::min(donor_lcp, max_reuse) : 0;
    if (donor >= 0 && donor_lcp >= best_lcp + kMinCopyTokens && donor_lcp >= host.n &&
        size_t(model_->kv_reusable(donor, int(donor_reuse))) == donor_reuse) {
      reuse = donor_reuse;
      model_->kv_truncate(best, 0);
      model_->kv_copy(donor, best, int(reuse));
      sl.cached.assign(prompt.begin(), prompt.begin() + reuse);
    } else if (host.n >= best_lcp + kMinCopyTokens) {
      // Restore from host memory on top of what the slot already shares with the prompt.
      const size_t keep = size_t(model_->kv_reusable(best, int(std::min(best_lcp, max_reuse))));
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
    } else {
      reuse = size_t(model_->kv_reusable(best, int(std::min(best_lcp, max_reuse))));
      if (sl.cached.size() > reuse) {
        model_->kv_truncate(best, int(reuse));
        sl.cached.resize(reuse);
      }
    }
    prefix_lookups_++;
    prefix_lookup_tokens_ += int64_t(prompt.size());
    prefix_hit_tokens_ += int64_t(reuse);
    s->slot = best;
    s->prompt_done = reuse;
    s->cached_tokens = int(reuse);
    s->state_point_saved = s->req.state_point <= 0 || size_t(s->req.state_point) > prompt.size();
    s->t_admit = now;
    const size_t w = size_t(std::max(0, s->req.sampling.penalty_last_n));
    for (size_t i = prompt.size() > w ? prompt.size() - w : 0; i < prompt.size(); i++) s->sampler.accept(prompt[i]);

    EngineEvent ev;
    ev.kind = EngineEvent::Start;
    ev.id = s->req.id;
    ev.prompt_tokens = int(prompt.size());
    ev.cached_tokens = int(reuse);
    ev.queue_ms = ms_between(s->t_submit, now);
    out.push_back(std::move(ev));
    sl.seq = s.get();
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

  Batch b;
  std::vector<Seq*> row_seq;  // [n_wanted] which sequence each logits row belongs to
  auto push = [&](Seq& s, int32_t tok, bool want) {
    Slot& sl = slots_[s.slot];
    b.token.push_back(tok);
    b.pos.push_back(int32_t(sl.cached.size()));
    b.slot.push_back(s.slot);
    b.logits.push_back(want ? 1 : 0);
    sl.cached.push_back(tok);
    if (want) row_seq.push_back(&s);
  };
  // Decode tokens first: one per generating sequence, so their latency never waits on prefill.
  for (auto& s : running_)
    if (s->pending >= 0) {
      push(*s, s->pending, true);
      s->pending = -1;
    }
  int budget = opts_.max_batch - int(b.token.size());
  // With decode tokens aboard, the step's length is their latency: prefill rides along only up
  // to the cost of a quarter batch at depth 0. A prompt token at depth d costs 1 + d/unit, so
  // deep in a 20k-token prompt a chunk shrinks to tens of tokens, and a concurrent stream keeps
  // getting tokens every fraction of a second instead of one per multi-second 512-token chunk.
  // (Attention cost is per token, so the prefill loses little; alone, it runs full batches.)
  // A step that yields a token (a decode, or a prompt's last chunk) is someone's latency.
  bool latency = !b.token.empty();
  double cost_left = opts_.max_batch / 4.0;
  // Shortest remaining prompt first: a request admitted while another slot prefills a long
  // prompt has its own prefill in the very next step, instead of waiting for every chunk of the
  // long one, which rides along by cost in that step and while the new request decodes.
  // Stable, so equal prompts keep their admission order. (A row's bits do not depend on its
  // neighbours in a batch, which mixing decode tokens with prefill already relies on.)
  std::vector<Seq*> prefilling;  // [sequences with prompt left] by remaining prompt tokens
  for (auto& s : running_)
    if (s->prompt_done < s->req.prompt.size() && s->n_gen == 0) prefilling.push_back(s.get());
  std::stable_sort(prefilling.begin(), prefilling.end(), [](const Seq* a, const Seq* b) {
    return a->req.prompt.size() - a->prompt_done < b->req.prompt.size() - b->prompt_done;
  });
  for (Seq* s : prefilling) {
    if (budget <= 0) break;
    const auto& p = s->req.prompt;
    size_t k = std::min(p.size() - s->prompt_done, size_t(budget));
    if (latency) {
      if (cost_left <= 0) break;
      const size_t pos0 = slots_[s->slot].cached.size();
      size_t fit = 0;
      while (fit < k && cost_left > 0) {
        cost_left -= attention_depth_unit_ > 0 ? 1.0 + double(pos0 + fit) / attention_depth_unit_ : 1.0;
        fit++;
      }
      k = fit;
    }
    for (size_t i = 0; i < k; i++) {
      const size_t j = s->prompt_done + i;
      push(*s, p[j], j + 1 == p.size());
    }
    s->prompt_done += k;
    budget -= int(k);
    // A prompt finishing here gets its first token from this step: the longer ones behind it
    // ride along by cost too, so that the step stays short.
    if (s->prompt_done == p.size()) latency = true;
  }
  if (b.token.empty()) return;

  try {
    model_->forward(b, logits_.data());
  } catch (const std::exception& e) {
    // The KV of every slot in this batch is now suspect: drop it and fail the sequences.
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
    return;
  }
  steps_++;
  // State points whose prefill is complete go to the host cache now: the slot may be serving
  // someone else by the time a new session of this client arrives.
  if (cache_)
    for (auto& s : running_)
      if (!s->state_point_saved && s->prompt_done >= size_t(s->req.state_point)) {
        s->state_point_saved = true;
        save_to_host(s->slot, size_t(s->req.state_point));
      }
  const auto now = Clock::now();
  for (size_t r = 0; r < row_seq.size(); r++) {
    Seq& s = *row_seq[r];
    float* row = logits_.data() + r * size_t(n_vocab_);
    if (s.n_gen == 0) s.t_first = now;
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
          continue;
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
      continue;
    }
    if (s.call) {
      const bool ok = triggered && call_from > 0 ? s.call->matcher().accept(std::string_view(tok_->piece(tok, false)).substr(call_from)) : s.call->accept(tok);
      if (!ok) {
        fail(s, "grammar: the sampled token was rejected (internal error)", out);
        continue;
      }
      // The request's own grammar narrows the call while it can; once it cannot, it is gone.
      if (s.grammar && (!s.call_both->own() || !s.grammar->accept(tok))) {
        s.call_both->drop_own();
        s.grammar.reset();
      }
    } else if (s.grammar && !s.grammar->accept(tok)) {
      fail(s, "grammar: the sampled token was rejected (internal error)", out);
      continue;
    }
    s.sampler.accept(tok);
    s.t_last = now;
    if (tok_->is_eog(tok)) {
      finish(s, "stop", out);
      continue;
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
    else if (int(slots_[s.slot].cached.size()) >= opts_.n_ctx) finish(s, "length", out);
    else s.pending = tok;
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->done; }), running_.end());
}

}  // namespace mb
