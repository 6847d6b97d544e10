// The Node binding: one Engine object per loaded model. Loading runs off the JS thread (promise);
// the scheduler's events reach JS through ONE ThreadSafeFunction shared by every request, and
// events that pile up while JS is busy are delivered together in one call.
#include <napi.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <netinet/in.h>
#include <linux/tcp.h>  // struct tcp_info with the fields glibc's netinet/tcp.h lacks
#include <sys/socket.h>

#include "engine/draft_check.h"
#include "engine/scheduler.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/threadpool.h"
#ifdef MB_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#include "model/cuda/backend_cuda.h"
#endif

namespace {

struct LoadOptions {
  std::string model_path;
  int n_ctx = 2048;
  int n_slots = 1;
  int n_threads = 1;
  int max_batch = 512;
  mb::Device device = mb::Device::cpu;
  // Host prompt cache (engine/prompt_cache.h): bytes (0 = off), backing file, namespace.
  double cache_bytes = 0;
  std::string cache_path;
  std::string cache_namespace;
  std::string cache_dir;       // its disk tier ("" = none)
  double cache_disk_bytes = 0;
  std::string draft_cache_namespace;  // the draft model's, as cache_namespace ("" = it keeps none)
  bool spec_ngram = false;     // speculative decoding by n-gram lookup (SchedulerOptions)
  int spec_draft_max = 8;
  // Speculative decoding with a draft model ("" = none): its GGUF, and the names start-up errors
  // give both models by (the caller's ids; the paths when absent).
  std::string draft_path;
  std::string model_name;
  std::string draft_name;
};

// Everything a loaded model owns, in destruction order (scheduler first: it uses the rest).
struct Loaded {
  std::shared_ptr<mb::GgufFile> file;
  std::shared_ptr<const mb::Tokenizer> tok;
  std::unique_ptr<mb::ThreadPool> pool;
  std::unique_ptr<mb::Model> model;          // moved into the scheduler once it starts
  std::shared_ptr<mb::GgufFile> draft_file;  // the draft model's (null = none)
  std::unique_ptr<mb::Model> draft_model;    // likewise moved into the scheduler
  mb::ModelConfig draft_config;
  mb::ModelConfig config;
  size_t kv_bytes = 0;
  size_t kv_token_bytes = 0;
  std::string kv_type;
  int64_t n_params = 0;
  size_t tensor_bytes = 0;
  std::string certification;  // the start-up gate's verdict on the picked kernel set
  std::unique_ptr<mb::Scheduler> sched;
  ~Loaded() { sched.reset(); }
};

// Events waiting for the JS thread. `scheduled` is true while a TSFN call is queued, so a burst
// of scheduler steps costs one JS callback.
struct EventQueue {
  std::mutex mu;
  std::vector<mb::EngineEvent> pending;
  bool scheduled = false;
};

Napi::Object event_to_js(Napi::Env env, const mb::EngineEvent& e) {
  auto o = Napi::Object::New(env);
  o.Set("id", Napi::Number::New(env, double(e.id)));
  switch (e.kind) {
    case mb::EngineEvent::Start:
      o.Set("type", "start");
      o.Set("prompt_tokens", e.prompt_tokens);
      o.Set("cached_tokens", e.cached_tokens);
      o.Set("queue_ms", e.queue_ms);
      break;
    case mb::EngineEvent::Token:
      o.Set("type", "token");
      o.Set("token", e.token);
      o.Set("text", e.text);
      if (e.first) {
        o.Set("first", true);
        o.Set("queue_ms", e.queue_ms);
        o.Set("prompt_ms", e.prompt_ms);
      }
      break;
    case mb::EngineEvent::Done:
      o.Set("type", "done");
      o.Set("finish", e.finish);
      o.Set("text", e.text);
      o.Set("prompt_tokens", e.prompt_tokens);
      o.Set("cached_tokens", e.cached_tokens);
      o.Set("completion_tokens", e.completion_tokens);
      o.Set("queue_ms", e.queue_ms);
      o.Set("prompt_ms", e.prompt_ms);
      o.Set("predicted_ms", e.predicted_ms);
      o.Set("draft_n", e.draft_n);
      o.Set("draft_n_accepted", e.draft_n_accepted);
      break;
    case mb::EngineEvent::Error:
      o.Set("type", "error");
      o.Set("message", e.message);
      if (e.fault) o.Set("fault", true);
      if (e.device_fault) o.Set("device_fault", true);
      break;
  }
  return o;
}

// Tokenizing a long prompt takes a while (~0.5 µs a byte): off the JS thread, so the worker keeps
// forwarding events and taking requests meanwhile. The tokenizer is immutable once loaded.
class TokenizeWorker : public Napi::AsyncWorker {
 public:
  TokenizeWorker(Napi::Env env, std::shared_ptr<const mb::Tokenizer> tok, std::string text, bool add_special,
                 bool parse_special, std::vector<mb::Tokenizer::Span> literal, size_t limit)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), tok_(std::move(tok)),
        text_(std::move(text)), literal_(std::move(literal)), limit_(limit), add_special_(add_special),
        parse_special_(parse_special) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    try {
      ids_ = tok_->encode(text_, add_special_, parse_special_, literal_, limit_);
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  void OnOK() override {
    auto arr = Napi::Int32Array::New(Env(), ids_.size());
    for (size_t i = 0; i < ids_.size(); i++) arr[i] = ids_[i];
    deferred_.Resolve(arr);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<const mb::Tokenizer> tok_;
  std::string text_;
  std::vector<mb::Tokenizer::Span> literal_;
  size_t limit_;
  bool add_special_, parse_special_;
  std::vector<int32_t> ids_;
};

class LoadWorker;

// What the draft model's file and vocabulary alone rule out ("" = nothing): another vocabulary,
// or less training context than the server runs.
std::string draft_file_refusal(const mb::Tokenizer& target_tok, const mb::GgufFile& draft_file, const mb::Tokenizer& draft_tok,
                               const std::string& target, const std::string& draft, int n_ctx) {
  std::string why = mb::vocabulary_mismatch(target_tok, draft_tok, target, draft);
  if (!why.empty()) return why;
  const std::string arch = draft_file.get_str("general.architecture", "");
  const int64_t trained = draft_file.get_int(arch + ".context_length", 0);
  if (trained > 0 && trained < n_ctx)
    return draft + " was trained on " + std::to_string(trained) + " tokens of context, less than --ctx " + std::to_string(n_ctx);
  return "";
}

class Engine : public Napi::ObjectWrap<Engine> {
 public:
  static Napi::Object Init(Napi::Env env, Napi::Object exports) {
    auto cls = DefineClass(env, "Engine", {
      InstanceMethod("load", &Engine::Load),
      InstanceMethod("info", &Engine::Info),
      InstanceMethod("tokenize", &Engine::Tokenize),
      InstanceMethod("tokenizeAsync", &Engine::TokenizeAsync),
      InstanceMethod("detokenize", &Engine::Detokenize),
      InstanceMethod("submit", &Engine::Submit),
      InstanceMethod("cancel", &Engine::Cancel),
      InstanceMethod("stats", &Engine::Stats),
      InstanceMethod("close", &Engine::Close),
    });
    exports.Set("Engine", cls);
    return exports;
  }
  explicit Engine(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Engine>(info) {}
  ~Engine() override { shutdown(); }

  void on_loaded(Napi::Env env, std::unique_ptr<Loaded> l, Napi::Function on_events, const LoadOptions& lo) {
    const int max_batch = lo.max_batch, n_slots = lo.n_slots, n_ctx = lo.n_ctx;
    loaded_ = std::move(l);
    queue_ = std::make_shared<EventQueue>();
    tsfn_ = Napi::ThreadSafeFunction::New(env, on_events, "mashbox_events", 0, 1);
    auto queue = queue_;
    auto tsfn = tsfn_;
    mb::SchedulerOptions so;
    so.n_slots = n_slots;
    so.n_ctx = n_ctx;
    so.max_batch = max_batch;
    so.cache_bytes = uint64_t(lo.cache_bytes);
    so.cache_path = lo.cache_path;
    so.cache_dir = lo.cache_dir;
    so.cache_disk_bytes = uint64_t(lo.cache_disk_bytes);
    so.spec_ngram = lo.spec_ngram;
    so.spec_draft_max = lo.spec_draft_max;
    // The caller names the model, tokenizer and template; the K/V type is the model's to say, and
    // the kernel set's (their results differ in the last bits, and so would the K/V).
    const std::string kernels = lo.device == mb::Device::cuda ? std::string("cuda") : mb::kernels_backend();
    so.cache_namespace = lo.cache_namespace + "\nkv_type=" + loaded_->kv_type + "\nkernels=" + kernels;
    if (loaded_->draft_model && !lo.draft_cache_namespace.empty())
      so.draft_cache_namespace = lo.draft_cache_namespace + "\nkv_type=" + loaded_->draft_model->kv_type() + "\nkernels=" + kernels;
    loaded_->sched = std::make_unique<mb::Scheduler>(
        std::move(loaded_->model), std::move(loaded_->draft_model), loaded_->tok, so, [queue, tsfn](std::vector<mb::EngineEvent>&& evs) mutable {
          std::lock_guard<std::mutex> lk(queue->mu);
          for (auto& e : evs) queue->pending.push_back(std::move(e));
          if (queue->scheduled) return;
          queue->scheduled = true;
          tsfn.NonBlockingCall([queue](Napi::Env env, Napi::Function cb) {
            std::vector<mb::EngineEvent> batch;
            {
              std::lock_guard<std::mutex> lk2(queue->mu);
              batch.swap(queue->pending);
              queue->scheduled = false;
            }
            if (batch.empty() || cb.IsEmpty()) return;
            auto arr = Napi::Array::New(env, batch.size());
            for (size_t i = 0; i < batch.size(); i++) arr.Set(uint32_t(i), event_to_js(env, batch[i]));
            cb.Call({arr});
          });
        });
    n_ctx_ = n_ctx;
    n_slots_ = n_slots;
    device_ = lo.device;
    spec_ = loaded_->draft_file ? "draft" : lo.spec_ngram ? "ngram" : "off";
  }

 private:
  bool ready(Napi::Env env) {
    if (!loaded_ || !loaded_->sched) {
      Napi::Error::New(env, "model not loaded").ThrowAsJavaScriptException();
      return false;
    }
    return true;
  }

  Napi::Value Load(const Napi::CallbackInfo& info);

  Napi::Value Info(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!ready(env)) return env.Undefined();
    return info_object(env);
  }

  Napi::Object info_object(Napi::Env env) {
    const auto& f = *loaded_->file;
    const auto& t = *loaded_->tok;
    auto o = Napi::Object::New(env);
    o.Set("architecture", loaded_->config.arch);
    o.Set("n_ctx_train", loaded_->config.n_ctx_train);
    o.Set("n_vocab", t.n_vocab());
    o.Set("n_ctx", n_ctx_);
    o.Set("slots", n_slots_);
    o.Set("n_layer", loaded_->config.n_layer);
    o.Set("n_embd", loaded_->config.n_embd);
    std::string tmpl = f.get_str("tokenizer.chat_template", "");
    o.Set("chat_template", tmpl.empty() ? env.Null() : Napi::String::New(env, tmpl));
    o.Set("bos_token", t.bos() >= 0 ? Napi::String::New(env, t.token_text(t.bos())) : env.Null());
    o.Set("eos_token", t.eos() >= 0 ? Napi::String::New(env, t.token_text(t.eos())) : env.Null());
    o.Set("add_bos", t.adds_bos());
    auto controls = t.control_ids();
    auto control_tokens = Napi::Array::New(env, controls.size());
    for (size_t i = 0; i < controls.size(); i++) control_tokens.Set(uint32_t(i), t.token_text(controls[i]));
    o.Set("control_tokens", control_tokens);
    o.Set("file_bytes", double(f.file_size()));
    o.Set("n_params", double(loaded_->n_params));
    // Bits per weight the way llama.cpp reports it: tensor bytes over parameter count.
    o.Set("bpw", loaded_->n_params ? 8.0 * double(loaded_->tensor_bytes) / double(loaded_->n_params) : 0.0);
    o.Set("kv_bytes", double(loaded_->kv_bytes));
    o.Set("kv_token_bytes", double(loaded_->kv_token_bytes));
    o.Set("kernels", device_ == mb::Device::cuda ? std::string("cuda") : mb::kernels_backend());
    o.Set("device", device_ == mb::Device::cuda ? "cuda" : "cpu");
    o.Set("certification", loaded_->certification);
    o.Set("spec", spec_);
    if (loaded_->draft_file) {
      auto d = Napi::Object::New(env);
      d.Set("architecture", loaded_->draft_config.arch);
      d.Set("n_ctx_train", loaded_->draft_config.n_ctx_train);
      d.Set("n_layer", loaded_->draft_config.n_layer);
      d.Set("n_embd", loaded_->draft_config.n_embd);
      d.Set("file_bytes", double(loaded_->draft_file->file_size()));
      o.Set("draft", d);
    }
    return o;
  }

  // tokenize(text, add_special, parse_special, literal?) -> Int32Array; literal: [begin, end, ...]
  // in string indices (UTF-16 units), ranges that stay plain text (Tokenizer::encode).
  Napi::Value Tokenize(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!ready(env)) return env.Undefined();
    std::string text = info[0].As<Napi::String>().Utf8Value();
    bool add_special = info.Length() > 1 && info[1].ToBoolean();
    bool parse_special = info.Length() > 2 && info[2].ToBoolean();
    auto literal = info.Length() > 3 ? literal_spans(info[3], text) : std::vector<mb::Tokenizer::Span>{};
    auto ids = loaded_->tok->encode(text, add_special, parse_special, literal);
    auto arr = Napi::Int32Array::New(env, ids.size());
    for (size_t i = 0; i < ids.size(); i++) arr[i] = ids[i];
    return arr;
  }

  // tokenizeAsync(same arguments, limit?) -> Promise<Int32Array>, tokenized on a libuv pool
  // thread; with a limit, it may stop once that many tokens are out (Tokenizer::encode).
  Napi::Value TokenizeAsync(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!ready(env)) return env.Undefined();
    std::string text = info[0].As<Napi::String>().Utf8Value();
    bool add_special = info.Length() > 1 && info[1].ToBoolean();
    bool parse_special = info.Length() > 2 && info[2].ToBoolean();
    auto literal = info.Length() > 3 ? literal_spans(info[3], text) : std::vector<mb::Tokenizer::Span>{};
    size_t limit = info.Length() > 4 && info[4].IsNumber() ? size_t(std::max(0.0, info[4].As<Napi::Number>().DoubleValue())) : SIZE_MAX;
    auto* w = new TokenizeWorker(env, loaded_->tok, std::move(text), add_special, parse_special, std::move(literal), limit);
    auto p = w->promise();
    w->Queue();
    return p;
  }

