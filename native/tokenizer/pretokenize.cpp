#include "pretokenize.h"

#include "unicode.h"

namespace mb::pretok {
namespace {

using uni::CptCat;

// Flags of the codepoint at pos, or "none" outside the chunk (so lookahead stops at chunk ends,
// exactly like a regex run on each chunk separately).
struct View {
  const std::vector<uint32_t>& cpts;
  size_t ini, end;
  static constexpr uint32_t kOut = 0xFFFFFFFF;
  uint32_t cpt(size_t p) const { return p >= ini && p < end ? cpts[p] : kOut; }
  bool in(size_t p) const { return p >= ini && p < end; }
  bool letter(size_t p) const { return in(p) && uni::category(cpts[p]) == uni::kLetter; }
  bool number(size_t p) const { return in(p) && uni::category(cpts[p]) == uni::kNumber; }
  bool mark(size_t p) const { return in(p) && uni::category(cpts[p]) == uni::kMark; }
  bool space(size_t p) const { return in(p) && uni::is_whitespace(cpts[p]); }
  // [^\s\p{L}\p{N}] (and, for qwen35, not \p{M}) — only inside the chunk.
  bool other(size_t p, bool marks_are_letters) const {
    if (!in(p)) return false;
    uint32_t c = cpts[p];
    if (uni::is_whitespace(c)) return false;
    CptCat k = uni::category(c);
    return k != uni::kLetter && k != uni::kNumber && !(marks_are_letters && k == uni::kMark);
  }
};

inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length of a contraction ('s 't 're 've 'm 'll 'd) at pos, 0 if none.
size_t contraction(const View& v, size_t pos, bool any_case) {
  if (v.cpt(pos) != '\'' || pos + 1 >= v.end) return 0;
  uint32_t a = v.cpt(pos + 1);
  if (any_case) a = ascii_lower(a);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= v.end) return 0;
  uint32_t b = v.cpt(pos + 2);
  if (any_case) b = ascii_lower(b);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

void gpt2(const View& v, Chunks& out) {
  size_t pos = v.ini;
  auto emit = [&](size_t e) { if (e > pos) out.push_back(e - pos); pos = e; };
  while (pos < v.end) {
    if (size_t n = contraction(v, pos, false)) { emit(pos + n); continue; }
    size_t q = pos + (v.cpt(pos) == ' ' ? 1 : 0);  // optional leading space
    if (v.letter(q)) { while (v.letter(q)) ++q; emit(q); continue; }
    if (v.number(q)) { while (v.number(q)) ++q; emit(q); continue; }
    if (v.other(q, false)) { while (v.other(q, false)) ++q; emit(q); continue; }
    size_t ws = 0;
    while (v.space(pos + ws)) ++ws;
    // \s+(?!\S): a whitespace run followed by more text gives its last char to the next word.
    if (ws > 1 && v.in(pos + ws)) { emit(pos + ws - 1); continue; }
    if (ws > 0) { emit(pos + ws); continue; }
    emit(pos + 1);
  }
}

void llama3_family(const View& v, Chunks& out, size_t max_digits, bool marks) {
  size_t pos = v.ini;
  auto emit = [&](size_t e) { if (e > pos) out.push_back(e - pos); pos = e; };
  auto wordch = [&](size_t p) { return v.letter(p) || (marks && v.mark(p)); };
  while (pos < v.end) {
    uint32_t c = v.cpt(pos);
    if (size_t n = contraction(v, pos, true)) { emit(pos + n); continue; }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(c == '\r' || c == '\n' || v.number(pos))) {
      if (wordch(pos) || wordch(pos + 1)) {
        size_t q = pos + 1;
        while (wordch(q)) ++q;
        emit(q);
        continue;
      }
    }
    // \p{N}{1,max}
    if (v.number(pos)) {
      size_t q = pos;
      while (v.number(q) && q - pos < max_digits) ++q;
      emit(q);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'; a lone trailing space falls through to the \s+ case below,
    // which yields the same one-codepoint word.
    size_t q = pos + (c == ' ' ? 1 : 0);
    if (v.other(q, marks)) {
      while (v.other(q, marks)) ++q;
      while (v.cpt(q) == '\r' || v.cpt(q) == '\n') ++q;
      emit(q);
      continue;
    }
    size_t ws = 0, last_nl = 0;
    while (v.space(pos + ws)) {
      uint32_t w = v.cpt(pos + ws);
      if (w == '\r' || w == '\n') last_nl = pos + ws + 1;
      ++ws;
    }
    if (last_nl > 0) { emit(last_nl); continue; }  // \s*[\r\n]+
    if (ws > 1 && v.in(pos + ws)) { emit(pos + ws - 1); continue; }
    if (ws > 0) { emit(pos + ws); continue; }
    emit(pos + 1);
  }
}

// Splits out maximal runs (or single codepoints) matching pred; the rest stays as chunks.
template <class Pred>
void runs(const View& v, Chunks& out, Pred pred, bool single) {
  size_t prev = v.ini, pos = v.ini;
  while (pos < v.end) {
    if (!pred(v.cpts[pos])) { ++pos; continue; }
    if (pos > prev) out.push_back(pos - prev);
    size_t q = pos + 1;
    if (!single) while (q < v.end && pred(v.cpts[q])) ++q;
    out.push_back(q - pos);
    prev = pos = q;
  }
  if (v.end > prev) out.push_back(v.end - prev);
}

void ascii_digit3(const View& v, Chunks& out) {
  auto d = [&](size_t p) { return p < v.end && v.cpts[p] >= '0' && v.cpts[p] <= '9'; };
  size_t prev = v.ini, pos = v.ini;
  while (pos < v.end) {
    if (d(pos) && d(pos + 1) && d(pos + 2)) {
      if (pos > prev) out.push_back(pos - prev);
      out.push_back(3);
      prev = pos = pos + 3;
    } else {
      ++pos;
    }
  }
  if (v.end > prev) out.push_back(v.end - prev);
}

bool is_number(uint32_t c) { return uni::category(c) == uni::kNumber; }
bool is_punct_class(uint32_t c) {
  if (c < 0x80) {
    switch (c) {
      case '$': case '+': case '<': case '=': case '>': case '^': case '~': case '|': return true;
      default: break;
    }
  }
  // Whitespace is tested first because llama.cpp collapses any non-ASCII space before categories.
  if (c >= 0x80 && uni::is_whitespace(c)) return false;
  return uni::category(c) == uni::kPunct;
}

}  // namespace

Chunks apply(const std::vector<uint32_t>& cpts, const Chunks& in, Split s) {
  Chunks out;
  out.reserve(in.size() * 2);
  size_t start = 0;
  for (size_t len : in) {
    View v{cpts, start, start + len};
    switch (s) {
      case Split::kGpt2: gpt2(v, out); break;
      case Split::kLlama3: llama3_family(v, out, 3, false); break;
      case Split::kQwen2: llama3_family(v, out, 1, false); break;
      case Split::kQwen35: llama3_family(v, out, 1, true); break;
      case Split::kEachDigit: runs(v, out, is_number, true); break;
      case Split::kDigitRuns: runs(v, out, is_number, false); break;
      case Split::kPunctRuns: runs(v, out, is_punct_class, false); break;
      case Split::kAsciiDigit3: ascii_digit3(v, out); break;
    }
    start += len;
  }
  return out;
}

std::vector<std::string> split_words(const std::string& text, const std::vector<Split>& splits) {
  std::vector<uint32_t> cpts = uni::decode(text);
  Chunks chunks{cpts.size()};
  for (Split s : splits) chunks = apply(cpts, chunks, s);
  std::vector<std::string> words;
  words.reserve(chunks.size());
  size_t p = 0;
  for (size_t len : chunks) {
    std::string w;
    for (size_t i = p; i < p + len; ++i) uni::append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
    p += len;
  }
  return words;
}

}  // namespace mb::pretok
