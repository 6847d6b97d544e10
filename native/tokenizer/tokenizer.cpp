// Tokenizer over the GGUF vocabulary. Behaviour follows llama.cpp's llama-vocab exactly where it
// affects token ids (special-token partitioning, pre-tokenizer splits, BPE merge order, SPM score
// order and byte fallback, BOS/EOS rules), because prompts must hit the same KV prefix and the
// same logits as the reference engine.
#include "tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "gguf.h"
#include "pretokenize.h"
#include "unicode.h"

namespace mb {
namespace {

// llama.cpp token attributes (derived from tokenizer.ggml.token_type).
enum Attr : uint32_t {
  kAttrUnknown = 1u << 0, kAttrUnused = 1u << 1, kAttrNormal = 1u << 2, kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4, kAttrByte = 1u << 5, kAttrLstrip = 1u << 7, kAttrRstrip = 1u << 8,
  // Not llama.cpp's: a control token it turns user-defined so that it renders (harmony's message
  // scaffolding). Still listed by control_ids(), so request text that spells one stays plain.
  kAttrRenderedControl = 1u << 16,
};

// isspace() in the C locale, which is what llama.cpp strips around special tokens.
inline bool c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

uint32_t attr_from_type(int64_t t) {
  switch (t) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return 0;  // undefined
  }
}

// Texts llama.cpp treats as end-of-generation (and forces to control type) when present.
const char* const kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[",
};
// FIM pad/repo/file-separator tokens also end generation in llama.cpp.
const char* const kFimEogTexts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
    "<|file_sep|>",
};

struct Frag {
  int32_t tok;  // -1: raw text [off, off+len)
  size_t off, len;
};

// BPE merging keeps a heap of candidate pairs, O(n log n) in the length of what it merges, and
// llama.cpp runs it over whole pre-tokens: one 30 MB "word" took 19 s and 1.3 GB. Longer runs are
// merged in pieces of this many bytes instead (time linear, memory bounded). Only a single pre-token
// this long can tokenize differently from llama.cpp (at the piece edges); SentencePiece text,
// which has no pre-tokenizer, is cut before a word-initial space, where no token spans the cut.
constexpr size_t kMaxMergeBytes = 64 << 10;

// Where to end a piece of at most kMaxMergeBytes starting at `from`: not inside a UTF-8 sequence.
size_t piece_end(std::string_view s, size_t from) {
  size_t end = from + kMaxMergeBytes;
  if (end >= s.size()) return s.size();
  while (end > from + 1 && (static_cast<uint8_t>(s[end]) & 0xC0) == 0x80) --end;
  return end;
}