  // [begin, end, ...] in UTF-16 units of the JS string -> byte ranges of its UTF-8 encoding (a
  // code point of 4 bytes is 2 units; a lone surrogate became U+FFFD, 3 bytes for 1 unit).
  static std::vector<mb::Tokenizer::Span> literal_spans(const Napi::Value& v, const std::string& utf8) {
    std::vector<mb::Tokenizer::Span> spans;
    if (v.IsUndefined() || v.IsNull()) return spans;
    std::vector<int32_t> at = read_ids(v);
    if (at.size() % 2 != 0) throw Napi::TypeError::New(v.Env(), "literal: expected [begin, end, ...] pairs");
    std::vector<size_t> order(at.size()), bytes(at.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return at[a] < at[b]; });
    size_t units = 0, byte = 0;
    for (size_t i : order) {
      while (units < size_t(std::max(at[i], 0)) && byte < utf8.size()) {
        uint8_t c = uint8_t(utf8[byte]);
        size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        byte = std::min(byte + len, utf8.size());
        units += len == 4 ? 2 : 1;
      }
      bytes[i] = byte;
    }
    for (size_t i = 0; i + 1 < at.size(); i += 2)
      if (bytes[i] < bytes[i + 1]) spans.push_back({bytes[i], bytes[i + 1]});
    return spans;
  }

  Napi::Value Detokenize(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!ready(env)) return env.Undefined();
    auto ids = read_ids(info[0]);
    bool render_special = info.Length() > 1 && info[1].ToBoolean();
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || id >= loaded_->tok->n_vocab()) throw Napi::RangeError::New(env, "token id out of range");
      out += loaded_->tok->piece(id, render_special);
    }
    mb::Utf8Stream s;  // invalid byte sequences become U+FFFD like the stream path
    return Napi::String::New(env, s.push(out) + s.flush());
  }

  static std::vector<int32_t> read_ids(const Napi::Value& v) {
    std::vector<int32_t> ids;
    if (v.IsTypedArray()) {
      auto ta = v.As<Napi::Int32Array>();
      ids.assign(ta.Data(), ta.Data() + ta.ElementLength());
    } else if (v.IsArray()) {
      auto a = v.As<Napi::Array>();
      ids.reserve(a.Length());
      for (uint32_t i = 0; i < a.Length(); i++) ids.push_back(a.Get(i).As<Napi::Number>().Int32Value());
    } else {
      throw Napi::TypeError::New(v.Env(), "expected an array of token ids");
    }
    return ids;
  }

  static double num(const Napi::Object& o, const char* k, double d) {
    auto v = o.Get(k);
    return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : d;
  }

  // submit({id, prompt, max_tokens, sampling: {...}, grammar?})
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!ready(env)) return env.Undefined();
    auto o = info[0].As<Napi::Object>();
    mb::EngineRequest r;
    r.id = uint64_t(num(o, "id", 0));
    r.prompt = read_ids(o.Get("prompt"));
    for (int32_t id : r.prompt)
      if (id < 0 || id >= loaded_->tok->n_vocab()) throw Napi::RangeError::New(env, "prompt token id out of range");
    r.max_tokens = int(num(o, "max_tokens", -1));
    if (o.Get("sampling").IsObject()) {
      auto s = o.Get("sampling").As<Napi::Object>();
      r.sampling.temperature = float(num(s, "temperature", 0));
      r.sampling.top_k = int(num(s, "top_k", 0));
      r.sampling.top_p = float(num(s, "top_p", 1));
      r.sampling.min_p = float(num(s, "min_p", 0));
      r.sampling.repeat_penalty = float(num(s, "repetition_penalty", 1));
      r.sampling.frequency_penalty = float(num(s, "frequency_penalty", 0));
      r.sampling.presence_penalty = float(num(s, "presence_penalty", 0));
      r.sampling.penalty_last_n = int(num(s, "penalty_last_n", 64));
      if (s.Get("seed").IsNumber()) {
        r.sampling.has_seed = true;
        r.sampling.seed = uint64_t(int64_t(s.Get("seed").As<Napi::Number>().Int64Value()));
      }
    }
    // Compiled here, on the caller's thread: one that does not compile throws (the request is
    // refused before it is queued), and the scheduler thread never spends a step on it.
    if (o.Get("grammar").IsString()) {
      r.grammar = o.Get("grammar").As<Napi::String>().Utf8Value();
      if (!r.grammar.empty()) {
        try {
          r.compiled_grammar = mb::Grammar::parse(r.grammar);
        } catch (const std::exception& e) {
          throw Napi::Error::New(env, std::string("invalid grammar: ") + e.what());
        }
      }
    }
    // lazy_grammar: {grammar, triggers: [{pieces: [string], at_start: bool}], think_open?, think_close?, starts_in_thinking?}
    if (o.Get("lazy_grammar").IsObject()) {
      auto lz = o.Get("lazy_grammar").As<Napi::Object>();
      const std::string text = lz.Get("grammar").IsString() ? lz.Get("grammar").As<Napi::String>().Utf8Value() : std::string();
      try {
        r.lazy_grammar = mb::Grammar::parse(text);
      } catch (const std::exception& e) {
        throw Napi::Error::New(env, std::string("invalid grammar: ") + e.what());
      }
      auto strings = [&](Napi::Value v) {
        std::vector<std::string> out;
        if (!v.IsArray()) return out;
        auto a = v.As<Napi::Array>();
        for (uint32_t i = 0; i < a.Length(); i++)
          if (a.Get(i).IsString()) out.push_back(a.Get(i).As<Napi::String>().Utf8Value());
        return out;
      };
      if (lz.Get("triggers").IsArray()) {
        auto a = lz.Get("triggers").As<Napi::Array>();
        for (uint32_t i = 0; i < a.Length(); i++) {
          if (!a.Get(i).IsObject()) continue;
          auto t = a.Get(i).As<Napi::Object>();
          mb::GrammarTrigger g;
          g.pieces = strings(t.Get("pieces"));
          g.at_start = t.Get("at_start").IsBoolean() && t.Get("at_start").As<Napi::Boolean>().Value();
          if (!g.pieces.empty()) r.triggers.push_back(std::move(g));
        }
      }
      if (lz.Get("think_open").IsString()) r.trigger_options.think_open = lz.Get("think_open").As<Napi::String>().Utf8Value();
      if (lz.Get("think_close").IsString()) r.trigger_options.think_close = lz.Get("think_close").As<Napi::String>().Utf8Value();
      r.trigger_options.starts_in_thinking = lz.Get("starts_in_thinking").IsBoolean() && lz.Get("starts_in_thinking").As<Napi::Boolean>().Value();
    }
    r.state_point = int(num(o, "state_point", 0));
    loaded_->sched->submit(std::move(r));
    return env.Undefined();
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (loaded_ && loaded_->sched) loaded_->sched->cancel(uint64_t(info[0].As<Napi::Number>().DoubleValue()));
    return env.Undefined();
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!ready(env)) return env.Undefined();
    auto st = loaded_->sched->stats();
    auto o = Napi::Object::New(env);
    o.Set("slots_total", st.slots_total);
    o.Set("slots_in_use", st.slots_in_use);
    o.Set("waiting", st.waiting);
    o.Set("kv_tokens_used", double(st.kv_tokens_used));
    o.Set("kv_tokens_total", double(st.kv_tokens_total));
    o.Set("prefix_lookups", double(st.prefix_lookups));
    o.Set("prefix_hit_tokens", double(st.prefix_hit_tokens));
    o.Set("prefix_lookup_tokens", double(st.prefix_lookup_tokens));
    o.Set("steps", double(st.steps));
    o.Set("graph_captures", double(st.graph_captures));
    o.Set("spec_draft_tokens", double(st.spec_draft_tokens));
    o.Set("spec_accepted_tokens", double(st.spec_accepted_tokens));
    const auto& hc = st.host_cache;
    o.Set("host_cache_bytes", double(hc.bytes));
    o.Set("host_cache_cap_bytes", double(hc.cap_bytes));
    o.Set("host_cache_tokens", double(hc.tokens));
    o.Set("host_cache_evictions", double(hc.evictions));
    o.Set("host_cache_rejected", double(hc.rejected));
    o.Set("host_cache_saved_tokens", double(hc.saved_tokens));
    o.Set("host_cache_restored_tokens", double(hc.restored_tokens));
    o.Set("host_cache_persistent", hc.persistent);
    o.Set("host_cache_disk_bytes", double(hc.disk_bytes));
    o.Set("host_cache_disk_cap_bytes", double(hc.disk_cap_bytes));
    o.Set("host_cache_disk_blocks", double(hc.disk_blocks));
    o.Set("host_cache_disk_hit_tokens", double(hc.disk_hit_tokens));
    o.Set("host_cache_disk_evictions", double(hc.disk_evictions));
    o.Set("host_cache_disk_rejected", double(hc.disk_rejected));
    o.Set("host_cache_disk_written", double(hc.disk_written));
    o.Set("host_cache_disk_write_errors", double(hc.disk_write_errors));
    const std::string ns = loaded_->sched->cache_namespace();
    o.Set("cache_namespace", ns.empty() ? env.Null() : Napi::String::New(env, ns));
    if (!st.routed_expert_calls.empty()) {
      auto calls = Napi::Object::New(env);
      for (const auto& [site, n] : st.routed_expert_calls) calls.Set(site, double(n));
      o.Set("routed_expert_calls", calls);
    }
    return o;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    shutdown();
    return info.Env().Undefined();
  }

  void shutdown() {
    // Stop the scheduler first so no sink call races the TSFN release.
    if (loaded_) loaded_.reset();
    if (queue_) {
      tsfn_.Release();
      queue_.reset();
    }
  }

  std::unique_ptr<Loaded> loaded_;
  std::shared_ptr<EventQueue> queue_;
  Napi::ThreadSafeFunction tsfn_;
  int n_ctx_ = 0, n_slots_ = 0;
  mb::Device device_ = mb::Device::cpu;
  std::string spec_ = "off";  // "off" | "ngram" | "draft"
  bool loading_ = false;
  friend class LoadWorker;
};

