// The scheduler thread: owns the Model, runs S sequences with continuous batching, chunked
// prefill mixed with decode in one forward() per step, prefix reuse across requests, sampling
// and UTF-8-safe detokenization. Events leave through one sink callback, batched per step.
//
// Dimension legend: S slots (--slots), C context per slot (--ctx), V n_vocab,
//                   B max tokens per forward() (prefill chunks + one decode token per sequence).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grammar.h"
#include "prompt_cache.h"
#include "sampler.h"
#include "scheduler_phases.h"

namespace mb {
class Model;
struct Batch;
class Tokenizer;

struct EngineRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;     // already tokenized
  SamplerParams sampling;
  int max_tokens = -1;             // -1 = until the end of the slot's context
  // GBNF-style grammar (grammar.h) the output must match; empty = unconstrained. A grammar that
  // does not compile ends the request with an Error event.
  std::string grammar;
  // `grammar` already compiled by the caller, so a large one costs its own thread and not a
  // step of every running sequence; null = compiled at admission.
  std::shared_ptr<const Grammar> compiled_grammar;
  // Lazy grammar (grammar.h, TriggerScanner): output is free (or under `grammar`) until it opens
  // a call in one of `triggers`; from the trigger's first byte on it must match lazy_grammar.
  // Null = none.
  std::shared_ptr<const Grammar> lazy_grammar;
  std::vector<GrammarTrigger> triggers;
  TriggerOptions trigger_options;
  // State point: prompt[0, state_point) is what a new conversation of the same client would share
  // (its system prompt and tools). Saved to the host cache once prefilled, so a new session
  // restores it even while this slot serves someone else. 0 = none.
  int state_point = 0;
};

struct EngineEvent {
  enum Kind { Start, Token, Done, Error };
  Kind kind = Token;
  uint64_t id = 0;
  // Token
  int32_t token = -1;
  std::string text;                // Token: complete UTF-8 only; Done: the flushed remainder
  bool first = false;              // Token: the first generated token (prefill done; prompt_ms set)
  // Start / Done
  int prompt_tokens = 0;
  int cached_tokens = 0;
  double queue_ms = 0;
  // Done
  std::string finish;              // "stop" | "length" | "cancelled"
  int completion_tokens = 0;
  double prompt_ms = 0;            // slot assignment -> first token sampled (Done; first Token)
  double predicted_ms = 0;         // first token -> last token
  int draft_n = 0;                 // Done: draft tokens verified (speculative decoding)
  int draft_n_accepted = 0;        // Done: ... of which the output kept
  // Error
  std::string message;
  bool fault = false;              // the forward pass of the whole batch threw: engine state suspect
  bool device_fault = false;       // ... with a DeviceError: the device (CUDA context) is lost too
};

struct SchedulerStats {
  int slots_total = 0;
  int slots_in_use = 0;
  int waiting = 0;
  int64_t kv_tokens_used = 0;
  int64_t kv_tokens_total = 0;
  int64_t prefix_lookups = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prefix_lookup_tokens = 0;
  int64_t steps = 0;
  PromptCacheStats host_cache;     // all zero when the host cache is off
  PromptCacheStats draft_host_cache;  // the draft model's (all zero without one)
  std::vector<std::pair<std::string, int64_t>> routed_expert_calls;  // Model::routed_expert_calls()
  int64_t graph_captures = 0;      // Model::graph_captures()
  int64_t spec_draft_tokens = 0;   // draft tokens verified, all requests
  int64_t spec_accepted_tokens = 0;  // ... of which the output kept
};

struct SchedulerOptions {
  int n_slots = 1;
  int n_ctx = 2048;
  int max_batch = 512;             // B
  // Host prompt cache (prompt_cache.h): 0 bytes = off. The file lets a restarted worker find
  // it again ("" = private memory); the namespace says what its states are valid for.
  uint64_t cache_bytes = 0;
  std::string cache_path;
  std::string cache_namespace;
  // Its disk tier (prompt_cache.h): a directory and a cap ("" or 0 = none). What the slots hold
  // when the scheduler stops is saved to the cache first, so the next server finds it there.
  std::string cache_dir;
  uint64_t cache_disk_bytes = 0;
  // With a draft model, what its K/V is valid for, built as cache_namespace is (from the draft
  // model's file); "" = the draft model keeps no host cache. Its host cache takes a share of
  // cache_bytes and cache_disk_bytes (by K/V bytes per token), in cache_path + ".draft" and
  // cache_dir + "/draft".
  std::string draft_cache_namespace;
  // Speculative decoding by n-gram lookup: a decoding sequence's next tokens are guessed from an
  // earlier occurrence of its last few tokens in its own prompt and output, or where those have
  // none, in the host cache's earlier prompts (PromptCache::continuation), and verified in the
  // step's one forward(); the output is the same as without it (greedy: token for token).
  // With a draft model (the Scheduler's second Model) the guesses come from its greedy steps
  // instead, verified the same way, except where the history holds a match of 3 or more tokens
  // (the host cache: 4): that continuation is drafted as with spec_ngram, for no forward pass
  // (spec_ngram is ignored).
  bool spec_ngram = false;
  int spec_draft_max = 8;          // draft tokens per sequence per step, at most
};