class VocabTokenizer final : public Tokenizer {
 public:
  explicit VocabTokenizer(const GgufFile& f);

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override {
    return encode(text, add_special, parse_special, {}, SIZE_MAX);
  }
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                              const std::vector<Span>& literal, size_t limit) const override;
  std::vector<int32_t> control_ids() const override {
    std::vector<int32_t> ids;
    for (int32_t id : special_)
      if (attr_[static_cast<size_t>(id)] & (kAttrControl | kAttrUnknown | kAttrRenderedControl)) ids.push_back(id);
    return ids;
  }
  bool adds_bos() const override { return add_bos_ && bos_ >= 0; }
  std::string piece(int32_t id, bool render_special) const override;
  int32_t n_vocab() const override { return static_cast<int32_t>(text_.size()); }
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }
  bool is_eog(int32_t id) const override {
    return id >= 0 && id < n_vocab() && eog_[static_cast<size_t>(id)];
  }
  std::string token_text(int32_t id) const override {
    return id >= 0 && id < n_vocab() ? text_[static_cast<size_t>(id)] : std::string();
  }

 private:
  enum class Kind { kBpe, kSpm };
  struct Merge { int32_t rank; int32_t result; };
  struct Sym { int32_t id; int32_t prev, next; uint32_t off, n; };
  struct Bigram {
    // Ordered so std::priority_queue pops the lowest rank (BPE) or highest score (SPM), then
    // the leftmost pair: the same order llama.cpp merges in.
    float key;
    int32_t left, right;
    uint32_t size;
    int32_t result;
    bool operator<(const Bigram& o) const { return key < o.key || (key == o.key && left > o.left); }
  };

  int32_t lookup(std::string_view s) const {
    auto it = to_id_.find(s);
    return it == to_id_.end() ? -1 : it->second;
  }
  std::vector<Frag> partition(std::string_view text, bool parse_special, const std::vector<Span>& literal) const;
  void bpe_word(const std::string& word, std::vector<int32_t>& out, size_t limit) const;
  void bpe_merge(std::string_view word, std::vector<int32_t>& out) const;
  void spm_fragment(std::string_view raw, bool prefix_space, std::vector<int32_t>& out, size_t limit) const;
  void spm_merge(std::string_view text, std::vector<int32_t>& out) const;
  int32_t spm_byte_token(uint8_t b) const;
  std::string compute_piece(int32_t id) const;

  Kind kind_;
  std::vector<std::string> text_;        // [V] vocab strings as stored
  std::vector<uint32_t> attr_;           // [V]
  std::vector<float> score_;             // [V]
  std::vector<uint8_t> eog_;             // [V]
  std::vector<std::string> piece_;       // [V] rendered bytes (control tokens as text)
  std::unordered_map<std::string_view, int32_t> to_id_;  // views into text_
  std::vector<int32_t> special_;         // control/user-defined/unknown ids, longest text first

  // BPE
  std::vector<pretok::Split> splits_;
  std::unordered_map<uint64_t, Merge> merges_;             // (left id, right id) -> rank, result
  std::unordered_map<std::string, int32_t> merges_text_;   // merges whose halves are not tokens
  std::string byte_char_[256];           // gpt2 byte -> printable codepoint (UTF-8)
  int32_t byte_char_id_[256];            // token id of byte_char_, -1 if absent
  int16_t char_byte_[0x144];             // inverse map, codepoint -> byte, -1 if none
  bool ignore_merges_ = false;

  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
};