class LoadWorker : public Napi::AsyncWorker {
 public:
  LoadWorker(Napi::Env env, Engine* engine, Napi::Object self, LoadOptions o, Napi::Function on_events)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), engine_(engine), opts_(std::move(o)) {
    self_ = Napi::Persistent(self);
    on_events_ = Napi::Persistent(on_events);
  }
  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      auto l = std::make_unique<Loaded>();
      l->file = std::shared_ptr<mb::GgufFile>(mb::GgufFile::open(opts_.model_path));
      // The model first: a file of an unsupported architecture is refused as that, whatever its
      // vocabulary.
      l->pool = std::make_unique<mb::ThreadPool>(opts_.n_threads);
      l->model = mb::Model::load(l->file, opts_.n_slots, opts_.n_ctx, l->pool.get(), opts_.max_batch, opts_.device);
      l->tok = std::shared_ptr<const mb::Tokenizer>(mb::Tokenizer::from_gguf(*l->file));
      l->config = l->model->config();
      if (!opts_.draft_path.empty()) load_draft(*l);
      l->kv_bytes = l->model->kv_bytes();
      l->kv_token_bytes = l->model->kv_token_bytes();
      l->kv_type = l->model->kv_type();
      std::vector<mb::QMatrix> samples;  // the first matrix of each weight type
      for (const auto& t : l->file->tensors()) {
        l->n_params += t.n_elements();
        l->tensor_bytes += t.n_bytes;
        const bool seen = std::any_of(samples.begin(), samples.end(), [&](const mb::QMatrix& m) { return m.type == t.type; });
        if (t.ne.size() >= 2 && !seen) samples.push_back({t.type, t.ne[0], t.ne[1], t.data});
      }
      // The draft model runs on the same kernel set: its weight types are certified too.
      if (l->draft_file)
        for (const auto& t : l->draft_file->tensors()) {
          const bool seen = std::any_of(samples.begin(), samples.end(), [&](const mb::QMatrix& m) { return m.type == t.type; });
          if (t.ne.size() >= 2 && !seen) samples.push_back({t.type, t.ne[0], t.ne[1], t.data});
        }
      // A set that disagrees with the reference on this CPU would answer wrong tokens: no start.
      // The CUDA model gates its own kernels on the device as it loads (it throws otherwise).
      l->certification = opts_.device == mb::Device::cuda ? "passed" : mb::certify_kernels(samples);
      if (l->certification != "passed")
        throw std::runtime_error(std::string("kernel set ") + mb::kernels_backend() + " " + l->certification +
                                 " (MB_KERNELS=ref starts on the scalar set)");
      loaded_ = std::move(l);
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  // The draft model, once it is known to fit the target: the same vocabulary, context enough for
  // --ctx, K/V that rolls back (rejected drafts are dropped from it). Errors name both models.
  void load_draft(Loaded& l) {
    const std::string target = opts_.model_name.empty() ? opts_.model_path : opts_.model_name;
    const std::string draft = opts_.draft_name.empty() ? opts_.draft_path : opts_.draft_name;
    auto refuse = [&](const std::string& why) {
      return std::runtime_error("--draft " + draft + " cannot draft for " + target + ": " + why);
    };
    if (!l.model->kv_rewindable())
      throw refuse(target + " (" + l.config.arch + ") cannot roll back its K/V, so no drafts can be verified on it");
    std::shared_ptr<mb::GgufFile> f;
    std::unique_ptr<mb::Tokenizer> tok;
    try {
      f = std::shared_ptr<mb::GgufFile>(mb::GgufFile::open(opts_.draft_path));
      tok = mb::Tokenizer::from_gguf(*f);
    } catch (const std::exception& e) {
      throw refuse(e.what());
    }
    const std::string why = draft_file_refusal(*l.tok, *f, *tok, target, draft, opts_.n_ctx);
    if (!why.empty()) throw refuse(why);
    auto m = mb::Model::load(f, opts_.n_slots, opts_.n_ctx, l.pool.get(), opts_.max_batch, opts_.device);
    if (!m->kv_rewindable())
      throw refuse(draft + " (" + m->config().arch + ") cannot roll back its K/V, which drafting needs");
    l.draft_config = m->config();
    l.draft_model = std::move(m);
    l.draft_file = std::move(f);
  }

  void OnOK() override {
    auto env = Env();
    engine_->loading_ = false;
    try {
      engine_->on_loaded(env, std::move(loaded_), on_events_.Value(), opts_);
    } catch (const std::exception& e) {
      deferred_.Reject(Napi::Error::New(env, e.what()).Value());
      return;
    }
    deferred_.Resolve(engine_->info_object(env));
  }
  void OnError(const Napi::Error& e) override {
    engine_->loading_ = false;
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  Engine* engine_;
  Napi::ObjectReference self_;   // keeps the Engine alive while loading
  Napi::FunctionReference on_events_;
  LoadOptions opts_;
  std::unique_ptr<Loaded> loaded_;
};

