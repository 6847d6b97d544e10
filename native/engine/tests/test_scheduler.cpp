// Scheduler behaviour on a fake model whose logits depend on every token in the slot's KV, so any
// mix-up of slots, positions, chunking or prefix reuse changes the output. The fake also checks
// that each slot's K/V is written contiguously (pos == tokens held).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "../../model/model.h"
#include "../../tokenizer/tokenizer.h"
#include "../scheduler.h"
#include "../../util/tests/check.h"

using namespace mb;

static constexpr int kVocab = 64;
static constexpr int kEog = 63;
static constexpr int kForceEog = 62;  // fake rule: after this token the model says EOG

// Next token = a hash of the whole history, so it depends on slot contents and order.
static int32_t next_of(const std::vector<int32_t>& hist) {
  if (!hist.empty() && hist.back() == kForceEog) return kEog;
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : hist) h = (h ^ uint64_t(t)) * 1099511628211ull;
  return int32_t(h % 60);  // never 60..63
}

// A model that repeats itself with a period (speculative decoding's best case): the token
// `period` back, once the history is that long.
static int32_t next_periodic(const std::vector<int32_t>& hist, int period) {
  if (period <= 0 || hist.size() < size_t(period) || (!hist.empty() && hist.back() == kForceEog)) return next_of(hist);
  return hist[hist.size() - size_t(period)];
}

// A model that counts up by one (mod 60): its output never repeats within 60 tokens, so its own
// history drafts nothing, but another request's output holds the same run.
static int32_t next_chain(const std::vector<int32_t>& hist) {
  if (hist.empty() || hist.back() == kForceEog) return next_of(hist);
  return (hist.back() + 1) % 60;
}

class FakeModel : public Model {
 public:
  FakeModel(int slots) : kv_(slots) { cfg_.arch = "fake"; cfg_.n_vocab = kVocab; }
  const ModelConfig& config() const override { return cfg_; }
  void forward(const Batch& b, float* out) override {
    if (fail_on_shared_batch) {
      bool shared = false;
      for (size_t t = 1; t < b.slot.size(); t++) shared = shared || b.slot[t] != b.slot[0];
      if (shared) {
        fail_on_shared_batch = false;
        if (fail_as_device) throw DeviceError("fake CUDA error");
        throw std::runtime_error("fake device fault");
      }
    }
    max_batch_seen = std::max(max_batch_seen, b.token.size());
    if (step_sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(step_sleep_us));
    {
      std::lock_guard<std::mutex> lk(steps_mu);
      std::map<int, std::pair<int, int>> per_slot;  // slot -> (tokens, first position)
      for (size_t t = 0; t < b.token.size(); t++) {
        auto it = per_slot.find(b.slot[t]);
        if (it == per_slot.end()) per_slot[b.slot[t]] = {1, b.pos[t]};
        else it->second.first++;
      }
      steps_seen.push_back(per_slot);
    }
    size_t r = 0;
    for (size_t t = 0; t < b.token.size(); t++) {
      auto& kv = kv_[b.slot[t]];
      if (b.pos[t] != int(kv.size())) bad_pos++;
      kv.resize(b.pos[t]);
      kv.push_back(b.token[t]);
      if (!b.logits[t]) continue;
      float* row = out + r++ * kVocab;
      for (int v = 0; v < kVocab; v++) row[v] = 0.f;
      row[chain ? next_chain(kv) : next_periodic(kv, period)] = 10.f;
    }
    tokens_forwarded += b.token.size();
  }
  void kv_truncate(int slot, int pos) override { if (int(kv_[slot].size()) > pos) kv_[slot].resize(pos); }
  void kv_copy(int src, int dst, int n) override {
    kv_[dst].assign(kv_[src].begin(), kv_[src].begin() + n);
    copies++;
  }
  int copies = 0;
  int period = 0;  // > 0: next_periodic
  bool chain = false;  // next_chain
  size_t kv_bytes() const override { return 0; }
  // The host prompt cache sees the fake's "K/V" (the token ids it holds) as 4 bytes a position.
  size_t kv_token_bytes() const override { return sizeof(int32_t); }
  void kv_read(int slot, int pos, int n, uint8_t* dst) const override {
    const auto& kv = kv_[slot];
    if (pos < 0 || n < 0 || size_t(pos + n) > kv.size()) { bad_pos++; return; }
    std::memcpy(dst, kv.data() + pos, size_t(n) * sizeof(int32_t));
  }
  void kv_write(int slot, int pos, int n, const uint8_t* src) override {
    auto& kv = kv_[slot];
    if (pos < 0 || size_t(pos) > kv.size()) { bad_pos++; return; }
    kv.resize(size_t(pos + n));
    std::memcpy(kv.data() + pos, src, size_t(n) * sizeof(int32_t));
    restored += n;
  }
  int restored = 0;
  mutable int bad_pos = 0;
  std::atomic<bool> fail_on_shared_batch{false};  // throw once, from a batch of two sequences
  bool fail_as_device = false;                     // ... a DeviceError (what the CUDA model throws)
  int64_t graph_captures() const override { return 7; }  // passed through to the scheduler's stats
  size_t max_batch_seen = 0;
  size_t tokens_forwarded = 0;
  int step_sleep_us = 0;  // a step that takes time, so a decoding stream is still running later
  std::mutex steps_mu;
  std::vector<std::map<int, std::pair<int, int>>> steps_seen;  // per forward: slot -> (tokens, first pos)
  // Dimensions for the scheduler's cost model: D 64, 4 heads of 16, FF 128 -> a prompt token's
  // attention matches its matmuls at depth 40960 / 128 = 320.
  void give_dims() { cfg_.n_embd = 64; cfg_.n_head = 4; cfg_.n_head_kv = 4; cfg_.head_dim = 16; cfg_.n_ff = 128; cfg_.n_layer = 1; }
 private:
  ModelConfig cfg_;
  std::vector<std::vector<int32_t>> kv_;
};

