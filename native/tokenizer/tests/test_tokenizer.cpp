// Native tokenizer checks that need no model: Unicode tables, the pre-tokenizer splits on
// hand-checked inputs, and Utf8Stream. Parity with llama.cpp on real vocabularies is tested in
// test/oracle/tokenizer.test.ts.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "pretokenize.h"
#include "tokenizer.h"
#include "unicode.h"
#include "../../util/tests/check.h"

using namespace mb;

namespace {
std::vector<std::string> words(const std::string& s, std::vector<pretok::Split> sp) {
  return pretok::split_words(s, sp);
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}
}  // namespace

int main() {
  // Categories.
  CHECK(uni::category('a') == uni::kLetter);
  CHECK(uni::category('7') == uni::kNumber);
  CHECK(uni::category(' ') == uni::kSeparator);
  CHECK(uni::category('!') == uni::kPunct);
  CHECK(uni::category('$') == uni::kSymbol);
  CHECK(uni::category(0x4E2D) == uni::kLetter);   // 中
  CHECK(uni::category(0x0661) == uni::kNumber);   // Arabic-Indic one
  CHECK(uni::category(0x0301) == uni::kMark);     // combining acute
  CHECK(uni::category(0x1F600) == uni::kSymbol);  // 😀
  CHECK(uni::category(0x0378) == uni::kUndefined);
  // Unicode 15.1 assignments, as in llama.cpp's tables (CJK Ext I, Kaktovik numeral).
  CHECK(uni::category(0x2EBF0) == uni::kLetter);
  CHECK(uni::category(0x1D2C0) == uni::kNumber);
  CHECK(uni::category(0x10FFFF) == uni::kUndefined);
  CHECK(uni::category(0x200000) == uni::kUndefined);
  CHECK(uni::is_whitespace(0x3000) && uni::is_whitespace('\n') && !uni::is_whitespace(0x200B));

  using S = pretok::Split;
  // gpt2: contractions, optional leading space, whitespace runs give their last space away.
  CHECK((words("I'm  fine 123!!", {S::kGpt2}) ==
         std::vector<std::string>{"I", "'m", " ", " fine", " 123", "!!"}));
  CHECK((words("a\n\n b", {S::kGpt2}) == std::vector<std::string>{"a", "\n\n", " b"}));
  // smollm: digits split one by one first.
  CHECK((words("x 2024", {S::kEachDigit, S::kGpt2}) == std::vector<std::string>{"x", " ", "2", "0", "2", "4"}));
  // llama3: up to 3 digits, case-insensitive contractions, newline runs.
  CHECK((words("12345 IT'S\n\nok", {S::kLlama3}) ==
         std::vector<std::string>{"123", "45", " IT", "'S", "\n\n", "ok"}));
  CHECK((words("12345", {S::kQwen2}) == std::vector<std::string>{"1", "2", "3", "4", "5"}));
  // Invalid UTF-8 turns into U+FFFD like llama.cpp.
  CHECK((words("a\xFF", {S::kGpt2}) == std::vector<std::string>{"a", "\xEF\xBF\xBD"}));

  // Utf8Stream: feed random valid text split at every byte boundary pattern; the concatenated
  // output must equal the input and every push must be valid UTF-8 on its own.
  const std::string sample = "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D!";
  std::mt19937 rng(7);
  for (int it = 0; it < 2000; ++it) {
    Utf8Stream st;
    std::string acc;
    size_t i = 0;
    while (i < sample.size()) {
      size_t k = 1 + rng() % 4;
      std::string part = st.push(std::string_view(sample).substr(i, k));
      CHECK(valid_utf8(part));
      acc += part;
      i += k;
    }
    acc += st.flush();
    CHECK(acc == sample);
    if (g_failures) break;
  }
  {
    Utf8Stream st;
    CHECK(st.push("\xE4\xB8") == "");
    CHECK(st.flush() == "\xEF\xBF\xBD");
    CHECK(st.push("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
    CHECK(st.push("\xF0\x9F") == "" && st.push("\x98") == "" && st.push("\x80z") == "\xF0\x9F\x98\x80z");
    CHECK(st.push("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogates never complete
  }

  TEST_MAIN_END();
}
