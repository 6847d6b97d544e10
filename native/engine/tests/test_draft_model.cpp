// Speculative decoding with a draft model, on real models: the output with drafts from a second
// model is the output without speculation, greedy token for token and seeded sampling too, over
// several slots with continuous batching, slot reuse and max_tokens cutting drafts short. And the
// draft model's host cache: a prompt the host cache restores into a slot (after another request
// had it, or in a restarted server from the disk tier) restores the draft model's K/V too, output
// unchanged (test_scheduler measures the catch-up it saves).
//
// Pairs (from the fixture directory given): two random-weight models sharing one vocabulary
// (drafts mostly rejected and rolled back in both models), and a model drafting for itself
// (greedy drafts all accepted). And vocabulary_mismatch, the load check of a pair, on each
// difference it names. Usage: test_draft_model FIXTURE_DIR [TARGET.gguf DRAFT.gguf].
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <thread>
#include <vector>

#include "../../gguf/gguf.h"
#include "../../model/model.h"
#include "../../tokenizer/tokenizer.h"
#include "../../util/threadpool.h"
#include "../draft_check.h"
#include "../scheduler.h"
#include "../../util/tests/check.h"

using namespace mb;

namespace {

struct Result {
  bool done = false, error = false;
  std::vector<int32_t> tokens;
  std::string text, finish, message;
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
      if (e.kind == EngineEvent::Token) { r.tokens.push_back(e.token); r.text += e.text; }
      if (e.kind == EngineEvent::Done) { r.done = true; r.finish = e.finish; r.text += e.text; r.draft_n = e.draft_n; r.draft_accepted = e.draft_n_accepted; }
      if (e.kind == EngineEvent::Error) { r.done = true; r.error = true; r.message = e.message; }
    }
    cv.notify_all();
  }
  Result wait(uint64_t id) {
    std::unique_lock<std::mutex> lk(mu);
    const bool ok = cv.wait_for(lk, std::chrono::seconds(300), [&] { return res[id].done; });
    CHECK(ok);
    return res[id];
  }
};

// The target as a model many times the draft's size would be: each step takes 10 ms more
// whatever its rows (decode bound by reading weights). Drafting pays then, so the scheduler's
// cost-weighed draft budget drafts long, and the accept and rollback paths get exercised.
// With `fed`, it counts the tokens its forward passes take (a draft model's catch-up and drafts).
class HeavyModel : public Model {
 public:
  explicit HeavyModel(std::unique_ptr<Model> m, int sleep_ms = 10, std::atomic<int64_t>* fed = nullptr)
      : m_(std::move(m)), sleep_ms_(sleep_ms), fed_(fed) {}
  const ModelConfig& config() const override { return m_->config(); }
  void forward(const Batch& b, float* out) override {
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (fed_) fed_->fetch_add(int64_t(b.token.size()));
    m_->forward(b, out);
  }
  void kv_truncate(int slot, int pos) override { m_->kv_truncate(slot, pos); }
  void kv_copy(int src, int dst, int n) override { m_->kv_copy(src, dst, n); }
  int kv_reusable(int slot, int n) const override { return m_->kv_reusable(slot, n); }
  bool kv_rewindable() const override { return m_->kv_rewindable(); }
  size_t kv_bytes() const override { return m_->kv_bytes(); }
  size_t kv_token_bytes() const override { return m_->kv_token_bytes(); }
  std::string kv_type() const override { return m_->kv_type(); }
  void kv_read(int slot, int pos, int n, uint8_t* dst) const override { m_->kv_read(slot, pos, n, dst); }
  void kv_write(int slot, int pos, int n, const uint8_t* src) override { m_->kv_write(slot, pos, n, src); }

 private:
  std::unique_ptr<Model> m_;
  int sleep_ms_;
  std::atomic<int64_t>* fed_;
};

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

constexpr int kSlots = 3, kCtx = 340, kRequests = 7;

struct Run {
  std::vector<Result> results;
  SchedulerStats stats;
};

