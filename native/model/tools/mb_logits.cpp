// mb_logits: run token ids through Model::forward without Node or a tokenizer.
//   mb_logits MODEL --tokens 1,2,3 [--out FILE] [--positions last|all|i,j,..] [--greedy N]
//             [--threads N] [--ctx C] [--batch B]
//   mb_logits MODEL --info      (one JSON line: arch and dimensions)
//   mb_logits MODEL --bench [--threads N] [--prefill 512] [--decode 128] [--batch B] [--reps R]
//     prefill goes through one forward() split into chunks of B (512, as the engine's max batch);
//     R timed prefills (after one warm-up unless --no-warmup), each number reported and the median.
//     --rows N: each decode step is N rows at consecutive positions, all with logits (a
//     speculative verification's shape; 1: plain decode), timed per step.
// The prompt goes through one forward() (in chunks of B). Without --greedy, --out receives the
// logits of --positions as raw float32 [rows, V]. With --greedy N, N tokens are decoded one at a
// time (T = 1), their ids printed on one line, and --out receives the N distributions they were
// chosen from (row 0 from the prompt's last position). --force IDS feeds IDS[s] instead of the
// argmax at step s (teacher forcing: compare against another engine's continuation); the printed
// ids are still this model's argmax picks.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "util/threadpool.h"