// load({model_path, n_ctx, n_slots, n_threads, max_batch, device?: "cpu" | "cuda", cache_ram_mib?,
//       cache_path?, cache_namespace?, cache_dir?, cache_disk_mib?, spec?: "ngram" | "draft" | "off",
//       draft_model_path? (with spec "draft"), draft_cache_namespace?, model_id?, draft_model_id?,
//       spec_draft_max?}, on_events)
//       -> Promise<info>
Napi::Value Engine::Load(const Napi::CallbackInfo& info) {
  auto env = info.Env();
  if (loaded_ || loading_) throw Napi::Error::New(env, "already loaded");
  auto o = info[0].As<Napi::Object>();
  if (!info[1].IsFunction()) throw Napi::TypeError::New(env, "load: on_events callback required");
  LoadOptions lo;
  lo.model_path = o.Get("model_path").As<Napi::String>().Utf8Value();
  lo.n_ctx = int(num(o, "n_ctx", 2048));
  lo.n_slots = int(num(o, "n_slots", 1));
  lo.n_threads = int(num(o, "n_threads", 1));
  lo.max_batch = int(num(o, "max_batch", 512));
  lo.cache_bytes = std::max(0.0, num(o, "cache_ram_mib", 0)) * 1048576.0;
  if (o.Get("cache_path").IsString()) lo.cache_path = o.Get("cache_path").As<Napi::String>().Utf8Value();
  if (o.Get("cache_namespace").IsString()) lo.cache_namespace = o.Get("cache_namespace").As<Napi::String>().Utf8Value();
  if (o.Get("cache_dir").IsString()) lo.cache_dir = o.Get("cache_dir").As<Napi::String>().Utf8Value();
  lo.cache_disk_bytes = std::max(0.0, num(o, "cache_disk_mib", 0)) * 1048576.0;
  std::string sp = "off";
  if (o.Get("spec").IsString()) {
    sp = o.Get("spec").As<Napi::String>().Utf8Value();
    if (sp != "ngram" && sp != "draft" && sp != "off")
      throw Napi::RangeError::New(env, "load: spec must be \"ngram\", \"draft\" or \"off\", got \"" + sp + "\"");
    lo.spec_ngram = sp == "ngram";
  }
  if (o.Get("draft_model_path").IsString()) lo.draft_path = o.Get("draft_model_path").As<Napi::String>().Utf8Value();
  if (o.Get("draft_cache_namespace").IsString()) lo.draft_cache_namespace = o.Get("draft_cache_namespace").As<Napi::String>().Utf8Value();
  if ((sp == "draft") != !lo.draft_path.empty())
    throw Napi::RangeError::New(env, "load: spec \"draft\" and draft_model_path go together");
  if (o.Get("model_id").IsString()) lo.model_name = o.Get("model_id").As<Napi::String>().Utf8Value();
  if (o.Get("draft_model_id").IsString()) lo.draft_name = o.Get("draft_model_id").As<Napi::String>().Utf8Value();
  lo.spec_draft_max = int(num(o, "spec_draft_max", 8));
  if (o.Get("device").IsString()) {
    const std::string d = o.Get("device").As<Napi::String>().Utf8Value();
    if (d != "cpu" && d != "cuda") throw Napi::RangeError::New(env, "load: device must be \"cpu\" or \"cuda\", got \"" + d + "\"");
    lo.device = d == "cuda" ? mb::Device::cuda : mb::Device::cpu;
  }
  if (lo.n_ctx < 1 || lo.n_slots < 1 || lo.n_threads < 1 || lo.max_batch < 1 || lo.spec_draft_max < 1)
    throw Napi::RangeError::New(env, "load: n_ctx, n_slots, n_threads, max_batch and spec_draft_max must be >= 1");
  loading_ = true;
  auto* w = new LoadWorker(env, this, info.This().As<Napi::Object>(), lo, info[1].As<Napi::Function>());
  auto p = w->promise();
  w->Queue();
  return p;
}

