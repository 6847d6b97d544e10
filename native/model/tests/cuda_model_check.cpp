// test_cuda_model's device half (built with -DMB_CUDA=ON): the product's CUDA model (Model::load
// with Device::cuda, model/cuda/backend_cuda.cpp) checked against the CPU backend over
// teacher-forced steps on a qwen3 and a llama shape, a real model through the engine's scheduler
// on both, and prefill / decode benchmarks through that model (--perf). Prints one JSON line. The
// kernels' own parity is kernels/cuda/tests/test_cuda_ops.cpp, the ops' test_backend_ops.cpp.
//
// Dimension legend: T rows in a step (<= Tm), D n_embd, H heads, Hk KV heads, Dh head dim, F n_ff,
// V n_vocab, L layers, S slots, C context per slot, K/N a matrix's reduction/output dims.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "model/tests/test_cuda_model.h"
#include "model/tests/harness.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/tests/parity.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/threadpool.h"

namespace mb {
namespace harness {
namespace {

constexpr double kH200Bandwidth = 4.8e12;  // bytes/s, the H200 datasheet figure frac_of_4_8_tb_s is measured in

struct Checks {
  int failed = 0;
  std::string list = "[";
  void add(const std::string& name, bool ok, double err) {
    char b[64];
    std::snprintf(b, sizeof b, "%.3g", err);
    list += (list.size() > 1 ? "," : "") + std::string("{\"name\":") + json_quote(name) + ",\"ok\":" +
            (ok ? "true" : "false") + ",\"err\":" + (std::isfinite(err) ? b : "null") + "}";
    std::fprintf(stderr, "%s %-40s err %s\n", ok ? "ok  " : "FAIL", name.c_str(), b);
    if (!ok) failed++;
  }
};

// ---- the product's CUDA model (model/cuda/backend_cuda.cpp) ----

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Weight bytes a decode step reads from a file: every matrix once, one row of the embedding (all
// of it when the file ties the head to it).
double step_bytes(const GgufFile& f) {
  double b = 0;
  const bool tied = f.tensor("output.weight") == nullptr;
  for (const auto& t : f.tensors()) {
    if (t.name == "token_embd.weight" && !tied) b += (double)t.n_bytes / (double)t.ne[1];
    else b += (double)t.n_bytes;
  }
  return b;
}

// Teacher-forced parity through Model::load's two devices: the same rows into the CPU backend
// and the CUDA model, per step the relative L2 distance of every wanted logits row and whether
// their argmaxes agree. Two slots with different tokens: a prefill of both prompts in one batch
// (the logits of each prompt's last row, gathered from the middle of the batch), then decode
// steps of one row per slot; from the third decode step on, the CUDA model replays its captured
// graph, so the check covers the graph path too.
void check_logits(Checks& c, const std::string& label, const std::vector<uint8_t>& img, int steps, JsonLine& j) {
  std::shared_ptr<GgufFile> f(GgufFile::parse(img.data(), img.size()));
  const int S = 2, prompt = 16, C = prompt + steps + 1;
  ThreadPool pool((int)std::max(1u, std::thread::hardware_concurrency()));
  auto cpu = Model::load(f, S, C, &pool, 64);
  auto gpu = Model::load(f, S, C, nullptr, 64, Device::cuda);
  const int V = cpu->config().n_vocab;
  std::vector<std::vector<int32_t>> toks(S, std::vector<int32_t>(prompt + steps));
  for (int s = 0; s < S; s++)
    for (size_t i = 0; i < toks[s].size(); i++) toks[s][i] = (int32_t)((i * 7919 + 13 + 101 * s) % (size_t)V);
  double worst = 0;
  int agree = 0, rows = 0;
  std::vector<float> cl((size_t)S * V), gl((size_t)S * V);
  for (int step = 0; step <= steps; step++) {
    const int p0 = step == 0 ? 0 : prompt + step - 1, n = step == 0 ? prompt : 1;
    Batch b;
    for (int s = 0; s < S; s++)
      for (int i = 0; i < n; i++) {
        b.token.push_back(toks[s][p0 + i]);
        b.pos.push_back(p0 + i);
        b.slot.push_back(s);
        b.logits.push_back(i == n - 1);
      }
    cpu->forward(b, cl.data());
    gpu->forward(b, gl.data());
    for (int r = 0; r < S; r++, rows++) {
      const float* cr = &cl[(size_t)r * V];
      const float* gr = &gl[(size_t)r * V];
      // relative L2 distance: the square root of parity.h's NMSE
      worst = std::max(worst, std::sqrt(parity::compare(gr, cr, (size_t)V).nmse));
      agree += std::max_element(cr, cr + V) - cr == std::max_element(gr, gr + V) - gr;
    }
  }
  const double agree_frac = (double)agree / rows;
  // The CPU rounds activations to q8/f16/bf16 before each matmul, the GPU keeps f32: a few
  // percent of logit distance over several layers is that rounding, not a bug (a layout or
  // indexing bug gives ~100%).
  c.add(label + " logits vs CPU backend, worst row rel L2", worst <= 0.05, worst);
  // Random logits sit close at the top (the top-two gap is ~0.2 rms), so a percent of rounding
  // noise flips some argmaxes; a layout bug agrees on next to none.
  c.add(label + " logits vs CPU backend, argmax agreement", agree_frac >= 0.75, agree_frac);
  // Decode steps of 2 rows: the first runs eagerly, the second is captured and replayed after.
  c.add(label + " decode step captured as a CUDA graph", gpu->graph_captures() == 1, (double)gpu->graph_captures());
  j.num(label + "_parity_steps", steps).num(label + "_parity_worst_rel_l2", worst).num(label + "_parity_argmax_agree", agree_frac);
}

// Per batch size B: prefill B sequences of a.prefill tokens (as many whole sequences per step as
// the model's max batch holds, as the scheduler batches them), then decode steps of one row per
// slot at that depth, all through Model::forward (logits of every row come back to the host
// each step, as the engine samples there). Prefill stops after 20 s so a slow kernel cannot eat
// the run's time; the slots it did not reach get slot 0's K/V (kv_copy) so decode still runs B.
std::string bench(Model& m, int Tm, double weight_bytes, const HarnessArgs& a) {
  const ModelConfig& cfg = m.config();
  const int V = cfg.n_vocab;
  std::string out = "[";
  std::vector<float> logits;
  for (int B : a.batches) {
    for (int i = 0; i < B; i++) m.kv_truncate(i, 0);
    const int seq_per_step = std::max(1, std::min(B, Tm / std::max(1, a.prefill)));
    const int chunk = std::min(Tm, a.prefill);
    int done_tokens = 0, filled = 0;
    const double p0 = now_s();
    for (int b0 = 0; b0 < B && now_s() - p0 < 20.0; b0 += seq_per_step) {
      const int nb = std::min(seq_per_step, B - b0);
      for (int c0 = 0; c0 < a.prefill; c0 += chunk) {
        const int n = std::min(chunk, a.prefill - c0);
        Batch b;
        for (int sb = 0; sb < nb; sb++)
          for (int i = 0; i < n; i++) {
            b.token.push_back((int32_t)((c0 + i + 31 * (b0 + sb)) * 17 % V));
            b.pos.push_back(c0 + i);
            b.slot.push_back(b0 + sb);
            b.logits.push_back(c0 + i == a.prefill - 1);
          }
        logits.resize((size_t)nb * V);
        m.forward(b, logits.data());
        done_tokens += nb * n;
      }
      filled = b0 + nb;
    }
    const double pt = now_s() - p0;
    for (int i = filled; i < B; i++) m.kv_copy(0, i, a.prefill);
    std::vector<int32_t> tok(B);
    for (int i = 0; i < B; i++) tok[i] = (int32_t)((i * 31 + 7) % V);
    logits.resize((size_t)B * V);
    auto one = [&](int it) {
      Batch b;
      for (int i = 0; i < B; i++) {
        b.token.push_back(tok[i]);
        b.pos.push_back(a.prefill + it);
        b.slot.push_back(i);
        b.logits.push_back(1);
      }
      m.forward(b, logits.data());
      for (int i = 0; i < B; i++) tok[i] = (int32_t)(std::max_element(&logits[(size_t)i * V], &logits[(size_t)(i + 1) * V]) - &logits[(size_t)i * V]);
    };
    one(0);  // eager
    one(1);  // captured (when B is decode-shaped)
    const double t0 = now_s();
    for (int it = 0; it < a.iters; it++) one(2 + it);
    const double dt = (now_s() - t0) / a.iters;
    const double kv_bytes = (double)B * cfg.n_layer * 2.0 * cfg.n_head_kv * cfg.head_dim * 2.0 * (a.prefill + 2 + a.iters / 2);
    const double bytes = weight_bytes + kv_bytes;
    char b[512];
    std::snprintf(b, sizeof b,
                  "{\"batch\":%d,\"decode_ms_per_step\":%.4g,\"decode_tok_s\":%.4g,\"bytes_per_step\":%.6g,"
                  "\"frac_of_4_8_tb_s\":%.4g,\"logits_bytes_per_step\":%.6g,\"prefill_tokens\":%d,\"prefill_s\":%.4g,"
                  "\"prefill_tok_s\":%.4g,\"graph_captures\":%lld}",
                  B, dt * 1e3, B / dt, bytes, bytes / dt / kH200Bandwidth, 4.0 * B * V, done_tokens, pt,
                  done_tokens / pt, (long long)m.graph_captures());
    std::fprintf(stderr, "%s\n", b);
    out += (out.size() > 1 ? "," : "") + std::string(b);
  }
  return out + "]";
}

// ---- the engine on the CUDA model: scheduler + Model(Device::cuda) on a real GGUF ----

struct EngineRun {
  std::map<uint64_t, std::vector<int32_t>> tokens;  // per request id, in order
  std::map<uint64_t, std::string> finish;           // "stop" | "length" | ... | "error: ..."
  int64_t graph_captures = 0, steps = 0, cache_saved = 0, cache_restored = 0;
  double seconds = 0;
};

// Requests through the product's Scheduler exactly as the addon drives it: more requests than
// slots (queueing, slots reused), the last two sharing a long prefix with the first two (prefix
// reuse: a slot's own K/V kept, or copied from another slot on the device), greedy decoding, and
// the host prompt cache on (a reused slot's K/V saved through kv_read, restored through kv_write).
EngineRun run_engine(const std::shared_ptr<GgufFile>& f, std::shared_ptr<const Tokenizer> tok, Device device) {
  constexpr int S = 2, C = 256, Tm = 64, kRequests = 6;
  ThreadPool pool((int)std::max(1u, std::thread::hardware_concurrency()));
  std::mutex mu;
  std::condition_variable cv;
  EngineRun r;
  int done = 0;
  SchedulerOptions o;
  o.n_slots = S;
  o.n_ctx = C;
  o.max_batch = Tm;
  o.cache_bytes = 64ull << 20;  // private memory
  o.cache_namespace = "test_cuda_model";
  const double t0 = now_s();
  {
    Scheduler s(Model::load(f, S, C, &pool, Tm, device), tok, o, [&](std::vector<EngineEvent>&& evs) {
      std::lock_guard<std::mutex> lk(mu);
      for (const auto& e : evs) {
        if (e.kind == EngineEvent::Token) r.tokens[e.id].push_back(e.token);
        if (e.kind == EngineEvent::Done) r.finish[e.id] = e.finish;
        if (e.kind == EngineEvent::Error) r.finish[e.id] = "error: " + e.message;
        if (e.kind == EngineEvent::Done || e.kind == EngineEvent::Error) done++;
      }
      cv.notify_all();
    });
    const std::string shared = "Once upon a time, in a small village by the sea, there lived";
    for (int i = 0; i < kRequests; i++) {
      EngineRequest q;
      q.id = (uint64_t)i + 1;
      const std::string ending[] = {" a fisher", " an old baker", " a tailor", " two cats"};
      q.prompt = tok->encode(i % 4 < 2 ? shared + ending[i % 4 + (i >= 4 ? 2 : 0)] : "Request " + std::to_string(i) + ": count to ten.", true, false);
      q.max_tokens = 24;
      s.submit(std::move(q));
    }
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, std::chrono::seconds(60), [&] { return done == kRequests; });
    const SchedulerStats st = s.stats();
    r.graph_captures = st.graph_captures;
    r.steps = st.steps;
    r.cache_saved = st.host_cache.saved_tokens;
    r.cache_restored = st.host_cache.restored_tokens;
  }
  r.seconds = now_s() - t0;
  return r;
}

// The same requests on the CPU backend and on the CUDA model: every CUDA request must finish
// without an error, the decode steps must have been captured as graphs, and the first generated
// token (a function of the prompt alone) must agree with the CPU's; how far each greedy
// continuation agrees is reported (rounding may part two close candidates later on).
void check_engine(Checks& c, const std::string& path, JsonLine& j) {
  std::shared_ptr<GgufFile> f(GgufFile::open(path));
  std::shared_ptr<const Tokenizer> tok(Tokenizer::from_gguf(*f));
  const EngineRun cpu = run_engine(f, tok, Device::cpu);
  const EngineRun gpu = run_engine(f, tok, Device::cuda);
  int finished = 0, first_agree = 0, n = 0;
  double prefix = 0;
  std::string errors;
  for (const auto& [id, fin] : cpu.finish) {
    n++;
    const auto g = gpu.finish.find(id);
    if (g != gpu.finish.end() && g->second.rfind("error", 0) != 0) finished++;
    else errors += (errors.empty() ? "" : "; ") + std::to_string(id) + ": " + (g == gpu.finish.end() ? "no end" : g->second);
    // no Token event at all when the first token ends the request
    const std::vector<int32_t> none;
    const auto ia = cpu.tokens.find(id), ib = gpu.tokens.find(id);
    const auto& a = ia == cpu.tokens.end() ? none : ia->second;
    const auto& b = ib == gpu.tokens.end() ? none : ib->second;
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) k++;
    first_agree += k > 0 || (a.empty() && b.empty());
    prefix += (double)k / std::max<size_t>(1, a.size());
  }
  c.add("engine on cuda: every request finished (" + path + ")", n > 0 && finished == n, (double)finished);
  if (!errors.empty()) j.str("engine_errors", errors);
  c.add("engine on cuda: first token agrees with the CPU backend", n > 0 && first_agree * 5 >= n * 4, (double)first_agree / std::max(1, n));
  c.add("engine on cuda: decode steps captured as CUDA graphs", gpu.graph_captures >= 1, (double)gpu.graph_captures);
  j.num("engine_requests", n).num("engine_first_token_agree", (double)first_agree / std::max(1, n))
      .num("engine_greedy_prefix_agree", prefix / std::max(1, n)).num("engine_graph_captures", (double)gpu.graph_captures)
      .num("engine_steps", (double)gpu.steps).num("engine_cuda_s", gpu.seconds).num("engine_cpu_s", cpu.seconds)
      .num("engine_cache_saved_tokens", (double)gpu.cache_saved).num("engine_cache_restored_tokens", (double)gpu.cache_restored)
      .num("engine_cpu_cache_restored_tokens", (double)cpu.cache_restored);
}

GgmlType parse_type(const std::string& n) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    std::string tn = ggml_type_name(t);
    std::transform(tn.begin(), tn.end(), tn.begin(), ::tolower);
    if (tn == n) return t;
  }
  throw std::invalid_argument("unknown --wtype " + n);
}

}  // namespace

