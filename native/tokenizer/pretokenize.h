// Internal to mb_tokenizer: the pre-tokenizer splits llama.cpp applies before BPE, as hand-written
// matchers over codepoints. A split takes the current chunks (lengths in codepoints, summing to
// the text) and splits each further; text between matches is kept as its own chunk, as
// llama.cpp's regex split does.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mb::pretok {

using Chunks = std::vector<size_t>;  // lengths in codepoints

enum class Split {
  kGpt2,        // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  kLlama3,      // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,       // as kLlama3 but \p{N} (one digit per chunk)
  kQwen35,      // as kQwen2 but letter runs also take marks: [\p{L}\p{M}]+
  kEachDigit,   // \p{N}
  kDigitRuns,   // \p{N}+
  kPunctRuns,   // [\p{P}\$\+<=>\^~\|]+
  kAsciiDigit3, // [0-9][0-9][0-9]
};

Chunks apply(const std::vector<uint32_t>& cpts, const Chunks& in, Split s);

// Splits text into words (UTF-8, invalid input replaced by U+FFFD as llama.cpp does).
std::vector<std::string> split_words(const std::string& text, const std::vector<Split>& splits);

}  // namespace mb::pretok