VocabTokenizer::VocabTokenizer(const GgufFile& f) {
  std::string model = f.get_str("tokenizer.ggml.model", "");
  std::string pre = f.get_str("tokenizer.ggml.pre", "");
  if (model == "gpt2") {
    kind_ = Kind::kBpe;
    bos_ = eos_ = 11;  // llama.cpp's defaults for BPE vocabularies without explicit ids
    if (pre.empty() || pre == "default") {
      splits_ = {pretok::Split::kPunctRuns, pretok::Split::kGpt2, pretok::Split::kDigitRuns,
                 pretok::Split::kAsciiDigit3};
    } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" ||
               pre == "falcon-h1" || pre == "pixtral" || pre == "midm-2.0" || pre == "lfm2") {
      splits_ = {pretok::Split::kLlama3};
      ignore_merges_ = true;
      add_bos_ = true;
    } else if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2") {
      splits_ = {pretok::Split::kQwen2};
    } else if (pre == "qwen35") {
      splits_ = {pretok::Split::kQwen35};
    } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
               pre == "codeshell" || pre == "exaone") {
      splits_ = {pretok::Split::kEachDigit, pretok::Split::kGpt2};
    } else if (pre == "gpt-2" || pre == "gpt2" || pre == "phi-2" || pre == "mpt" || pre == "olmo" ||
               pre == "exaone4") {
      splits_ = {pretok::Split::kGpt2};
    } else {
      throw GgufError("tokenizer: unsupported pre-tokenizer '" + pre + "'");
    }
  } else if (model == "llama") {
    kind_ = Kind::kSpm;
    bos_ = 1;
    eos_ = 2;
    unk_ = 0;
    add_bos_ = true;
    add_space_prefix_ = true;
  } else {
    throw GgufError("tokenizer: unsupported tokenizer model '" + model + "'");
  }
  add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix", add_space_prefix_);

  text_ = f.get_str_array("tokenizer.ggml.tokens");
  const size_t n = text_.size();
  if (n == 0) throw GgufError("tokenizer: tokenizer.ggml.tokens is missing or empty");
  std::vector<double> scores = f.get_float_array("tokenizer.ggml.scores");
  std::vector<int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
  if (!scores.empty() && scores.size() < n) throw GgufError("tokenizer: fewer scores than tokens");
  if (!types.empty() && types.size() < n) throw GgufError("tokenizer: fewer token types than tokens");
  attr_.resize(n);
  score_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (text_[i].empty()) text_[i] = "[EMPTY_" + std::to_string(i) + "]";
    score_[i] = scores.empty() ? 0.f : static_cast<float>(scores[i]);
    attr_[i] = types.empty() ? kAttrNormal : attr_from_type(types[i]);
  }
  to_id_.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) to_id_[text_[i]] = static_cast<int32_t>(i);  // last duplicate wins

  auto id_key = [&](const char* key, int32_t& id) {
    if (!f.has(key)) return;
    int64_t v = f.get_int(key);
    if (v >= 0 && static_cast<size_t>(v) < n) id = static_cast<int32_t>(v);
  };
  if (bos_ >= 0 && static_cast<size_t>(bos_) >= n) bos_ = -1;
  if (eos_ >= 0 && static_cast<size_t>(eos_) >= n) eos_ = -1;
  if (unk_ >= 0 && static_cast<size_t>(unk_) >= n) unk_ = -1;
  id_key("tokenizer.ggml.bos_token_id", bos_);
  id_key("tokenizer.ggml.eos_token_id", eos_);
  id_key("tokenizer.ggml.unknown_token_id", unk_);
  int32_t eot = -1, eom = -1;
  id_key("tokenizer.ggml.eot_token_id", eot);
  id_key("tokenizer.ggml.eom_token_id", eom);
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token", add_bos_);
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token", add_eos_);

  // End-of-generation set and the control-type overrides llama.cpp applies by token text.
  eog_.assign(n, 0);
  for (const char* t : kEogTexts) {
    int32_t id = lookup(t);
    if (id < 0) continue;
    eog_[static_cast<size_t>(id)] = 1;
    attr_[static_cast<size_t>(id)] |= kAttrControl;
  }
  for (const char* t : kFimEogTexts) {
    int32_t id = lookup(t);
    if (id < 0) continue;
    eog_[static_cast<size_t>(id)] = 1;
    attr_[static_cast<size_t>(id)] |= kAttrControl;
  }
  for (int32_t id : {eos_, eot, eom})
    if (id >= 0) eog_[static_cast<size_t>(id)] = 1;
  // o200k_harmony (gpt-oss), as llama.cpp: the message-header tokens always render as text (the
  // output parser reads channels and recipients from them), and where <|return|> and <|call|>
  // end a generation, <|end|> only ends a message (the final answer follows the analysis), so it
  // is not end-of-generation and renders too.
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (int32_t id = lookup(t); id >= 0) attr_[static_cast<size_t>(id)] = kAttrUserDefined | kAttrRenderedControl;
  {
    const int32_t end = lookup("<|end|>"), ret = lookup("<|return|>"), call = lookup("<|call|>");
    const int32_t calls = lookup("<|calls|>"), flush = lookup("<|flush|>");
    auto eog = [&](int32_t id) { return id >= 0 && eog_[static_cast<size_t>(id)]; };
    if (eog(end) && ((eog(ret) && (eog(call) || eog(calls))) || ((eog(call) || eog(calls)) && eog(flush)))) {
      eog_[static_cast<size_t>(end)] = 0;
      attr_[static_cast<size_t>(end)] = kAttrUserDefined | kAttrRenderedControl;
    }
  }

  for (size_t i = 0; i < n; ++i)
    if (attr_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_.push_back(static_cast<int32_t>(i));
  std::stable_sort(special_.begin(), special_.end(),
                   [&](int32_t a, int32_t b) { return text_[a].size() > text_[b].size(); });

  // Per-token strip flags are not in GGUF; llama.cpp sets them by model name. Phi-3's special
  // tokens swallow the whitespace after them (except these three).
  std::string name = f.get_str("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : special_) attr_[static_cast<size_t>(id)] |= kAttrRstrip;
    if (int32_t id = lookup("</s>"); id >= 0) attr_[static_cast<size_t>(id)] |= kAttrRstrip;
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"})
      if (int32_t id = lookup(t); id >= 0) attr_[static_cast<size_t>(id)] &= ~kAttrRstrip;
  }

  if (kind_ == Kind::kBpe) {
    // GPT-2 byte map: printable Latin-1 bytes stand for themselves, the rest are shifted to 256+.
    int next = 0;
    for (int i = 0; i < 0x144; ++i) char_byte_[i] = -1;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + next++);
      byte_char_[b].clear();
      uni::append_utf8(byte_char_[b], cp);
      byte_char_id_[b] = lookup(byte_char_[b]);
      char_byte_[cp] = static_cast<int16_t>(b);
    }
    std::vector<std::string> merges = f.get_str_array("tokenizer.ggml.merges");
    if (merges.empty()) throw GgufError("tokenizer: tokenizer.ggml.merges is missing");
    merges_.reserve(merges.size() * 2);
    std::string joined;
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      size_t sp = m.find(' ', 1);
      std::string a = sp == std::string::npos ? std::string() : m.substr(0, sp);
      std::string b = sp == std::string::npos ? std::string() : m.substr(sp + 1);
      int32_t ia = lookup(a), ib = lookup(b);
      if (ia >= 0 && ib >= 0) {
        uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia)) << 32) | static_cast<uint32_t>(ib);
        merges_.emplace(key, Merge{static_cast<int32_t>(r), lookup(a + b)});  // first rank wins
      } else {
        merges_text_.emplace(a + '\0' + b, static_cast<int32_t>(r));
      }
    }
  }

  piece_.resize(n);
  for (size_t i = 0; i < n; ++i) piece_[i] = compute_piece(static_cast<int32_t>(i));
}