int run_on_device(const HarnessArgs& a) {
  JsonLine j;
  j.str("harness", "test_cuda_model").str("shape", a.shape).str("wtype", a.wtype);
  const cuda::DeviceInfo dev = cuda::probe_device();
  if (dev.count == 0) {
    std::printf("%s\n", j.str("status", "no_cuda_device")
                            .str("asked", "a CUDA device (device 0)")
                            .str("found", dev.error.empty() ? "no device" : dev.error)
                            .done()
                            .c_str());
    return 3;
  }
  j.str("device", dev.name).num("cc", dev.cc_major * 10 + dev.cc_minor).num("device_gib", dev.total_bytes / 1073741824.0);
  Checks c;
  std::string errors;
  ModelShape s;
  try {
    s = shape_preset(a.shape, parse_type(a.wtype));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_cuda_model: %s\n", e.what());
    return 2;
  }
  // Each phase runs even when an earlier one threw (a bug in one kernel should not hide the
  // others' results); a CUDA fault that poisons the context shows up in every later phase.
  if (a.only.empty() || a.only == "checks") {
    const double t0 = now_s();
    // The asked shape (first parity_layers layers) and a small llama with a tied head (the
    // default model's architecture), so one run checks both architectures the CUDA model runs.
    ModelShape llama = shape_preset("llama-tiny", GgmlType::Q4_1);
    ModelShape ps = s;
    ps.L = std::min(a.parity_layers, s.L);
    for (const ModelShape* m : {&ps, &llama}) {
      try {
        check_logits(c, m->arch, make_random_gguf(*m, a.seed, 0), a.steps, j);
      } catch (const std::exception& e) {
        c.add(m->arch + " logit parity raised: " + e.what(), false, NAN);
      }
    }
    if (!a.engine_gguf.empty()) {
      try {
        check_engine(c, a.engine_gguf, j);
      } catch (const std::exception& e) {
        c.add(std::string("engine check raised: ") + e.what(), false, NAN);
      }
    }
    j.raw("checks", c.list + "]").num("checks_failed", c.failed).num("checks_s", now_s() - t0);
  }
  if (a.only.empty() || a.only == "bench") {
    std::string results = "[]";
    try {
      const double g0 = now_s();
      std::vector<uint8_t> img;
      std::shared_ptr<GgufFile> f;
      if (!a.gguf.empty()) {
        f = GgufFile::open(a.gguf);
      } else {
        img = make_random_gguf(s, a.seed, 0);
        f = GgufFile::parse(img.data(), img.size());
      }
      const int maxB = *std::max_element(a.batches.begin(), a.batches.end());
      const int Tm = 2048;
      auto m = Model::load(f, maxB, a.prefill + a.iters + 4, nullptr, Tm, Device::cuda);
      const double wb = step_bytes(*f);
      j.num("load_s", now_s() - g0).num("weight_bytes_per_step", wb).num("bound_ms_per_step_at_4_8_tb_s", wb / kH200Bandwidth * 1e3);
      results = bench(*m, Tm, wb, a);
      j.num("graph_captures", (double)m->graph_captures());
    } catch (const std::exception& e) {
      errors += std::string("bench: ") + e.what();
    }
    j.raw("bench", results);
  }
  if (!errors.empty()) j.str("error", errors);
  j.str("status", c.failed ? "checks_failed" : !errors.empty() ? "error" : "ok");
  std::printf("%s\n", j.done().c_str());
  return c.failed || !errors.empty() ? 1 : 0;
}

}  // namespace harness
}  // namespace mb