// setSendBuffer(fd, bytes): caps the kernel send buffer of one of the HTTP server's sockets.
// Linux grows it up to tcp_wmem's maximum (4 MiB), which a streaming client that stops reading
// would absorb for many minutes before a write stays undrained; capped, the server notices
// within a few kilobytes. Returns the size the kernel set, or -1.
Napi::Value SetSendBuffer(const Napi::CallbackInfo& info) {
  auto env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "setSendBuffer(fd, bytes)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  int bytes = info[1].As<Napi::Number>().Int32Value();
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) != 0) return Napi::Number::New(env, -1);
  int got = 0;
  socklen_t len = sizeof got;
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &len) != 0) return Napi::Number::New(env, -1);
  return Napi::Number::New(env, got);
}

// tcpInfo(fd): what the kernel knows of a stream socket's peer, for the stalled-reader clock
// (src/http/sse.ts): [bytes_acked, snd_wnd, notsent_bytes, snd_mss], or null where TCP_INFO is missing or
// too old to carry them (Linux < 5.4). bytes_acked + snd_wnd is the right edge of the peer's
// receive window; it moves when the client's application reads (or its kernel grows its buffer).
Napi::Value TcpInfo(const Napi::CallbackInfo& info) {
  auto env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "tcpInfo(fd)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  struct tcp_info ti{};
  socklen_t len = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return env.Null();
  if (len < offsetof(struct tcp_info, tcpi_snd_wnd) + sizeof ti.tcpi_snd_wnd) return env.Null();
  auto out = Napi::Array::New(env, 4);
  out.Set(uint32_t{0}, Napi::Number::New(env, static_cast<double>(ti.tcpi_bytes_acked)));
  out.Set(uint32_t{1}, Napi::Number::New(env, ti.tcpi_snd_wnd));
  out.Set(uint32_t{2}, Napi::Number::New(env, ti.tcpi_notsent_bytes));
  out.Set(uint32_t{3}, Napi::Number::New(env, ti.tcpi_snd_mss));
  return out;
}