std::string VocabTokenizer::compute_piece(int32_t id) const {
  const std::string& t = text_[static_cast<size_t>(id)];
  uint32_t a = attr_[static_cast<size_t>(id)];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t;
  if (a & kAttrNormal) {
    std::string out;
    if (kind_ == Kind::kSpm) {
      // U+2581 (lower one eighth block) is SentencePiece's space.
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, 3, "\xE2\x96\x81") == 0) { out += ' '; i += 3; }
        else out += t[i++];
      }
      return out;
    }
    size_t off = 0;
    while (off < t.size()) {
      uint32_t cp = uni::decode_one(t, off);
      if (cp < 0x144 && char_byte_[cp] >= 0) {
        out += static_cast<char>(char_byte_[cp]);
      } else {
        // Same marker llama.cpp emits for a codepoint outside the byte map.
        static const char* hex = "0123456789abcdef";
        out += "[UNK_BYTE_0x";
        std::string enc;
        uni::append_utf8(enc, cp);
        for (unsigned char c : enc) { out += hex[c >> 4]; out += hex[c & 15]; }
        out += t;
        out += "]";
      }
    }
    return out;
  }
  if (a & kAttrByte) {
    if (kind_ == Kind::kSpm && t.size() == 6 && t.compare(0, 3, "<0x") == 0)
      return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    return t;
  }
  return std::string();  // unused / undefined tokens render as nothing
}

std::string VocabTokenizer::piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) return std::string();
  if (!render_special && (attr_[static_cast<size_t>(id)] & (kAttrUnknown | kAttrControl))) return std::string();
  return piece_[static_cast<size_t>(id)];
}