class FakeTok : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view, bool, bool) const override { return {}; }
  std::string piece(int32_t id, bool) const override {
    if (id == 60) return "\xC3";   // first byte of U+00E9 ...
    if (id == 61) return "\xA9";   // ... and its continuation byte, split across tokens
    if (id >= 62) return "";
    return std::string(1, char('a' + id % 26));
  }
  int32_t n_vocab() const override { return kVocab; }
  int32_t bos() const override { return -1; }
  int32_t eos() const override { return kEog; }
  bool is_eog(int32_t id) const override { return id == kEog; }
  std::string token_text(int32_t id) const override { return piece(id, true); }
};

struct Result {
  bool started = false, done = false, error = false, fault = false, device_fault = false;
  int starts = 0;
  int cached = -1;
  std::vector<int32_t> tokens;
  std::string text, finish, message;
  int completion = 0;
  int draft_n = 0, draft_accepted = 0;
};

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Result> res;
  void sink(std::vector<EngineEvent>&& evs) {
    std::lock_guard<std::mutex> lk(mu);
    for (auto& e : evs) {
      Result& r = res[e.id];
      if (e.kind == EngineEvent::Start) { r.started = true; r.starts++; r.cached = e.cached_tokens; }
      if (e.kind == EngineEvent::Token) { r.tokens.push_back(e.token); r.text += e.text; }
      if (e.kind == EngineEvent::Done) { r.done = true; r.finish = e.finish; r.text += e.text; r.completion = e.completion_tokens; r.draft_n = e.draft_n; r.draft_accepted = e.draft_n_accepted; }
      if (e.kind == EngineEvent::Error) { r.done = true; r.error = true; r.fault = e.fault; r.device_fault = e.device_fault; r.message = e.message; }
    }
    cv.notify_all();
  }
  Result wait(uint64_t id) {
    std::unique_lock<std::mutex> lk(mu);
    bool ok = cv.wait_for(lk, std::chrono::seconds(20), [&] { return res[id].done; });
    CHECK(ok);
    return res[id];
  }
  size_t tokens_of(uint64_t id) {
    std::lock_guard<std::mutex> lk(mu);
    return res[id].tokens.size();
  }
};

static std::vector<int32_t> make_prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; i++) p.push_back((i * 7 + salt) % 60);
  return p;
}

static std::vector<int32_t> expected(std::vector<int32_t> hist, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; i++) {
    int32_t t = next_of(hist);
    if (t == kEog) break;
    out.push_back(t);
    hist.push_back(t);
  }
  return out;
}

static std::vector<int32_t> expected_periodic(std::vector<int32_t> hist, int n, int period) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; i++) {
    int32_t t = next_periodic(hist, period);
    if (t == kEog) break;
    out.push_back(t);
    hist.push_back(t);
  }
  return out;
}