// setMaxSegment(fd, bytes): TCP_MAXSEG on the listening socket, inherited by every connection it
// accepts. Over loopback segments are otherwise up to 64 KiB, and a receiver does not reopen its
// window for less than one segment (receiver-side silly-window avoidance), so a slow reader would
// show its reads to the stall clock only every 64 KiB. Returns 0, or -1.
Napi::Value SetMaxSegment(const Napi::CallbackInfo& info) {
  auto env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "setMaxSegment(fd, bytes)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  int bytes = info[1].As<Napi::Number>().Int32Value();
  return Napi::Number::New(env, setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &bytes, sizeof bytes) == 0 ? 0 : -1);
}

// ggufContext(model_path) -> {architecture, n_ctx_train}: from the GGUF header alone (no weights
// read), so `mashbox run` can size its context before the worker loads the model. n_ctx_train is
// 0 when the file does not say.
Napi::Value GgufContext(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "ggufContext(model_path)");
  try {
    const auto file = mb::GgufFile::open(info[0].As<Napi::String>().Utf8Value());
    const std::string arch = file->get_str("general.architecture");
    Napi::Object o = Napi::Object::New(env);
    o.Set("architecture", arch);
    o.Set("n_ctx_train", (double)std::max<int64_t>(0, file->get_int(arch + ".context_length", 0)));
    return o;
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
}