// Every request of the set, submitted at once (more requests than slots: slots are reused).
Run run_all(const std::string& target, const std::string& draft, ThreadPool* pool, bool seeded) {
  std::shared_ptr<GgufFile> f = GgufFile::open(target);
  auto model = Model::load(f, kSlots, kCtx, pool, 64);
  std::shared_ptr<const Tokenizer> tok(Tokenizer::from_gguf(*f));
  std::unique_ptr<Model> dm;
  std::shared_ptr<GgufFile> df;
  if (!draft.empty()) {
    df = GgufFile::open(draft);
    dm = Model::load(df, kSlots, kCtx, pool, 64);
    model = std::make_unique<HeavyModel>(std::move(model));
  }
  Collector c;
  SchedulerOptions o;
  o.n_slots = kSlots;
  o.n_ctx = kCtx;
  o.max_batch = 64;
  o.spec_draft_max = 6;
  Run out;
  {
    Scheduler s(std::move(model), std::move(dm), tok, o, [&](auto&& e) { c.sink(std::move(e)); });
    const int V = tok->n_vocab();
    // The 300-token prompt is more than the draft model catches up on in one step.
    const int lens[kRequests] = {9, 40, 3, 70, 17, 5, 300};
    const int maxes[kRequests] = {30, 24, 1, 2, 37, 60, 39};  // 300 + 39 + 1 = the whole context
    for (int i = 0; i < kRequests; i++) {
      EngineRequest r;
      r.id = uint64_t(i + 1);
      // Prompts 2 and 5 share a prefix with 1 so that slots are reused from the middle.
      for (int t = 0; t < lens[i]; t++) r.prompt.push_back(int32_t(((i % 3 == 1 ? 0 : i) * 131 + t * 7919 + 17) % V));
      r.max_tokens = maxes[i];
      if (seeded) {
        r.sampling.temperature = 0.8f;
        r.sampling.top_k = 40;
        r.sampling.has_seed = true;
        r.sampling.seed = uint64_t(1000 + i);
      }
      s.submit(std::move(r));
    }
    for (int i = 0; i < kRequests; i++) out.results.push_back(c.wait(uint64_t(i + 1)));
    out.stats = s.stats();
  }
  return out;
}

void check_pair(const std::string& target, const std::string& draft, ThreadPool* pool, bool self) {
  for (bool seeded : {false, true}) {
    const Run plain = run_all(target, "", pool, seeded);
    const Run spec = run_all(target, draft, pool, seeded);
    const std::string what = target + " drafted by " + draft + (seeded ? " (seeded sampling)" : " (greedy)");
    int drafted = 0, accepted = 0;
    for (int i = 0; i < kRequests; i++) {
      const Result& a = plain.results[size_t(i)];
      const Result& b = spec.results[size_t(i)];
      check(!a.error && !b.error, what + ": request " + std::to_string(i + 1) + " ran: " + a.message + b.message);
      check(a.tokens == b.tokens, what + ": request " + std::to_string(i + 1) + " tokens as without speculation");
      check(a.text == b.text && a.finish == b.finish, what + ": request " + std::to_string(i + 1) + " text and finish");
      CHECK_EQ(a.draft_n, 0);
      drafted += b.draft_n;
      accepted += b.draft_accepted;
    }
    CHECK(drafted > 0);
    CHECK_EQ(int64_t(drafted), spec.stats.spec_draft_tokens);
    CHECK_EQ(int64_t(accepted), spec.stats.spec_accepted_tokens);
    CHECK(accepted <= drafted);
    // A model drafting greedily for itself is right where the output is greedy too (drafts behind
    // a sequence's last token are never reached, and counted as not kept).
    if (self && !seeded) CHECK(accepted * 10 >= drafted * 9);
    CHECK(spec.stats.steps < plain.stats.steps || !self || seeded);
    std::printf("%s: %d drafted, %d accepted, steps %lld -> %lld\n", what.c_str(), drafted, accepted,
                (long long)plain.stats.steps, (long long)spec.stats.steps);
  }
}

// One request at a time through one slot with the host cache on, as an agent's turns arrive: a
// long prompt, an unrelated one (the slot changes hands: the first is saved), and the first again
// with a new tail (restored from the host cache). fed[i]: tokens the draft model's forwards took
// while request i ran (its catch-up and its drafts).
struct Turns {
  std::vector<Result> results;
  std::vector<int64_t> fed;
  SchedulerStats stats;
};
constexpr int kLong = 600, kTail = 30, kTurnCtx = 1024;

std::vector<int32_t> turn_prompt(int which, int V) {
  std::vector<int32_t> p;
  const int n = which == 1 ? 200 : which == 2 ? kLong + kTail : kLong;
  for (int t = 0; t < n; t++) p.push_back(int32_t(((which == 1 ? 7 : 3) * 131 + t * 7919 + 17) % V));
  return p;
}

