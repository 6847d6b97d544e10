// Tokenizer built from the GGUF vocabulary (tokenizer.ggml.*). Token ids must equal llama.cpp's.
#pragma once
#include <cstdint>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mb {
class GgufFile;

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);  // throws on unsupported model/pre
  virtual ~Tokenizer() = default;

  // add_special: add BOS/EOS as the vocab's add_bos_token/add_eos_token say.
  // parse_special: text like "<|im_start|>" becomes its control token instead of plain text.
  // Time is linear in the text: a pre-token (or SentencePiece run) longer than kMaxMergeBytes
  // is merged in pieces of about that size (tokenizer.cpp).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const = 0;

  // A byte range [begin, end) of the text to encode.
  struct Span {
    size_t begin, end;
  };
  // As above, and `literal` ranges stay plain text even with parse_special: what a user wrote
  // inside a rendered chat template, so that typing "<|im_end|>" cannot forge a turn boundary.
  // A control token's text that overlaps one is not matched; all else tokenizes as without them.
  // Encoding may stop once `limit` tokens are out (a prompt that cannot fit the context need not
  // be tokenized to the end): a result of `limit` or more tokens is then a prefix of the whole.
  // (This fallback, for tokenizers that do not implement it, parses no control tokens at all.)
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                                      const std::vector<Span>& literal, size_t limit = SIZE_MAX) const {
    (void)limit;
    return encode(text, add_special, parse_special && literal.empty());
  }
  // Tokens whose text becomes the token only with parse_special (control and unknown tokens):
  // the texts a chat prompt must keep users from typing into its structure.
  virtual std::vector<int32_t> control_ids() const { return {}; }
  // encode() with add_special starts with BOS (the vocab's add_bos_token or its type's default).
  virtual bool adds_bos() const { return false; }

  // Raw bytes of one token (byte tokens and the gpt2 byte-to-unicode map already undone).
  // Control tokens render as their text only when render_special is true.
  virtual std::string piece(int32_t id, bool render_special) const = 0;

  virtual int32_t n_vocab() const = 0;
  virtual int32_t bos() const = 0;   // -1 if none
  virtual int32_t eos() const = 0;
  virtual bool is_eog(int32_t id) const = 0;  // eos, eot, <|im_end|>, <|endoftext|> ...
  virtual std::string token_text(int32_t id) const = 0;  // the vocab string as stored
};

// Incremental, UTF-8 safe detokenizer: push token pieces, get back only complete code points.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);  // returns the complete prefix, keeps the rest
  std::string flush();                       // whatever is left (replaced by U+FFFD if invalid)
 private:
  std::string pending_;
};
}  // namespace mb
