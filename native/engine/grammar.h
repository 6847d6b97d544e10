// Grammar-constrained decoding. A small GBNF-style grammar over BYTES is compiled to a pushdown
// recognizer that tracks every parse stack still alive; a byte trie of the vocabulary lets one
// walk per step find every token the grammar allows (shared prefixes are checked once).
//
// Dimension legend: V n_vocab, N trie nodes (about the total bytes of all token pieces, shared
//                   prefixes counted once), E grammar elements, K parse stacks alive in one state
//                   (a handful for JSON grammars), S distinct states met so far by one matcher.
//
// Grammar syntax (one rule per `name ::= ...`; a rule may span lines; `#` starts a comment):
//   root ::= "lit\n" [a-z0-9_] [^"\\\x00-\x1f] other-rule ( a | b ) x* y+ z? w{2} v{1,3} u{2,}
//   "..."   literal bytes; escapes \n \r \t \\ \" \' \[ \] \xHH (one byte) \uHHHH (UTF-8 of it)
//   [...]   one byte from a set (ranges a-z, \xHH escapes, ^ negates); bytes only, so a
//           character class cannot hold a multi-byte UTF-8 character: spell UTF-8 out in bytes
//   .       any byte
// The grammar must define `root`. Left recursion (a rule reaching itself without consuming a
// byte) is rejected at compile time, which is what makes the stack expansion terminate.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sampler.h"

namespace mb {

struct GrammarError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The compiled grammar: immutable, shareable between matchers.
class Grammar {
 public:
  // Throws GrammarError ("line L col C: what") for syntax errors, undefined rules, a missing
  // root, left recursion or a grammar past the size limits.
  static std::shared_ptr<const Grammar> parse(std::string_view text);

  enum Kind : uint8_t { kEnd, kByte, kRef };
  struct Elem {
    Kind kind;
    uint32_t arg;  // kByte: index into classes; kRef: rule index; kEnd: unused
  };
  using ByteSet = std::array<uint64_t, 4>;  // bit b set = byte b matches

  std::vector<Elem> elems;                  // [E] every alternative's elements, each closed by kEnd
  std::vector<std::vector<uint32_t>> alts;  // [rules] start index in elems of each alternative
  std::vector<std::string> names;           // [rules] for messages (anonymous rules: parent_N)
  std::vector<ByteSet> classes;
  uint32_t root = 0;

  bool matches(uint32_t cls, uint8_t b) const { return (classes[cls][b >> 6] >> (b & 63)) & 1; }
};

// The vocabulary as a byte trie, built once per tokenizer and shared read-only by every request.
class TokenTrie {
 public:
  // pieces: [V] the bytes each token adds to the output. Tokens with an empty piece (control
  // tokens render as nothing) and tokens flagged in `eog` are left out of the trie: a token that
  // adds no byte could repeat forever without the grammar noticing. EOG tokens are remembered
  // separately; the grammar allows them only once it is complete.
  TokenTrie(const std::vector<std::string>& pieces, const std::vector<uint8_t>& eog);

  struct Node {
    uint32_t edge_begin, edge_end;  // children: edge_byte / edge_child [edge_begin, edge_end)
    uint32_t tok_begin, tok_end;    // tokens whose piece ends exactly here: toks [tok_begin, tok_end)
  };
  int32_t n_vocab() const { return int32_t(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  bool in_trie(int32_t id) const { return id >= 0 && id < n_vocab() && in_trie_[size_t(id)]; }
  bool is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_flag_[size_t(id)]; }
  const std::vector<int32_t>& eog() const { return eog_; }
  size_t n_nodes() const { return nodes_.size(); }

  std::vector<Node> nodes_;          // [N] node 0 is the root (empty prefix)
  std::vector<uint8_t> edge_byte_;   // [N-1]
  std::vector<uint32_t> edge_child_; // [N-1]
  std::vector<int32_t> toks_;        // token ids grouped by node

 private:
  std::vector<std::string> pieces_;  // [V]
  std::vector<uint8_t> in_trie_;     // [V]
  std::vector<uint8_t> eog_flag_;    // [V]
  std::vector<int32_t> eog_;
};

// One generation's position in the grammar. A state is the SET of parse stacks still alive;
// stacks are hash-consed linked lists (node = position + parent) and states are hash-consed sets
// of stacks, so the byte transitions between states can be cached: after a few steps walking the
// trie mostly costs one table lookup per trie node (a lazily built DFA over the states met).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g);

  bool accept(std::string_view bytes);        // advances; false (and no change) if rejected
  bool allows(std::string_view bytes);        // whether accept() would succeed
  bool complete() const;                      // the bytes so far form a whole `root`
  bool can_continue() const;                  // some longer input is still possible
  // Bit t set = trie token t's bytes can come next ([ceil(V/64)] words; EOG tokens never set).
  // Memoized per state: inside a free JSON string the same state recurs at every step, and then
  // the mask costs a copy instead of a walk over most of the trie.
  const std::vector<uint64_t>& allowed_tokens(const TokenTrie& trie);
  // Non-empty once a limit was hit (too many stacks in one state); the state is then dead.
  const std::string& error() const { return error_; }
  // A bounded search for an input the matcher gives up on, run on a fresh matcher before a
  // grammar built from caller input (a tool's JSON Schema) is used: breadth-first over the states
  // reachable from the start (one byte of each class of bytes no element tells apart), stopping
  // after max_states states or kMaxNodes stack nodes. Returns the shortest such input found
  // (error() says what limit it hits), or false when none was met within the bound. Nested
  // alternatives that begin alike multiply the stacks alive at once, so such an input is short
  // and found early; a generation would otherwise fail on it halfway through.
  bool find_dead_end(size_t max_states, std::string& input);
  size_t n_states() const { return set_off_.size(); }