class Scheduler {
 public:
  using Sink = std::function<void(std::vector<EngineEvent>&&)>;
  // The tokenizer is shared read-only with the caller's thread (tokenize/detokenize calls).
  Scheduler(std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, SchedulerOptions opts, Sink sink);
  // With a draft model for speculative decoding: same vocabulary and tokenizer as `model`, able
  // to roll its K/V back (kv_rewindable), loaded with the same slots and context. It has its own
  // K/V per slot, and its own host cache (SchedulerOptions::draft_cache_namespace) that follows the
  // model's: saved and restored with the same prompts. Throws std::invalid_argument otherwise.
  Scheduler(std::unique_ptr<Model> model, std::unique_ptr<Model> draft_model, std::shared_ptr<const Tokenizer> tok,
            SchedulerOptions opts, Sink sink);
  ~Scheduler();  // stops the thread; requests still running get no further events
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void submit(EngineRequest req);
  void cancel(uint64_t id);          // unknown or finished ids are ignored
  SchedulerStats stats() const;
  // Hex id of the host cache's namespace ("" when it is off).
  std::string cache_namespace() const { return cache_ ? cache_->namespace_id() : std::string(); }
  Model& model() { return *model_; }
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Seq;
  struct Slot {
    std::vector<int32_t> cached;     // [<= C] tokens whose K/V the slot holds, in position order
    std::vector<int32_t> draft_cached;  // [<= C] ... that the draft model's slot holds
    Seq* seq = nullptr;              // nullptr = free
  };
  void loop();
  void step(std::vector<EngineEvent>& out);
  void admit(std::vector<EngineEvent>& out);
  size_t known_prefix(const std::vector<int32_t>& prompt);
  int choose_next(bool any_free);
  // The phases, in the order they run (scheduler_phases.h has the pure decisions).
  bool accept_request(Seq& s, std::vector<EngineEvent>& out);
  size_t reuse_prefix(const SlotChoice& c, const std::vector<int32_t>& prompt);
  void reuse_draft_prefix(const SlotChoice& c, const std::vector<int32_t>& prompt);
  void draft(int n_decoding);
  void draft_with_model(const std::vector<std::pair<Seq*, int>>& want);
  void trim_draft_kv(int slot);
  Batch build_batch(const BatchPlan& plan, const std::vector<Seq*>& seqs);
  bool run(const Batch& b, std::vector<EngineEvent>& out);
  void note_step_ms(int rows, double ms);
  int32_t sample_row(Seq& s, float* row, std::vector<EngineEvent>& out);
  bool emit(Seq& s, int32_t tok, size_t held, Clock::time_point now, std::vector<EngineEvent>& out);
  void process_outputs(const BatchPlan& plan, const std::vector<Seq*>& seqs, std::vector<EngineEvent>& out);
  void finish(Seq& s, const char* reason, std::vector<EngineEvent>& out);
  void fail(Seq& s, const std::string& message, std::vector<EngineEvent>& out);
  const std::shared_ptr<const TokenTrie>& trie();
  void save_to_host(int slot, size_t n);  // slot's K/V for its first n cached tokens (both models)
  void publish_stats();

  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> draft_model_;          // null = none (n-gram drafts or no speculation)
  std::shared_ptr<const Tokenizer> tok_;
  SchedulerOptions opts_;
  OvertakePolicy overtake_;
  // Depth at which one prompt token's attention costs as much as its matmuls (0 = unknown).
  // Prefill chunks that share a step with decode tokens are sized by this cost, not by count.
  double attention_depth_unit_ = 0;
  Sink sink_;
  int n_vocab_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> incoming_;   // guarded by mu_
  std::vector<uint64_t> cancels_;               // guarded by mu_
  bool stopping_ = false;                       // guarded by mu_
  SchedulerStats stats_;                        // guarded by mu_ (published copy)

  // Scheduler-thread state.
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;   // admission order
  std::vector<Slot> slots_;                     // [S]
  std::vector<float> logits_;                   // [S + spec rows, V] (one wanted row per sequence, plus drafts)
  std::vector<float> draft_logits_;             // [S, V] the draft model's one row per drafting sequence
  // What steps cost, measured (DraftPolicy): ms of a decode-only step by rows ([S + kSpecRows + 1],
  // 0 = none yet), and of one draft model forward. Averages, so drafting follows the machine's load.
  std::vector<double> step_ms_;
  double draft_forward_ms_ = 0;
  bool rewindable_ = true;                      // Model::kv_rewindable: drafts can be rolled back
  std::shared_ptr<const TokenTrie> trie_;       // vocabulary trie, built at the first grammar
  std::unique_ptr<PromptCache> cache_;          // host prompt cache; null = off
  std::unique_ptr<PromptCache> draft_cache_;    // the draft model's; null = off (or no draft model)
  int64_t prefix_lookups_ = 0, prefix_hit_tokens_ = 0, prefix_lookup_tokens_ = 0, steps_ = 0;
  int64_t spec_draft_tokens_ = 0, spec_accepted_tokens_ = 0;
  std::thread thread_;
};

}  // namespace mb