namespace {

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    v.push_back(std::stoi(item));
  }
  return v;
}

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int usage() {
  std::fprintf(stderr,
               "usage: mb_logits MODEL --tokens IDS [--out FILE] [--positions last|all|I,J] [--greedy N]\n"
               "                 [--threads N] [--ctx C] [--batch B]\n"
               "       mb_logits MODEL --info\n"
               "       mb_logits MODEL --bench [--threads N] [--prefill T] [--decode N] [--batch B] [--reps R] [--no-warmup] [--rows N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string path = argv[1], out_path, positions = "last";
  std::vector<int> tokens, force;
  int greedy = 0, threads = 2, ctx = 0, batch = 512, prefill = 512, decode = 128, reps = 1, rows = 1;
  bool bench = false, info = false, warmup = true;
  for (int i = 2; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "mb_logits: %s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--tokens") tokens = parse_ints(next());
    else if (a == "--out") out_path = next();
    else if (a == "--force") force = parse_ints(next());
    else if (a == "--positions") positions = next();
    else if (a == "--greedy") greedy = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--ctx") ctx = std::stoi(next());
    else if (a == "--batch") batch = std::stoi(next());
    else if (a == "--bench") bench = true;
    else if (a == "--info") info = true;
    else if (a == "--prefill") prefill = std::stoi(next());
    else if (a == "--decode") decode = std::stoi(next());
    else if (a == "--rows") rows = std::max(1, std::stoi(next()));
    else if (a == "--reps") reps = std::max(1, std::stoi(next()));
    else if (a == "--no-warmup") warmup = false;
    else return usage();
  }
  try {
    std::shared_ptr<mb::GgufFile> file = mb::GgufFile::open(path);
    mb::ThreadPool pool(threads);
    if (info) {
      auto model = mb::Model::load(file, 1, 1, &pool, 1);
      const mb::ModelConfig& c = model->config();
      std::printf("{\"arch\":\"%s\",\"n_vocab\":%d,\"n_layer\":%d,\"n_embd\":%d,\"n_head\":%d,\"n_head_kv\":%d,"
                  "\"head_dim\":%d,\"n_ff\":%d,\"n_expert\":%d,\"n_expert_used\":%d}\n",
                  c.arch.c_str(), c.n_vocab, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff,
                  c.n_expert, c.n_expert_used);
      return 0;
    }
    if (bench) {
      if (ctx == 0) ctx = prefill + decode * rows + 1;
      auto model = mb::Model::load(file, 1, ctx, &pool, batch);
      const int V = model->config().n_vocab;
      std::vector<float> logits((size_t)V * rows);
      mb::Batch b;
      for (int t = 0; t < prefill; t++) {
        b.token.push_back((t * 7919 + 13) % V);
        b.pos.push_back(t);
        b.slot.push_back(0);
        b.logits.push_back(t == prefill - 1);
      }
      // one untimed warm-up pass faults in the mapping and the caches
      if (warmup) {
        model->forward(b, logits.data());
        model->kv_truncate(0, 0);
      }
      std::vector<double> times;
      for (int r = 0; r < reps; r++) {
        model->kv_truncate(0, 0);
        const double t0 = now_s();
        model->forward(b, logits.data());
        times.push_back(now_s() - t0);
        std::fprintf(stderr, "prefill T=%d rep %d: %.3f s (%.1f tok/s)\n", prefill, r, times.back(), prefill / times.back());
      }
      std::sort(times.begin(), times.end());
      const double pre = times[times.size() / 2];
      int tok = argmax(logits.data(), V);
      double t0 = now_s();
      double best_step = 1e30;
      for (int s = 0; s < decode; s++) {
        mb::Batch d;
        for (int r = 0; r < rows; r++) {
          d.token.push_back(r == 0 ? tok : (tok + 17 * r) % V);
          d.pos.push_back(prefill + s * rows + r);
          d.slot.push_back(0);
          d.logits.push_back(1);
        }
        const double s0 = now_s();
        model->forward(d, logits.data());
        best_step = std::min(best_step, now_s() - s0);
        tok = argmax(logits.data(), V);
      }
      const double dec = now_s() - t0;
      std::printf("threads %d  prefill T=%d (chunks of %d): %.1f tok/s (%.3f s, median of %d)  decode %d steps of %d rows: %.1f steps/s (%.2f ms/step, fastest %.2f)\n",
                  threads, prefill, batch, prefill / pre, pre, reps, decode, rows, decode > 0 ? decode / dec : 0.0,
                  decode > 0 ? 1000.0 * dec / decode : 0.0, decode > 0 ? 1000.0 * best_step : 0.0);
      return 0;
    }
    if (tokens.empty()) return usage();
    const int T = (int)tokens.size();
    if (ctx == 0) ctx = T + greedy + 1;
    auto model = mb::Model::load(file, 1, ctx, &pool, batch);
    const int V = model->config().n_vocab;
    mb::Batch b;
    b.token.assign(tokens.begin(), tokens.end());
    for (int t = 0; t < T; t++) {
      b.pos.push_back(t);
      b.slot.push_back(0);
    }
    b.logits.assign(T, 0);
    if (greedy > 0 || positions == "last") b.logits[T - 1] = 1;
    else if (positions == "all") b.logits.assign(T, 1);
    else
      for (int p : parse_ints(positions)) {
        if (p < 0 || p >= T) throw std::out_of_range("position " + std::to_string(p) + " outside the prompt");
        b.logits[p] = 1;
      }
    const int rows = (int)std::count(b.logits.begin(), b.logits.end(), 1);
    std::vector<float> logits((size_t)std::max(rows, greedy) * V);
    model->forward(b, logits.data());
    if (greedy > 0) {
      for (int s = 0; s < greedy; s++) {
        const int tok = argmax(&logits[(size_t)s * V], V);
        std::printf(s ? " %d" : "%d", tok);
        if (s + 1 == greedy) break;
        mb::Batch d;
        d.token = {s < (int)force.size() ? force[s] : tok};
        d.pos = {T + s};
        d.slot = {0};
        d.logits = {1};
        model->forward(d, &logits[(size_t)(s + 1) * V]);
      }
      std::printf("\n");
    }
    if (!out_path.empty()) {
      std::ofstream f(out_path, std::ios::binary);
      f.write(reinterpret_cast<const char*>(logits.data()), (std::streamsize)(logits.size() * sizeof(float)));
      if (!f) throw std::runtime_error("cannot write " + out_path);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mb_logits: %s\n", e.what());
    return 1;
  }
}