// draft: "" = no speculation. draft_ns: the draft model's cache namespace ("" = no draft cache).
// dir: the disk tier ("" = none). Runs the turns listed, in order.
Turns run_turns(const std::string& target, const std::string& draft, ThreadPool* pool, const std::string& draft_ns,
                const std::string& dir, const std::vector<int>& which) {
  std::shared_ptr<GgufFile> f = GgufFile::open(target);
  std::unique_ptr<Model> model = Model::load(f, 1, kTurnCtx, pool, 64);
  std::shared_ptr<const Tokenizer> tok(Tokenizer::from_gguf(*f));
  std::unique_ptr<Model> dm;
  std::shared_ptr<GgufFile> df;
  std::atomic<int64_t> fed{0};
  if (!draft.empty()) {
    df = GgufFile::open(draft);
    dm = std::make_unique<HeavyModel>(Model::load(df, 1, kTurnCtx, pool, 64), 0, &fed);
    model = std::make_unique<HeavyModel>(std::move(model));
  }
  Collector c;
  SchedulerOptions o;
  o.n_slots = 1;
  o.n_ctx = kTurnCtx;
  o.max_batch = 64;
  o.spec_draft_max = 6;
  o.cache_bytes = 64ull << 20;
  o.cache_namespace = "test_draft_model turns";
  o.draft_cache_namespace = draft_ns;
  o.cache_dir = dir;
  o.cache_disk_bytes = dir.empty() ? 0 : 64ull << 20;
  Turns out;
  {
    Scheduler s(std::move(model), std::move(dm), tok, o, [&](auto&& e) { c.sink(std::move(e)); });
    for (size_t i = 0; i < which.size(); i++) {
      EngineRequest r;
      r.id = uint64_t(i + 1);
      r.prompt = turn_prompt(which[i], tok->n_vocab());
      r.max_tokens = 24;
      const int64_t before = fed.load();
      s.submit(std::move(r));
      out.results.push_back(c.wait(uint64_t(i + 1)));
      out.fed.push_back(fed.load() - before);
    }
    out.stats = s.stats();
  }
  return out;
}

// On real models the draft model's K/V goes through its host cache (kv_read into blocks,
// kv_write back into another slot's turn or another server) and output stays that of plain
// decoding. How much catch-up that saves is test_scheduler's to measure: these random-weight
// models soon repeat one token, and from then on the history's own n-grams draft, not the model,
// so the draft model catches up on only part of a long prompt.
void check_draft_cache(const std::string& target, const std::string& draft, ThreadPool* pool) {
  const std::string what = target + " drafted by " + draft + ", host cache";
  const std::vector<int> turns = {0, 1, 2};
  const Turns plain = run_turns(target, "", pool, "", "", turns);
  const Turns none = run_turns(target, draft, pool, "", "", turns);
  const Turns cached = run_turns(target, draft, pool, "test_draft_model turns draft", "", turns);
  for (const Turns* t : {&none, &cached})
    for (size_t i = 0; i < turns.size(); i++) {
      check(!t->results[i].error, what + ": turn " + std::to_string(i) + " ran: " + t->results[i].message);
      check(t->results[i].tokens == plain.results[i].tokens, what + ": turn " + std::to_string(i) + " tokens as without speculation");
    }
  // The last turn's model prefix came from the host cache (the slot served turn 1 in between),
  // and the draft model's from its own, as far as it had caught up in turn 0.
  CHECK(cached.stats.host_cache.restored_tokens >= kLong);
  CHECK(cached.results[0].draft_n > 0 && cached.results[2].draft_n > 0);
  CHECK(cached.stats.draft_host_cache.saved_tokens > 0);
  CHECK(cached.stats.draft_host_cache.restored_tokens > 0);
  CHECK_EQ(none.stats.draft_host_cache.cap_bytes, int64_t(0));
  CHECK(cached.stats.host_cache.cap_bytes + cached.stats.draft_host_cache.cap_bytes <= int64_t(64) << 20);
  std::printf("%s: the draft model restored %lld tokens and was fed %lld in the returning turn, %lld without its cache\n",
              what.c_str(), (long long)cached.stats.draft_host_cache.restored_tokens, (long long)cached.fed[2], (long long)none.fed[2]);

  // A restarted server: what the slot held when the first one stopped comes back from the disk
  // tier, for both models.
  char tmpl[] = "/tmp/mb-draft-cache-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  CHECK(dir != nullptr);
  if (!dir) return;
  run_turns(target, draft, pool, "test_draft_model turns draft", dir, {0});
  const Turns again = run_turns(target, draft, pool, "test_draft_model turns draft", dir, {2});
  check(!again.results[0].error && again.results[0].tokens == plain.results[2].tokens,
        what + ": after a restart, tokens as without speculation");
  CHECK(again.stats.host_cache.disk_hit_tokens >= kLong);
  CHECK(again.stats.draft_host_cache.disk_hit_tokens > 0);
  CHECK(std::system((std::string("rm -rf '") + dir + "'").c_str()) == 0);
}