std::vector<Frag> VocabTokenizer::partition(std::string_view text, bool parse_special,
                                            const std::vector<Span>& literal) const {
  std::vector<Frag> frags;
  if (text.empty()) return frags;
  // literal: sorted by begin, non-overlapping (encode() normalizes them).
  auto in_literal = [&](size_t b, size_t e) {
    auto it = std::lower_bound(literal.begin(), literal.end(), b, [](const Span& s, size_t v) { return s.end <= v; });
    return it != literal.end() && it->begin < e;
  };
  frags.push_back({-1, 0, text.size()});
  std::vector<Frag> next;
  for (int32_t id : special_) {
    if (!parse_special && (attr_[static_cast<size_t>(id)] & (kAttrControl | kAttrUnknown))) continue;
    const std::string& st = text_[static_cast<size_t>(id)];
    const uint32_t a = attr_[static_cast<size_t>(id)];
    // Cheap reject before rebuilding the fragment list.
    if (text.find(st) == std::string_view::npos) continue;
    next.clear();
    for (const Frag& fr : frags) {
      if (fr.tok >= 0) { next.push_back(fr); continue; }
      size_t base = fr.off, end = fr.off + fr.len;
      size_t from = base;
      while (base < end) {
        size_t m = text.substr(0, end).find(st, from);
        if (m == std::string_view::npos) break;
        if ((a & (kAttrControl | kAttrUnknown | kAttrRenderedControl)) && !literal.empty() &&
            in_literal(m, m + st.size())) {
          from = m + 1;  // the user's text, not the template's: stays plain
          continue;
        }
        if (m > base) {
          size_t left = m - base;
          if (a & kAttrLstrip)
            while (left > 0 && c_space(text[base + left - 1])) --left;
          if (left > 0) next.push_back({-1, base, left});
        }
        next.push_back({id, 0, 0});
        base = m + st.size();
        if (a & kAttrRstrip)
          while (base < end && c_space(text[base])) ++base;
        from = base;
      }
      if (base < end) next.push_back({-1, base, end - base});
    }
    frags.swap(next);
  }
  return frags;
}

void VocabTokenizer::bpe_word(const std::string& word, std::vector<int32_t>& out, size_t limit) const {
  if (word.empty()) return;
  auto encoded = [&](uint32_t off, uint32_t n) {
    std::string s;
    for (uint32_t i = off; i < off + n; ++i) s += byte_char_[static_cast<uint8_t>(word[i])];
    return s;
  };
  if (ignore_merges_) {
    int32_t whole = lookup(encoded(0, static_cast<uint32_t>(word.size())));
    if (whole >= 0) { out.push_back(whole); return; }
  }
  for (size_t off = 0; off < word.size() && out.size() < limit;) {
    size_t end = piece_end(word, off);
    bpe_merge(std::string_view(word).substr(off, end - off), out);
    off = end;
  }
}