static EngineRequest req(uint64_t id, std::vector<int32_t> prompt, int max_tokens) {
  EngineRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

// Speculative decoding on the fake: output identical to plain decoding, on a model that
// repeats (drafts accepted) and one that never does (drafts rejected and rolled back: the fake
// counts any position written out of order), with prefill and max_tokens and the context end
// cutting drafts short.
static void test_spec(int period) {
  auto model = std::make_unique<FakeModel>(3);
  FakeModel* fm = model.get();
  fm->period = period;
  Collector c;
  SchedulerOptions o{3, 400, 512};
  o.spec_ngram = true;
  o.spec_draft_max = 6;
  Scheduler s(std::move(model), std::make_shared<FakeTok>(), o, [&](auto&& e) { c.sink(std::move(e)); });
  const int lens[] = {70, 5, 130, 61, 300, 12, 90};
  const int maxes[] = {60, 25, 41, 7, -1, 33, 200};
  for (int i = 0; i < 7; i++) s.submit(req(i + 1, make_prompt(lens[i], i), maxes[i]));
  int64_t draft_events = 0;
  for (int i = 0; i < 7; i++) {
    Result r = c.wait(i + 1);
    const int n = maxes[i] >= 0 ? maxes[i] : 401 - lens[i];
    const auto want = expected_periodic(make_prompt(lens[i], i), n, period);
    check(r.tokens == want, "spec period " + std::to_string(period) + ": request " + std::to_string(i + 1) + " as without speculation");
    CHECK_EQ(r.completion, int(want.size()));
    draft_events += r.draft_n;
  }
  CHECK_EQ(fm->bad_pos, 0);
  auto st = s.stats();
  CHECK(st.spec_draft_tokens > 0);
  CHECK_EQ(st.spec_draft_tokens, draft_events);
  CHECK(st.spec_accepted_tokens <= st.spec_draft_tokens);
  if (period > 0) CHECK(st.spec_accepted_tokens > st.spec_draft_tokens / 2);
  std::printf("spec period %d: %lld drafted, %lld accepted, %lld steps\n", period, (long long)st.spec_draft_tokens,
              (long long)st.spec_accepted_tokens, (long long)st.steps);
}

// Drafts from the host cache's earlier prompts: request 2's prompt and output never repeat
// themselves (the prompt steps by 7, the chain model counts up by 1), so its own history drafts
// nothing; request 1 produced the same run before and went to the host cache when request 2 took
// the only slot. With the cache request 2 drafts from it, and both outputs are exactly what the
// model says without speculation.
static void test_spec_from_host_cache(bool cache) {
  auto model = std::make_unique<FakeModel>(1);
  FakeModel* fm = model.get();
  fm->chain = true;
  Collector c;
  SchedulerOptions o{1, 400, 512};
  o.spec_ngram = true;
  o.spec_draft_max = 6;
  if (cache) {
    o.cache_bytes = 1 << 22;
    o.cache_namespace = "fake";
  }
  Scheduler s(std::move(model), std::make_shared<FakeTok>(), o, [&](auto&& e) { c.sink(std::move(e)); });
  auto expected_chain = [](std::vector<int32_t> hist, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; i++) out.push_back(hist.back() == kForceEog ? kEog : (hist.back() + 1) % 60), hist.push_back(out.back());
    return out;
  };
  // 1: cycle positions 0..19 of the step-7 prompt (ends on 13), then 14..58.
  const auto p1 = make_prompt(20, 0);
  s.submit(req(1, p1, 45));
  Result r1 = c.wait(1);
  CHECK(r1.tokens == expected_chain(p1, 45));
  CHECK_EQ(r1.draft_n, 0);
  // 2: positions 30..49 (no token pair of 1's prompt; ends on 43), then 44..57, inside 1's run.
  const auto p2 = make_prompt(20, 30);
  s.submit(req(2, p2, 14));
  Result r2 = c.wait(2);
  check(r2.tokens == expected_chain(p2, 14), std::string("host cache drafts ") + (cache ? "on" : "off") + ": output as without speculation");
  CHECK_EQ(fm->bad_pos, 0);
  if (cache) {
    CHECK(s.stats().host_cache.tokens >= int64_t(p1.size() + 44));
    CHECK(r2.draft_n > 0);
    CHECK(r2.draft_accepted > 0);
    CHECK_EQ(r2.draft_accepted, r2.draft_n);  // the run in the cache is exactly the model's
  } else {
    CHECK_EQ(r2.draft_n, 0);  // nothing in its own history: the case the cache is there for
  }
  std::printf("spec from host cache %s: %d drafted, %d accepted\n", cache ? "on" : "off", r2.draft_n, r2.draft_accepted);
}