// A vocabulary of n tokens "t0".."t{n-1}", with settable specials, for vocabulary_mismatch.
class ListTok : public Tokenizer {
 public:
  explicit ListTok(int n) : n_(n) {}
  std::vector<int32_t> encode(std::string_view, bool, bool) const override { return {}; }
  std::string piece(int32_t id, bool) const override { return token_text(id); }
  int32_t n_vocab() const override { return n_; }
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }
  bool is_eog(int32_t id) const override { return id == eos_ || id == eot_; }
  std::string token_text(int32_t id) const override { return id == renamed_ ? "other" : "t" + std::to_string(id); }
  std::vector<int32_t> control_ids() const override { return controls_; }
  bool adds_bos() const override { return adds_bos_; }
  int n_, bos_ = 0, eos_ = 1, eot_ = -1, renamed_ = -1;
  bool adds_bos_ = true;
  std::vector<int32_t> controls_{0, 1};
};

void test_vocabulary_mismatch() {
  ListTok a(100), b(100);
  CHECK_EQ(vocabulary_mismatch(a, b, "big", "small"), std::string());
  ListTok c(90);
  CHECK_EQ(vocabulary_mismatch(a, c, "big", "small"), std::string("their vocabularies differ in size (90 tokens in small, 100 in big)"));
  b.renamed_ = 42;
  CHECK_EQ(vocabulary_mismatch(a, b, "big", "small"), std::string("their vocabularies differ at token 42 ('other' in small, 't42' in big)"));
  b.renamed_ = -1;
  b.bos_ = 2;
  CHECK_EQ(vocabulary_mismatch(a, b, "big", "small"), std::string("their BOS tokens differ (2 't2' in small, 0 't0' in big)"));
  b.bos_ = 0;
  b.eos_ = 3;
  CHECK(vocabulary_mismatch(a, b, "big", "small").find("their EOS tokens differ") == 0);
  b.eos_ = 1;
  b.adds_bos_ = false;
  CHECK_EQ(vocabulary_mismatch(a, b, "big", "small"), std::string("big starts prompts with BOS and small does not"));
  b.adds_bos_ = true;
  b.eot_ = 7;
  CHECK_EQ(vocabulary_mismatch(a, b, "big", "small"), std::string("token 7 't7' ends generation in small only"));
  b.eot_ = -1;
  b.controls_ = {0, 1, 5};
  CHECK_EQ(vocabulary_mismatch(a, b, "big", "small"), std::string("their control (special) tokens differ"));
}

}  // namespace

int main(int argc, char** argv) {
  test_vocabulary_mismatch();
  if (argc < 2) {
    std::fprintf(stderr, "usage: test_draft_model FIXTURE_DIR [TARGET.gguf DRAFT.gguf]\n");
    return 2;
  }
  const std::string dir = argv[1];
  ThreadPool pool(2);
  if (argc >= 4) {
    check_pair(argv[2], argv[3], &pool, std::string(argv[2]) == argv[3]);
    check_draft_cache(argv[2], argv[3], &pool);
    TEST_MAIN_END();
  }
  // Both SmolLM2's vocabulary (scripts/make_fixtures.py), different weights.
  const std::string a = dir + "/llama-q8_0.gguf", b = dir + "/llama-q4_0.gguf";
  if (!exists(a) || !exists(b)) {
    std::fprintf(stderr, "test_draft_model: fixtures missing in %s (python3 scripts/make_fixtures.py %s)\n", dir.c_str(), dir.c_str());
    return 1;
  }
  check_pair(a, b, &pool, false);
  check_pair(b, b, &pool, true);
  check_draft_cache(b, b, &pool);
  TEST_MAIN_END();
}