 private:
  static constexpr uint32_t kEmpty = 0;  // node 0: the empty stack (the grammar is complete)
  static constexpr int32_t kDead = -1, kUnknown = -2;
  struct Node { uint32_t pos, parent; };

  uint32_t node(uint32_t pos, uint32_t parent);
  int32_t intern_set(std::vector<uint32_t>& stacks);  // sorts; -1 if empty or over the limit
  void closure(std::vector<uint32_t>& work, std::vector<uint32_t>& out);
  int32_t advance(int32_t set, uint8_t b);            // cached transition
  int32_t compute(int32_t set, uint8_t b);
  void reset_caches();                                // bounds memory on long generations

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_ids_;
  std::vector<uint32_t> set_pool_;                 // stacks of every state, back to back
  std::vector<uint32_t> set_off_, set_len_;        // [S]
  std::vector<uint8_t> set_complete_, set_more_;   // [S]
  std::unordered_map<std::string, int32_t> set_ids_;  // key: the sorted stack ids as bytes
  std::vector<int32_t> trans_;                     // [S, 256] next state; kUnknown until computed
  std::vector<uint32_t> seen_;                     // [nodes] closure visit stamps
  uint32_t stamp_ = 0;
  std::vector<uint32_t> work_, out_;               // scratch
  std::vector<std::pair<uint32_t, int32_t>> walk_; // scratch: (trie node, state) DFS stack
  std::unordered_map<int32_t, std::vector<uint64_t>> masks_;  // state -> allowed_tokens()
  std::vector<uint64_t> mask_;                     // the last result when not memoized
  int32_t cur_ = kDead;
  std::string error_;
};

// The sampler's view of a grammar: which tokens may come next. End-of-generation tokens are
// allowed exactly when the grammar is complete.
class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie);
  bool allows(int32_t tok) override;
  void mask(float* logits, int n_vocab) override;
  // Advances by a sampled token; false if the grammar rejects it (a caller bug).
  bool accept(int32_t tok);
  // Complete and nothing may follow: the generation is over (no EOG token needs sampling).
  bool finished() const { return m_.complete() && !m_.can_continue(); }
  const std::string& error() const { return m_.error(); }
  GrammarMatcher& matcher() { return m_; }

 private:
  GrammarMatcher m_;
  std::shared_ptr<const TokenTrie> trie_;
};

// Lazy grammars (tool calls under tool_choice auto, llama.cpp's idea): the output is free until
// it opens a call, and from the first byte of the opening on it must match the call grammar.
// An opening (trigger) is a sequence of literal pieces with up to kGap whitespace bytes
// ([ \t\r\n]) between consecutive pieces; an at-start one counts only where nothing but
// whitespace precedes it in the answer. A think block (think_open at the start of the output,
// or the whole start when the prompt opened it) is not the answer: no trigger counts inside it,
// and the answer starts after its think_close. The call grammar must accept each trigger's text
// from its first byte (src/chat/tool-grammar.ts builds both from one list of openings).
struct GrammarTrigger {
  std::vector<std::string> pieces;
  bool at_start = false;
};

struct TriggerOptions {
  std::string think_open, think_close;  // empty = the model has no think blocks
  bool starts_in_thinking = false;
};

class TriggerScanner {
 public:
  static constexpr size_t kGap = 8;
  static constexpr size_t npos = std::string::npos;
  TriggerScanner(std::vector<GrammarTrigger> triggers, TriggerOptions opts);
  // Where (a byte offset of the whole output) the earliest trigger that completes inside `piece`,
  // were it appended, begins; npos when none does. Only the last few bytes are looked at, so a
  // step costs the same however long the output is.
  size_t scan(std::string_view piece) const;
  void append(std::string_view piece);
  const std::string& text() const { return text_; }

 private:
  // Length of a match of t starting at `at` in `s`, or 0.
  size_t match(const GrammarTrigger& t, std::string_view s, size_t at) const;
  std::vector<GrammarTrigger> triggers_;
  TriggerOptions opts_;
  size_t max_len_ = 0;        // the longest text a trigger can match
  std::string text_;          // the output so far
  bool thinking_ = false;     // inside the think block
  bool think_decided_ = false;  // whether the output opens a think block is known
  size_t answer_ = 0;         // where the answer begins (after the think block)
};

// After a trigger: the call grammar must hold. A request's own grammar (an engine caller's, such
// as a test's scripted output) keeps narrowing the choice while the two agree on some token, and
// gives way for good once they do not.
class CallConstraint final : public TokenConstraint {
 public:
  CallConstraint(GrammarConstraint* call, GrammarConstraint* own) : call_(call), own_(own) {}
  bool allows(int32_t tok) override { return call_->allows(tok) && (!own_ || own_->allows(tok)); }
  void mask(float* logits, int n_vocab) override;
  // The request's own grammar, while it still narrows the choice (null once it gave way).
  GrammarConstraint* own() const { return own_; }
  void drop_own() { own_ = nullptr; }

 private:
  GrammarConstraint* call_;
  GrammarConstraint* own_;
  std::vector<float> both_;  // [V] scratch: the row under both grammars
};

}  // namespace mb