// A draft model's host cache: one slot serves a 600-token prompt, then an unrelated one (the
// slot changes hands and is saved), then the first again with a 30-token tail, whose prefix the
// model restores from the host cache. The draft model (a second fake of the same rule, so its
// greedy drafts are all right) restores its own prefix from its own cache, and catches up on the
// tail only; without that cache (no namespace) it catches up on the whole prompt again. With
// `restart`, the last turn runs in a second scheduler that finds both caches' blocks in the disk
// tier the first one wrote when it stopped. The target sleeps 2 ms a step (a model larger than
// its draft), so that drafting pays under the measured-cost budget.
static void test_draft_model_host_cache(bool draft_cache, bool restart) {
  const std::string what = std::string("draft model ") + (draft_cache ? "with" : "without") + " its host cache" + (restart ? ", restarted" : "");
  char tmpl[] = "/tmp/mb-sched-draft-cache-XXXXXX";
  const std::string dir = restart ? std::string(mkdtemp(tmpl)) : std::string();
  struct Run {
    Collector c;
    FakeModel *fm = nullptr, *dm = nullptr;
    std::unique_ptr<Scheduler> s;
  };
  auto start = [&](Run& r) {
    auto model = std::make_unique<FakeModel>(1);
    auto draft = std::make_unique<FakeModel>(1);
    r.fm = model.get();
    r.dm = draft.get();
    r.fm->step_sleep_us = 2000;
    SchedulerOptions o{1, 2048, 512};
    o.spec_draft_max = 6;
    o.cache_bytes = 1 << 22;
    o.cache_namespace = "fake";
    if (draft_cache) o.draft_cache_namespace = "fake";  // the same string: the role keeps them apart
    o.cache_dir = dir;
    o.cache_disk_bytes = dir.empty() ? 0 : 1 << 22;
    r.s = std::make_unique<Scheduler>(std::move(model), std::move(draft), std::make_shared<FakeTok>(), o,
                                      [c = &r.c](auto&& e) { c->sink(std::move(e)); });
  };
  const auto p1 = make_prompt(600, 0), p2 = make_prompt(200, 5);
  auto p3 = p1;
  for (int i = 0; i < 30; i++) p3.push_back((i * 11 + 3) % 60);
  Run a, b;
  start(a);
  a.s->submit(req(1, p1, 24));
  check(a.c.wait(1).tokens == expected(p1, 24), what + ": turn 1 as without speculation");
  Run* last = &a;
  if (restart) {
    a.s.reset();  // saves what the slot holds, both models, and writes it to the directory
    CHECK_EQ(a.fm->bad_pos + a.dm->bad_pos, 0);
    start(b);
    last = &b;
  } else {
    a.s->submit(req(2, p2, 8));
    check(a.c.wait(2).tokens == expected(p2, 8), what + ": turn 2 as without speculation");
  }
  const size_t fed_before = last->dm->tokens_forwarded;
  last->s->submit(req(3, p3, 24));
  const Result r3 = last->c.wait(3);
  const int64_t fed = int64_t(last->dm->tokens_forwarded - fed_before);
  check(r3.tokens == expected(p3, 24), what + ": turn 3 as without speculation");
  CHECK_EQ(r3.cached, 600);  // the model's prefix, all of turn 1's prompt: from the host cache (or its disk tier)
  CHECK(r3.draft_n > 0);
  CHECK_EQ(r3.draft_accepted, r3.draft_n);
  CHECK_EQ(last->fm->bad_pos + last->dm->bad_pos, 0);  // both models' K/V written in order
  const SchedulerStats st = last->s->stats();
  // The tail (30 tokens), then one token a draft position: at most 6 drafts for each of 24 tokens.
  const int64_t tail = 30, drafting = 24 * 6;
  if (draft_cache) {
    check(fed <= tail + drafting, what + ": the draft model catches up on the tail only (" + std::to_string(fed) + " tokens fed)");
    CHECK_EQ(last->dm->restored, 600);
    CHECK_EQ(st.draft_host_cache.restored_tokens, int64_t(600));
    if (restart) CHECK(st.draft_host_cache.disk_hit_tokens >= 600);
    // The budget is split: the model's cache is smaller than the whole of it.
    CHECK(st.host_cache.cap_bytes > 0 && st.draft_host_cache.cap_bytes > 0);
    CHECK(st.host_cache.cap_bytes + st.draft_host_cache.cap_bytes <= int64_t(1) << 22);
  } else {
    check(fed >= int64_t(p3.size()), what + ": the draft model catches up on the whole prompt (" + std::to_string(fed) + " tokens fed)");
    CHECK_EQ(last->dm->restored, 0);
    CHECK_EQ(st.draft_host_cache.cap_bytes, int64_t(0));
    CHECK_EQ(st.host_cache.cap_bytes, int64_t(1) << 22);
  }
  std::printf("%s: draft model fed %lld tokens in the returning turn (%d drafted, %d accepted)\n", what.c_str(), (long long)fed,
              r3.draft_n, r3.draft_accepted);
  a.s.reset();
  b.s.reset();
  if (restart) CHECK(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
}

// A draft model's prefix from a donor: while request 1 decodes in one slot (its draft model
// caught up), request 2 with the same prompt and a new tail takes the other; both models copy the
// prefix from the busy slot, and the draft model catches up on the tail only.
static void test_draft_model_donor() {
  auto model = std::make_unique<FakeModel>(2);
  auto draft = std::make_unique<FakeModel>(2);
  FakeModel *fm = model.get(), *dm = draft.get();
  fm->step_sleep_us = 2000;
  Collector c;
  SchedulerOptions o{2, 2048, 512};
  o.spec_draft_max = 6;
  Scheduler s(std::move(model), std::move(draft), std::make_shared<FakeTok>(), o, [&](auto&& e) { c.sink(std::move(e)); });
  const auto p1 = make_prompt(600, 0);
  auto p2 = p1;
  for (int i = 0; i < 30; i++) p2.push_back((i * 11 + 3) % 60);
  s.submit(req(1, p1, 300));
  // Past the draft model's catch-up (600 tokens, 128 a step) and into its drafts.
  for (int i = 0; i < 2000 && c.tokens_of(1) < 40; i++) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const size_t fed_before = dm->tokens_forwarded;
  s.submit(req(2, p2, 24));
  const Result r2 = c.wait(2);
  const int64_t fed = int64_t(dm->tokens_forwarded - fed_before);
  check(r2.tokens == expected(p2, 24), "draft model donor: output as without speculation");
  check(c.wait(1).tokens == expected(p1, 300), "draft model donor: the donor's output as without speculation");
  CHECK_EQ(r2.cached, 600);
  CHECK(fm->copies > 0 && dm->copies > 0);
  CHECK(r2.draft_n > 0);
  CHECK_EQ(fm->bad_pos + dm->bad_pos, 0);
  // Request 1 goes on drafting meanwhile (at most 7 tokens a step, steps of at least 2 ms), so
  // the bound counts its share too: without the copy request 2 alone would need 630.
  check(fed < 400, "draft model donor: the draft model copies the prefix (" + std::to_string(fed) + " tokens fed)");
  std::printf("draft model donor: %lld tokens fed while request 2 ran (%d drafted, %d accepted)\n", (long long)fed, r2.draft_n, r2.draft_accepted);
}

int main() {
  test_draft_model_donor();
  test_draft_model_host_cache(true, false);
  test_draft_model_host_cache(false, false);
  test_draft_model_host_cache(true, true);
  test_draft_model_host_cache(false, true);
  test_spec(60);
  test_spec(0);
  test_spec_from_host_cache(true);
  test_spec_from_host_cache(false);
  {  // continuous batching: many requests, 3 slots, one prompt longer than a batch
    auto model = std::make_unique<FakeModel>(3);
    FakeModel* fm = model.get();
    Collector c;
    Scheduler s(std::move(model), std::make_shared<FakeTok>(), {3, 2048, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    const int lens[] = {5, 700, 40, 1, 300, 12, 90};
    for (int i = 0; i < 7; i++) s.submit(req(i + 1, make_prompt(lens[i], i), 25 + i));
    for (int i = 0; i < 7; i++) {
      Result r = c.wait(i + 1);
      CHECK(r.started);
      CHECK_EQ(r.finish, std::string("length"));
      CHECK(r.tokens == expected(make_prompt(lens[i], i), 25 + i));
    }
    CHECK_EQ(fm->bad_pos, 0);
    CHECK(fm->max_batch_seen <= 512);
    CHECK(fm->max_batch_seen > 1);  // decode and prefill really shared steps
    auto st = s.stats();
    CHECK_EQ(st.slots_in_use, 0);
    CHECK_EQ(st.waiting, 0);
    CHECK_EQ(st.prefix_lookups, int64_t(7));
  }
  {  // prefix reuse: the second prompt extends the first; the shared part is not prefilled again
    auto model = std::make_unique<FakeModel>(2);
    FakeModel* fm = model.get();
    Collector c;
    Scheduler s(std::move(model), std::make_shared<FakeTok>(), {2, 1024, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    auto p1 = make_prompt(200, 3);
    s.submit(req(1, p1, 4));
    Result r1 = c.wait(1);
    CHECK_EQ(r1.cached, 0);
    const size_t before = fm->tokens_forwarded;
    auto p2 = p1;
    p2.insert(p2.end(), {1, 2, 3});
    s.submit(req(2, p2, 4));
    Result r2 = c.wait(2);
    CHECK_EQ(r2.cached, 200);
    CHECK(r2.tokens == expected(p2, 4));
    CHECK_EQ(fm->tokens_forwarded - before, size_t(3 + 3));  // 3 new prompt tokens + 3 decode inputs
    // identical prompt: everything but the last token comes from the cache
    s.submit(req(3, p1, 4));
    Result r3 = c.wait(3);
    CHECK_EQ(r3.cached, 199);
    CHECK(r3.tokens == r1.tokens);
    auto st = s.stats();
    CHECK_EQ(st.prefix_hit_tokens, int64_t(399));
    CHECK_EQ(fm->bad_pos, 0);
  }
  {  // a running slot lends its prefix: K/V copied, not prefilled again
    auto model = std::make_unique<FakeModel>(2);
    FakeModel* fm = model.get();
    Collector c;
    Scheduler s(std::move(model), std::make_shared<FakeTok>(), {2, 100000, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    auto sys = make_prompt(100, 9);
    s.submit(req(1, sys, -1));
    auto t0 = std::chrono::steady_clock::now();
    while (c.tokens_of(1) < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) std::this_thread::yield();
    auto p2 = sys;
    p2.insert(p2.end(), {5, 6, 7, 8});
    s.submit(req(2, p2, 6));
    Result r2 = c.wait(2);
    CHECK_EQ(r2.cached, 100);
    CHECK(r2.tokens == expected(p2, 6));
    CHECK_EQ(fm->copies, 1);
    s.cancel(1);
    c.wait(1);
    CHECK_EQ(fm->bad_pos, 0);
  }
  {  // cancel frees the slot; a waiting request then runs
    Collector c;
    Scheduler s(std::make_unique<FakeModel>(1), std::make_shared<FakeTok>(), {1, 100000, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    s.submit(req(1, make_prompt(10, 1), -1));
    s.submit(req(2, make_prompt(10, 2), 3));
    auto t0 = std::chrono::steady_clock::now();
    while (c.tokens_of(1) < 5 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) std::this_thread::yield();
    CHECK_EQ(s.stats().slots_in_use, 1);
    s.cancel(1);
    Result r1 = c.wait(1);
    CHECK_EQ(r1.finish, std::string("cancelled"));
    Result r2 = c.wait(2);
    CHECK_EQ(r2.finish, std::string("length"));
    CHECK_EQ(r2.completion, 3);
    CHECK_EQ(s.stats().slots_in_use, 0);
    // cancelling a request still waiting ends it too
    s.submit(req(3, make_prompt(10, 1), -1));
    s.submit(req(4, make_prompt(10, 4), -1));
    s.cancel(4);
    CHECK_EQ(c.wait(4).finish, std::string("cancelled"));
    s.cancel(3);
    CHECK_EQ(c.wait(3).finish, std::string("cancelled"));
  }
  {  // end of context, EOG, too-long prompt, max_tokens 0, a one-literal grammar with split UTF-8
    Collector c;
    Scheduler s(std::make_unique<FakeModel>(2), std::make_shared<FakeTok>(), {2, 32, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    s.submit(req(1, make_prompt(30, 0), -1));
    Result r1 = c.wait(1);
    CHECK_EQ(r1.finish, std::string("length"));
    CHECK_EQ(r1.completion, 3);  // positions 30, 31 fed back; the third token needs no slot
    auto p = make_prompt(5, 0);
    p.push_back(kForceEog);
    s.submit(req(2, p, 10));
    Result r2 = c.wait(2);
    CHECK_EQ(r2.finish, std::string("stop"));
    CHECK_EQ(r2.completion, 0);
    s.submit(req(3, make_prompt(33, 0), 10));
    CHECK(c.wait(3).error);
    s.submit(req(4, make_prompt(3, 0), 0));
    Result r4 = c.wait(4);
    CHECK_EQ(r4.finish, std::string("length"));
    CHECK_EQ(r4.completion, 0);
    // Exact output, the way tests script it: é exists only as two single-byte tokens.
    EngineRequest sr = req(5, make_prompt(4, 0), 100);
    sr.grammar = "root ::= \"a\\u00e9b\"";
    s.submit(sr);
    Result r5 = c.wait(5);
    CHECK_EQ(r5.finish, std::string("stop"));
    CHECK_EQ(r5.text, std::string("a\xC3\xA9" "b"));
    CHECK_EQ(r5.completion, 4);
  }
  {  // grammar-constrained requests: forced bytes, UTF-8 split over tokens, sampling, errors
    Collector c;
    Scheduler s(std::make_unique<FakeModel>(2), std::make_shared<FakeTok>(), {2, 256, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    EngineRequest g1 = req(1, make_prompt(5, 0), 50);
    g1.grammar = "root ::= \"abc\"";
    s.submit(g1);
    Result r1 = c.wait(1);
    CHECK_EQ(r1.text, std::string("abc"));
    CHECK_EQ(r1.finish, std::string("stop"));  // complete with nothing to follow: no EOG step
    CHECK_EQ(r1.completion, 3);
    EngineRequest g2 = req(2, make_prompt(5, 1), 50);
    g2.grammar = "root ::= [a-z]{2} \"\\u00e9\"";
    s.submit(g2);
    Result r2 = c.wait(2);
    CHECK_EQ(r2.text.size(), size_t(4));
    CHECK_EQ(r2.text.substr(2), std::string("\xC3\xA9"));
    CHECK(r2.tokens.size() == 4 && r2.tokens[2] == 60 && r2.tokens[3] == 61);
    for (uint64_t id = 3; id < 13; id++) {
      EngineRequest g = req(id, make_prompt(4, int(id)), 50);
      g.sampling.temperature = 1.5f;
      g.sampling.has_seed = true;
      g.sampling.seed = id;
      g.grammar = "root ::= [b-d]{3,5} \"z\"";
      s.submit(g);
      Result r = c.wait(id);
      CHECK_EQ(r.finish, std::string("stop"));
      CHECK(r.text.size() >= 4 && r.text.size() <= 6 && r.text.back() == 'z');
      for (size_t k = 0; k + 1 < r.text.size(); k++) CHECK(r.text[k] >= 'b' && r.text[k] <= 'd');
    }
    // Complete but able to continue: EOG becomes allowed and ends the request as usual.
    EngineRequest g3 = req(20, make_prompt(5, 2), 50);
    g3.grammar = "root ::= \"a\" \"\\xC3\"?";
    s.submit(g3);
    Result r3 = c.wait(20);
    CHECK_EQ(r3.finish, std::string("stop"));
    CHECK(r3.text == "a" || r3.text == "a\xC3" || r3.text == "a\xEF\xBF\xBD");
    EngineRequest bad = req(21, make_prompt(5, 3), 10);
    bad.grammar = "root ::= \"abc";
    s.submit(bad);
    Result rb = c.wait(21);
    CHECK(rb.error);
    CHECK(rb.message.find("invalid grammar") != std::string::npos);
    CHECK(rb.message.find("unterminated") != std::string::npos);
    CHECK(!rb.fault);  // one request's problem, not the engine's
    EngineRequest stuck = req(22, make_prompt(5, 4), 10);
    stuck.grammar = "root ::= \"a!\"";  // no token spells "!"
    s.submit(stuck);
    Result rs = c.wait(22);
    CHECK(rs.error);
    CHECK_EQ(rs.text, std::string("a"));
    CHECK(rs.message.find("cannot continue") != std::string::npos);
    // The slots were freed: an ordinary request still runs to its budget.
    s.submit(req(23, make_prompt(5, 5), 4));
    CHECK_EQ(c.wait(23).completion, 4);
    CHECK_EQ(s.stats().slots_in_use, 0);
  }
  {  // a forward pass that throws fails every sequence of the batch as a fault (the worker restarts)
    Collector c;
    auto owned = std::make_unique<FakeModel>(2);
    owned->fail_on_shared_batch = true;
    Scheduler s(std::move(owned), std::make_shared<FakeTok>(), {2, 4096, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    s.submit(req(1, make_prompt(5, 0), -1));
    s.submit(req(2, make_prompt(6, 1), -1));
    Result r1 = c.wait(1), r2 = c.wait(2);
    CHECK(r1.error && r1.fault && r2.error && r2.fault);
    CHECK(!r1.device_fault && !r2.device_fault);
    CHECK(r1.message.find("fake device fault") != std::string::npos);
    CHECK_EQ(s.stats().slots_in_use, 0);
    CHECK_EQ(s.stats().graph_captures, 7);
  }
  {  // ... and a DeviceError is marked as the device's (the worker then exits with its own status)
    Collector c;
    auto owned = std::make_unique<FakeModel>(2);
    owned->fail_on_shared_batch = true;
    owned->fail_as_device = true;
    Scheduler s(std::move(owned), std::make_shared<FakeTok>(), {2, 4096, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    s.submit(req(1, make_prompt(5, 0), -1));
    s.submit(req(2, make_prompt(6, 1), -1));
    Result r1 = c.wait(1), r2 = c.wait(2);
    CHECK(r1.error && r1.fault && r1.device_fault && r2.error && r2.fault && r2.device_fault);
    CHECK(r1.message.find("fake CUDA error") != std::string::npos);
  }
  {  // host prompt cache: a prompt displaced from the only slot comes back restored, with the
     // same output as computed (the fake's next token hashes its whole K/V); a state point is
     // saved while its request still runs
    auto model = std::make_unique<FakeModel>(1);
    FakeModel* fm = model.get();
    Collector c;
    SchedulerOptions o{1, 2048, 512};
    o.cache_bytes = 1 << 20;
    o.cache_namespace = "fake";
    Scheduler s(std::move(model), std::make_shared<FakeTok>(), o, [&](auto&& e) { c.sink(std::move(e)); });
    CHECK(!s.cache_namespace().empty());
    auto p1 = make_prompt(200, 5);
    s.submit(req(1, p1, 4));
    Result r1 = c.wait(1);
    s.submit(req(2, make_prompt(100, 11), 4));  // takes the slot: p1 goes to host memory
    c.wait(2);
    CHECK(s.stats().host_cache.tokens >= 200);
    auto p3 = p1;
    p3.insert(p3.end(), r1.tokens.begin(), r1.tokens.end() - 1);  // what the slot held of the answer
    p3.insert(p3.end(), {1, 2, 3});
    const size_t before = fm->tokens_forwarded;
    s.submit(req(3, p3, 4));
    Result r3 = c.wait(3);
    CHECK_EQ(r3.cached, int(p1.size() + r1.tokens.size() - 1));
    CHECK(r3.tokens == expected(p3, 4));
    CHECK_EQ(fm->tokens_forwarded - before, size_t(3 + 3));
    CHECK(fm->restored >= 200);
    CHECK(s.stats().host_cache.restored_tokens >= 200);

    auto p4 = make_prompt(300, 17);
    EngineRequest r = req(4, p4, 400);
    r.state_point = 150;
    const int64_t saved_before = s.stats().host_cache.saved_tokens;
    s.submit(std::move(r));
    for (int i = 0; i < 2000 && c.tokens_of(4) < 2; i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(s.stats().host_cache.saved_tokens - saved_before >= 150);
    s.cancel(4);
    c.wait(4);
    CHECK_EQ(fm->bad_pos, 0);
  }
  {  // a long prefill beside a decoding stream: chunks sized by cost, so the stream is not starved
    auto model = std::make_unique<FakeModel>(2);
    FakeModel* fm = model.get();
    fm->give_dims();
    fm->step_sleep_us = 1000;
    Collector c;
    Scheduler s(std::move(model), std::make_shared<FakeTok>(), {2, 4096, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    s.submit(req(1, make_prompt(5, 1), 600));
    for (int i = 0; i < 2000 && c.tokens_of(1) < 1; i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto long_prompt = make_prompt(3000, 2);
    s.submit(req(2, long_prompt, 3));
    Result r2 = c.wait(2);
    Result r1 = c.wait(1);
    CHECK(r2.tokens == expected(long_prompt, 3));
    CHECK(r1.tokens == expected(make_prompt(5, 1), 600));
    int long_slot = -1;  // the slot that ever took more than one token in a step
    for (const auto& st : fm->steps_seen)
      for (const auto& [slot, tp] : st)
        if (tp.first > 1) long_slot = slot;
    CHECK(long_slot >= 0);
    int shared = 0, deep = 0;
    for (const auto& st : fm->steps_seen) {
      auto it = st.find(long_slot);
      if (it == st.end() || it->second.second >= 3000) continue;  // not a prefill step of the long prompt
      const int n = it->second.first, pos0 = it->second.second;
      if (st.size() == 2) {
        shared++;
        double cost = 0;
        for (int j = 0; j < n; j++) cost += 1.0 + double(pos0 + j) / 320.0;
        CHECK(cost < 128.0 + 1.0 + double(pos0 + n) / 320.0);  // the quarter-batch budget, give or take the last token
        if (pos0 > 2500) { deep++; CHECK(n <= 16); }
      }
    }
    CHECK(shared > 10);
    CHECK(deep > 0);
    CHECK_EQ(fm->bad_pos, 0);
  }
  {  // a short request admitted while another slot prefills a long prompt: its prefill joins the
     // next step, beside one chunk of the long prompt, instead of waiting for all of them
    auto model = std::make_unique<FakeModel>(2);
    FakeModel* fm = model.get();
    fm->give_dims();
    fm->step_sleep_us = 5000;
    Collector c;
    Scheduler s(std::move(model), std::make_shared<FakeTok>(), {2, 8192, 512}, [&](auto&& e) { c.sink(std::move(e)); });
    auto long_prompt = make_prompt(4000, 3);
    s.submit(req(1, long_prompt, 3));
    auto steps = [&] {
      std::lock_guard<std::mutex> lk(fm->steps_mu);
      return fm->steps_seen.size();
    };
    for (int i = 0; i < 5000 && steps() < 1; i++) std::this_thread::sleep_for(std::chrono::microseconds(200));
    const size_t submitted_at = steps();  // forwards done; the one running (index submitted_at) may be the long prompt's alone
    auto short_prompt = make_prompt(20, 4);
    s.submit(req(2, short_prompt, 4));
    Result r2 = c.wait(2);
    Result r1 = c.wait(1);
    CHECK(r1.tokens == expected(long_prompt, 3));
    CHECK(r2.tokens == expected(short_prompt, 4));
    std::lock_guard<std::mutex> lk(fm->steps_mu);
    const int long_slot = fm->steps_seen[0].begin()->first;
    size_t first_short = 0;  // the first step with the short request's slot in it
    while (first_short < fm->steps_seen.size() && fm->steps_seen[first_short].size() < 2) first_short++;
    CHECK(first_short < fm->steps_seen.size());
    CHECK(first_short <= submitted_at + 1);  // at most the step that was running when it came
    const auto& st = fm->steps_seen[first_short];
    for (const auto& [slot, tp] : st)
      if (slot != long_slot) CHECK_EQ(tp.first, 20);  // its whole prompt at once: first token from this step
    // The long prompt was still prefilling: the short one did not wait for the end of it, and
    // beside it the long one's chunk was held to the quarter-batch cost, not a full batch.
    const int n = st.at(long_slot).first, pos0 = st.at(long_slot).second;
    CHECK(pos0 + n < 4000);
    double cost = 0;
    for (int j = 0; j < n; j++) cost += 1.0 + double(pos0 + j) / 320.0;
    CHECK(cost < 128.0 + 1.0 + double(pos0 + n) / 320.0);
    CHECK_EQ(fm->bad_pos, 0);
  }
  {  // a quick request (its prompt cached) with every slot busy on a long cold prefill: it takes
     // that slot and finishes before the long prompt's first token; the long one resumes from
     // the host cache (its work is not done twice) with the same output and one Start
    auto model = std::make_unique<FakeModel>(1);
    FakeModel* fm = model.get();
    fm->step_sleep_us = 2000;
    Collector c;
    SchedulerOptions o{1, 8192, 64};
    o.cache_bytes = 1 << 22;
    o.cache_namespace = "fake";
    Scheduler s(std::move(model), std::make_shared<FakeTok>(), o, [&](auto&& e) { c.sink(std::move(e)); });
    auto p1 = make_prompt(200, 21);
    s.submit(req(1, p1, 2));
    c.wait(1);
    auto steps = [&] {
      std::lock_guard<std::mutex> lk(fm->steps_mu);
      return fm->steps_seen.size();
    };
    const size_t forwarded_before = fm->tokens_forwarded, steps_before = steps();
    auto long_prompt = make_prompt(4000, 22);
    s.submit(req(2, long_prompt, 3));
    for (int i = 0; i < 20000 && steps() < steps_before + 10; i++) std::this_thread::sleep_for(std::chrono::microseconds(100));
    auto p3 = p1;
    p3.insert(p3.end(), {1, 2, 3});
    s.submit(req(3, p3, 4));
    Result r3 = c.wait(3);
    CHECK_EQ(c.tokens_of(2), size_t(0));  // overtaken: still prefilling
    Result r2 = c.wait(2);
    CHECK(r3.tokens == expected(p3, 4));
    CHECK(r2.tokens == expected(long_prompt, 3));
    CHECK_EQ(r2.starts, 1);
    CHECK_EQ(r2.cached, 0);
    CHECK(r3.cached >= 200);
    // At least 10 chunks (640 tokens) were prefilled before the overtake: done again, the
    // long prompt alone would pass 4,640 tokens.
    CHECK(fm->tokens_forwarded - forwarded_before < 4000 + 300);
    CHECK(fm->restored >= 640);
    CHECK_EQ(fm->bad_pos, 0);
  }
  {  // ... and without a host cache to keep its work, a long prefill is never displaced
    auto model = std::make_unique<FakeModel>(1);
    FakeModel* fm = model.get();
    fm->step_sleep_us = 2000;
    Collector c;
    Scheduler s(std::move(model), std::make_shared<FakeTok>(), {1, 8192, 64}, [&](auto&& e) { c.sink(std::move(e)); });
    auto p1 = make_prompt(200, 21);
    s.submit(req(1, p1, 2));
    c.wait(1);
    auto long_prompt = make_prompt(4000, 22);
    s.submit(req(2, long_prompt, 3));
    auto steps = [&] {
      std::lock_guard<std::mutex> lk(fm->steps_mu);
      return fm->steps_seen.size();
    };
    const size_t steps_before = steps();
    for (int i = 0; i < 20000 && steps() < steps_before + 10; i++) std::this_thread::sleep_for(std::chrono::microseconds(100));
    auto p3 = p1;
    p3.insert(p3.end(), {1, 2, 3});
    s.submit(req(3, p3, 4));
    Result r3 = c.wait(3);
    CHECK_EQ(c.tokens_of(2), size_t(3));  // it waited for the long one to finish
    Result r2 = c.wait(2);
    CHECK(r2.tokens == expected(long_prompt, 3));
    CHECK(r3.tokens == expected(p3, 4));
    CHECK_EQ(r2.starts, 1);
    CHECK_EQ(fm->bad_pos, 0);
    CHECK_EQ(fm->restored, 0);
  }
  TEST_MAIN_END();
}
