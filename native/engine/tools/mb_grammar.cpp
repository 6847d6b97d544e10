// mb_grammar: a command-line window onto the grammar engine (grammar.h).
//
//   mb_grammar check GRAMMAR_FILE       stdin: one hex-encoded byte string per line; stdout per
//                                       line: "1" accepted and complete, "p" a valid prefix
//                                       only, "0" rejected. Exit 2 with the message on stderr
//                                       if the grammar does not compile.
//   mb_grammar bench GGUF GRAMMAR_FILE TEXT_FILE
//                                       tokenizes TEXT_FILE (which the grammar must accept) with
//                                       the model's tokenizer and times, per token, the full
//                                       mask (trie walk) and the single-token check of the greedy
//                                       fast path. Prints the trie size and mean/max per step.
//
// Dimension legend: V n_vocab, N trie nodes.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "../../gguf/gguf.h"
#include "../../tokenizer/tokenizer.h"
#include "../grammar.h"

static std::string slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(std::string("cannot read ") + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static int hexv(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int check(const char* grammar_path) {
  std::shared_ptr<const mb::Grammar> g;
  try {
    g = mb::Grammar::parse(slurp(grammar_path));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::string bytes;
    for (size_t i = 0; i + 1 < line.size(); i += 2) bytes += char(hexv(line[i]) * 16 + hexv(line[i + 1]));
    mb::GrammarMatcher m(g);
    const bool ok = m.accept(bytes);
    std::cout << (!ok ? "0" : m.complete() ? "1" : "p") << "\n";
  }
  return 0;
}

static int bench(const char* gguf_path, const char* grammar_path, const char* text_path) {
  using Clock = std::chrono::steady_clock;
  auto file = mb::GgufFile::open(gguf_path);
  auto tok = mb::Tokenizer::from_gguf(*file);
  const int32_t nv = tok->n_vocab();
  auto t0 = Clock::now();
  std::vector<std::string> pieces(static_cast<size_t>(nv));
  std::vector<uint8_t> eog(static_cast<size_t>(nv), 0);
  for (int32_t i = 0; i < nv; i++) {
    pieces[size_t(i)] = tok->piece(i, false);
    eog[size_t(i)] = tok->is_eog(i) ? 1 : 0;
  }
  auto trie = std::make_shared<const mb::TokenTrie>(pieces, eog);
  const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  auto g = mb::Grammar::parse(slurp(grammar_path));
  const std::string text = slurp(text_path);
  const auto ids = tok->encode(text, false, false);
  mb::GrammarConstraint c(g, trie);
  std::vector<float> logits(static_cast<size_t>(nv));
  double sum_mask = 0, max_mask = 0, sum_one = 0;
  size_t allowed_sum = 0;
  for (size_t k = 0; k < ids.size(); k++) {
    std::fill(logits.begin(), logits.end(), 0.f);
    auto a = Clock::now();
    c.mask(logits.data(), nv);
    auto b = Clock::now();
    const bool ok = c.allows(ids[k]);
    auto e = Clock::now();
    const double ms = std::chrono::duration<double, std::milli>(b - a).count();
    sum_mask += ms;
    max_mask = std::max(max_mask, ms);
    sum_one += std::chrono::duration<double, std::milli>(e - b).count();
    for (float l : logits) allowed_sum += l == 0.f ? 1 : 0;
    if (!ok || !c.accept(ids[k])) {
      std::fprintf(stderr, "the grammar rejects token %zu (id %d, %s)\n", k, ids[k], tok->piece(ids[k], false).c_str());
      return 1;
    }
  }
  const double n = double(ids.size());
  std::printf("vocab %d, trie nodes %zu, trie build %.1f ms\n", nv, trie->n_nodes(), build_ms);
  std::printf("%zu tokens: mask mean %.3f ms (max %.3f ms), single-token check mean %.4f ms, allowed tokens mean %.0f, states %zu, complete %d\n",
              ids.size(), sum_mask / n, max_mask, sum_one / n, double(allowed_sum) / n, c.matcher().n_states(),
              c.matcher().complete() ? 1 : 0);
  return 0;
}

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "check") return check(argv[2]);
    if (argc == 5 && std::string(argv[1]) == "bench") return bench(argv[2], argv[3], argv[4]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mb_grammar: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: mb_grammar check GRAMMAR_FILE < hex-lines\n       mb_grammar bench GGUF GRAMMAR_FILE TEXT_FILE\n");
  return 2;
}
