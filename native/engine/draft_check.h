// Whether one model can draft for another (speculative decoding with a draft model): the
// scheduler feeds the draft model the target's token ids and verifies its guesses as the
// target's, so both must mean the same thing by every id, and the draft model must be able to
// take the whole context and drop rejected positions. Checked once at load, before serving.
#pragma once
#include <string>

namespace mb {
class Tokenizer;

// "" when the two vocabularies agree: the same size, the same text for every token, the same
// BOS, EOS, end-of-generation and control tokens, the same add-BOS rule. Otherwise the first
// difference, naming the models as given, e.g. "their vocabularies differ in size (49152 tokens
// in smollm2-135m, 151936 in qwen2.5-coder-0.5b)".
std::string vocabulary_mismatch(const Tokenizer& target, const Tokenizer& draft, const std::string& target_name,
                                const std::string& draft_name);

}  // namespace mb
