// Internal to mb_tokenizer: codepoint categories and lenient UTF-8 coding. The decoder mirrors
// llama.cpp's on purpose (no overlong/surrogate rejection; a bad lead or continuation byte becomes
// U+FFFD and consumes one byte), because pre-tokenization must see exactly the same codepoints.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mb::uni {

// Top-level Unicode general category; kUndefined is Cn (unassigned).
enum CptCat : uint8_t {
  kUndefined = 0, kNumber = 1, kLetter = 2, kSeparator = 3, kMark = 4, kPunct = 5, kSymbol = 6, kControl = 7,
};

extern const uint32_t kCategoryRuns[];
extern const size_t kCategoryRunsCount;
extern const char kUnicodeVersion[];

CptCat category(uint32_t cp);
// The White_Space property (what \s means for the tokenizer regexes).
bool is_whitespace(uint32_t cp);

inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes one codepoint at off and advances off.
uint32_t decode_one(std::string_view s, size_t& off);
std::vector<uint32_t> decode(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);

}  // namespace mb::uni