void VocabTokenizer::bpe_merge(std::string_view word, std::vector<int32_t>& out) const {
  auto encoded = [&](uint32_t off, uint32_t n) {
    std::string s;
    for (uint32_t i = off; i < off + n; ++i) s += byte_char_[static_cast<uint8_t>(word[i])];
    return s;
  };
  // One symbol per input byte: the byte-level alphabet maps every byte to one codepoint.
  std::vector<Sym> sy(word.size());
  for (size_t i = 0; i < word.size(); ++i)
    sy[i] = {byte_char_id_[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
             i + 1 == word.size() ? -1 : static_cast<int32_t>(i) + 1, static_cast<uint32_t>(i), 1};

  std::priority_queue<Bigram> q;
  std::string key;
  auto add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Sym& L = sy[static_cast<size_t>(l)];
    const Sym& R = sy[static_cast<size_t>(r)];
    int32_t rank = -1, result = -1;
    if (L.id >= 0 && R.id >= 0) {
      auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(L.id)) << 32) | static_cast<uint32_t>(R.id));
      if (it != merges_.end()) { rank = it->second.rank; result = it->second.result; }
    }
    if (rank < 0 && !merges_text_.empty()) {
      key = encoded(L.off, L.n);
      key += '\0';
      key += encoded(R.off, R.n);
      auto it = merges_text_.find(key);
      if (it != merges_text_.end()) {
        rank = it->second;
        result = lookup(encoded(L.off, L.n + R.n));
      }
    }
    if (rank < 0) return;
    q.push({-static_cast<float>(rank), l, r, L.n + R.n, result});
  };
  for (size_t i = 1; i < sy.size(); ++i) add(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  while (!q.empty()) {
    Bigram b = q.top();
    q.pop();
    Sym& L = sy[static_cast<size_t>(b.left)];
    Sym& R = sy[static_cast<size_t>(b.right)];
    // Stale if either side changed since the pair was queued.
    if (L.n == 0 || R.n == 0 || L.next != b.right || L.n + R.n != b.size) continue;
    L.n += R.n;
    L.id = b.result;
    R.n = 0;
    L.next = R.next;
    if (R.next >= 0) sy[static_cast<size_t>(R.next)].prev = b.left;
    add(L.prev, b.left);
    add(b.left, L.next);
  }
  for (int32_t i = 0; i >= 0; i = sy[static_cast<size_t>(i)].next) {
    const Sym& s = sy[static_cast<size_t>(i)];
    if (s.id >= 0) { out.push_back(s.id); continue; }
    // Not a token: llama.cpp looks up each byte of the encoded text alone.
    std::string enc = encoded(s.off, s.n);
    for (char c : enc) {
      int32_t t = lookup(std::string_view(&c, 1));
      if (t >= 0) out.push_back(t);
    }
  }
}

int32_t VocabTokenizer::spm_byte_token(uint8_t b) const {
  static const char* hex = "0123456789ABCDEF";
  char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
  int32_t t = lookup(std::string_view(buf, 6));
  if (t >= 0) return t;
  char c = static_cast<char>(b);
  t = lookup(std::string_view(&c, 1));
  if (t >= 0) return t;
  throw GgufError("tokenizer: no token for byte " + std::to_string(b));
}

void VocabTokenizer::spm_fragment(std::string_view raw, bool prefix_space, std::vector<int32_t>& out, size_t limit) const {
  std::string text;
  text.reserve(raw.size() * 2 + 3);
  if (prefix_space) text += "\xE2\x96\x81";
  for (char c : raw) {
    if (c == ' ') text += "\xE2\x96\x81";
    else text += c;
  }
  const std::string_view sp = "\xE2\x96\x81";
  for (size_t off = 0; off < text.size() && out.size() < limit;) {
    size_t end = piece_end(text, off);
    if (end < text.size()) {
      // Cut before a space that follows a non-space: SentencePiece pieces never hold "x▁".
      for (size_t q = end; q > off + kMaxMergeBytes / 2; --q) {
        if (text.compare(q, 3, sp) == 0 && text.compare(q - 3, 3, sp) != 0) {
          end = q;
          break;
        }
      }
    }
    spm_merge(std::string_view(text).substr(off, end - off), out);
    off = end;
  }
}

void VocabTokenizer::spm_merge(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<Sym> sy;
  sy.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    size_t len = std::min(uni::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    int32_t idx = static_cast<int32_t>(sy.size());
    sy.push_back({-1, idx - 1, off + len == text.size() ? -1 : idx + 1, static_cast<uint32_t>(off),
                  static_cast<uint32_t>(len)});
    off += len;
  }
  std::priority_queue<Bigram> q;
  auto add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Sym& L = sy[static_cast<size_t>(l)];
    const Sym& R = sy[static_cast<size_t>(r)];
    int32_t t = lookup(text.substr(L.off, L.n + R.n));
    if (t < 0) return;
    q.push({score_[static_cast<size_t>(t)], l, r, L.n + R.n, t});
  };
  for (size_t i = 1; i < sy.size(); ++i) add(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  while (!q.empty()) {
    Bigram b = q.top();
    q.pop();
    Sym& L = sy[static_cast<size_t>(b.left)];
    Sym& R = sy[static_cast<size_t>(b.right)];
    if (L.n == 0 || R.n == 0 || L.n + R.n != b.size) continue;
    L.n += R.n;
    L.id = b.result;
    R.n = 0;
    L.next = R.next;
    if (R.next >= 0) sy[static_cast<size_t>(R.next)].prev = b.left;
    add(L.prev, b.left);
    add(b.left, L.next);
  }
  for (int32_t i = 0; i >= 0; i = sy[static_cast<size_t>(i)].next) {
    const Sym& s = sy[static_cast<size_t>(i)];
    int32_t t = s.id >= 0 ? s.id : lookup(text.substr(s.off, s.n));
    if (t >= 0) { out.push_back(t); continue; }
    // Merged symbols are always tokens, so only single characters get here: emit their bytes.
    for (uint32_t k = 0; k < s.n; ++k) out.push_back(spm_byte_token(static_cast<uint8_t>(text[s.off + k])));
  }
}