// checkGrammar(text, max_states): null when the grammar compiles and a bounded search of its
// inputs (GrammarMatcher::find_dead_end) meets none the matcher gives up on; otherwise
// {reason, input}: why, and the input that gets there (null for a grammar that does not compile).
// For grammars built from caller input, checked before any generation uses them.
Napi::Value CheckGrammar(const Napi::CallbackInfo& info) {
  auto env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "checkGrammar(text, max_states)");
  const std::string text = info[0].As<Napi::String>().Utf8Value();
  const int64_t max_states = info[1].As<Napi::Number>().Int64Value();
  auto fail = [&](const std::string& reason, Napi::Value input) {
    auto o = Napi::Object::New(env);
    o.Set("reason", reason);
    o.Set("input", input);
    return o;
  };
  std::shared_ptr<const mb::Grammar> g;
  try {
    g = mb::Grammar::parse(text);
  } catch (const std::exception& e) {
    return fail(std::string("invalid grammar: ") + e.what(), env.Null());
  }
  mb::GrammarMatcher m(g);
  std::string input;
  if (!m.find_dead_end(size_t(std::max<int64_t>(1, max_states)), input)) return env.Null();
  return fail(m.error(), Napi::Buffer<char>::Copy(env, input.data(), input.size()));
}

// checkDraft(model_path, draft_path, n_ctx, model_id, draft_id) -> null, or why the draft model
// cannot draft for the model, from their headers and vocabularies alone (no weights read), so
// `mashbox run --draft` refuses before it serves. The load checks this again, and rollback too.
Napi::Value CheckDraft(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 5 || !info[0].IsString() || !info[1].IsString() || !info[2].IsNumber() || !info[3].IsString() || !info[4].IsString())
    throw Napi::TypeError::New(env, "checkDraft(model_path, draft_path, n_ctx, model_id, draft_id)");
  const std::string target = info[3].As<Napi::String>().Utf8Value(), draft = info[4].As<Napi::String>().Utf8Value();
  std::string why;
  try {
    const auto tf = mb::GgufFile::open(info[0].As<Napi::String>().Utf8Value());
    const auto df = mb::GgufFile::open(info[1].As<Napi::String>().Utf8Value());
    const auto tt = mb::Tokenizer::from_gguf(*tf);
    const auto dt = mb::Tokenizer::from_gguf(*df);
    why = draft_file_refusal(*tt, *df, *dt, target, draft, info[2].As<Napi::Number>().Int32Value());
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (why.empty()) return env.Null();
  return Napi::String::New(env, "--draft " + draft + " cannot draft for " + target + ": " + why);
}