std::vector<int32_t> VocabTokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                            const std::vector<Span>& literal, size_t limit) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::vector<Span> lit;
  if (parse_special && !literal.empty()) {
    for (Span sp : literal) {
      sp.end = std::min(sp.end, text.size());
      if (sp.begin < sp.end) lit.push_back(sp);
    }
    std::sort(lit.begin(), lit.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    size_t w = 0;  // merge overlapping or touching ranges
    for (const Span& sp : lit) {
      if (w > 0 && sp.begin <= lit[w - 1].end) lit[w - 1].end = std::max(lit[w - 1].end, sp.end);
      else lit[w++] = sp;
    }
    lit.resize(w);
  }
  std::vector<Frag> frags = partition(text, parse_special, lit);
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  if (kind_ == Kind::kSpm) {
    bool prev_special = true;  // SentencePiece prefixes a space at the start and after specials
    for (const Frag& fr : frags) {
      if (out.size() >= limit) return out;
      if (fr.tok >= 0) { out.push_back(fr.tok); prev_special = true; continue; }
      spm_fragment(text.substr(fr.off, fr.len), add_space_prefix_ && prev_special, out, limit);
      prev_special = false;
    }
  } else {
    for (const Frag& fr : frags) {
      if (out.size() >= limit) return out;
      if (fr.tok >= 0) { out.push_back(fr.tok); continue; }
      for (const std::string& w : pretok::split_words(std::string(text.substr(fr.off, fr.len)), splits_)) {
        bpe_word(w, out, limit);
        if (out.size() >= limit) return out;
      }
    }
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  return std::make_unique<VocabTokenizer>(f);
}

namespace {
// Length of the valid UTF-8 sequence at p[0..n): >0 complete, 0 a valid but incomplete prefix
// (more bytes could complete it), -1 invalid lead or continuation.
int utf8_seq(const uint8_t* p, size_t n) {
  uint8_t c = p[0];
  if (c < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (rules out overlongs/surrogates)
  if (c >= 0xC2 && c <= 0xDF) need = 2;
  else if (c >= 0xE0 && c <= 0xEF) { need = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
  else if (c >= 0xF0 && c <= 0xF4) { need = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
  else return -1;
  for (int k = 1; k < need; ++k) {
    if (static_cast<size_t>(k) >= n) return 0;
    uint8_t b = p[k];
    if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return -1;
  }
  return need;
}
}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes.data(), bytes.size());
  // Emit every complete code point; keep a trailing prefix that later bytes may complete; turn
  // bytes that can never be valid into U+FFFD so the output is always valid UTF-8.
  const uint8_t* p = reinterpret_cast<const uint8_t*>(pending_.data());
  size_t n = pending_.size(), i = 0;
  std::string out;
  out.reserve(n);
  while (i < n) {
    int len = utf8_seq(p + i, n - i);
    if (len == 0) break;
    if (len < 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(pending_, i, static_cast<size_t>(len));
    i += static_cast<size_t>(len);
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::flush() {
  // Only an incomplete sequence can be pending: it will never complete now.
  std::string out = pending_.empty() ? std::string() : std::string("\xEF\xBF\xBD");
  pending_.clear();
  return out;
}

}  // namespace mb