#ifdef MB_HAVE_CUDA
// What the CUDA runtime sees, for `--device cuda`'s start-up check: {count, error, name, cc,
// total_bytes, free_bytes}. count 0 with error naming why (no driver, too old, no device).
Napi::Value CudaProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const mb::cuda::DeviceInfo d = mb::cuda::probe_device();
  Napi::Object o = Napi::Object::New(env);
  o.Set("count", d.count);
  o.Set("error", d.error);
  o.Set("name", d.name);
  o.Set("cc", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor));
  o.Set("total_bytes", (double)d.total_bytes);
  o.Set("free_bytes", (double)d.free_bytes);
  return o;
}

// cudaFootprint(model_path, n_slots, n_ctx, max_batch) -> {architecture, weight_bytes, kv_bytes,
// scratch_bytes}: what the CUDA model would take on the device, from the GGUF header alone; throws
// for an architecture the CUDA model does not run.
Napi::Value CudaModelFootprint(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsString() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsNumber())
    throw Napi::TypeError::New(env, "cudaFootprint(model_path, n_slots, n_ctx, max_batch)");
  try {
    const auto file = mb::GgufFile::open(info[0].As<Napi::String>().Utf8Value());
    const mb::CudaFootprint fp = mb::cuda_footprint(*file, info[1].As<Napi::Number>().Int32Value(),
                                                    info[2].As<Napi::Number>().Int32Value(),
                                                    info[3].As<Napi::Number>().Int32Value());
    Napi::Object o = Napi::Object::New(env);
    o.Set("architecture", fp.arch);
    o.Set("weight_bytes", (double)fp.weight_bytes);
    o.Set("kv_bytes", (double)fp.kv_bytes);
    o.Set("scratch_bytes", (double)fp.scratch_bytes);
    return o;
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
}
#endif

Napi::Object InitAll(Napi::Env env, Napi::Object exports) {
  exports.Set("setSendBuffer", Napi::Function::New(env, SetSendBuffer, "setSendBuffer"));
  exports.Set("tcpInfo", Napi::Function::New(env, TcpInfo, "tcpInfo"));
  exports.Set("setMaxSegment", Napi::Function::New(env, SetMaxSegment, "setMaxSegment"));
  exports.Set("checkGrammar", Napi::Function::New(env, CheckGrammar, "checkGrammar"));
  exports.Set("ggufContext", Napi::Function::New(env, GgufContext, "ggufContext"));
  exports.Set("checkDraft", Napi::Function::New(env, CheckDraft, "checkDraft"));
#ifdef MB_HAVE_CUDA
  exports.Set("cuda", true);  // this addon was linked with the CUDA kernel set (native/kernels/cuda)
  exports.Set("cudaProbe", Napi::Function::New(env, CudaProbe, "cudaProbe"));
  // The CUDA backend (model/cuda/backend_cuda.h) is in this build: Model::load takes device cuda.
  exports.Set("cudaArchitectures", mb::cuda_architectures());
  exports.Set("cudaFootprint", Napi::Function::New(env, CudaModelFootprint, "cudaFootprint"));
#endif
  return Engine::Init(env, exports);
}

}  // namespace

NODE_API_MODULE(mashbox_native, InitAll)
