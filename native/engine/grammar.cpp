// Grammar parsing/compilation, the stack-set matcher and the vocabulary trie (see grammar.h).
//
// Dimension legend: V n_vocab, N trie nodes, E grammar elements, K stacks in one state,
//                   S states interned by one matcher.
#include "grammar.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace mb {
namespace {

using Elem = Grammar::Elem;
using ByteSet = Grammar::ByteSet;

// Limits that turn a hostile or runaway grammar into an error instead of a memory blow-up.
constexpr size_t kMaxElems = size_t(1) << 20;   // E (a bounded repetition costs ~2 per unit)
constexpr uint32_t kMaxRepeat = 100000;         // x{m,n}: m, n at most this
constexpr int kMaxNesting = 1000;               // ( ... ) depth: the parser recurses per level
constexpr size_t kMaxStacks = 4096;             // K: an ambiguity explosion ends the generation
// A matcher's caches grow with every new state met; past these they are rebuilt from the
// current state alone (which keeps long generations in bounded memory).
constexpr size_t kMaxNodes = size_t(1) << 18;
constexpr size_t kMaxSets = 4096;               // trans_ is 1 KiB per state
constexpr size_t kMaxMasks = 64;                // memoized token masks (V/8 bytes each)

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Recursive-descent parser straight into rules of alternatives of element sequences. Groups and
// repetitions become anonymous rules, so the compiled form only knows bytes and rule references.
class Parser {
 public:
  explicit Parser(std::string_view src) : s_(src) {}

  std::shared_ptr<const Grammar> run() {
    skip_ws();
    while (i_ < s_.size()) {
      const size_t at = i_;
      std::string name = ident();
      if (name.empty()) fail(at, "expected a rule name");
      skip_ws();
      if (s_.compare(i_, 3, "::=") != 0) fail(i_, "expected '::=' after rule name '" + name + "'");
      i_ += 3;
      const uint32_t r = rule_id(name, at);
      if (defined_[r]) fail(at, "rule '" + name + "' is defined twice");
      defined_[r] = 1;
      rules_[r] = alternatives(name);
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ')') fail(i_, "unbalanced ')'");
      if (i_ < s_.size() && s_[i_] == '|') fail(i_, "unexpected '|'");
    }
    auto g = std::make_shared<Grammar>();
    auto root = by_name_.find("root");
    if (root == by_name_.end() || !defined_[root->second]) throw GrammarError("grammar: no 'root' rule");
    for (size_t r = 0; r < rules_.size(); r++)
      if (!defined_[r]) fail(first_use_[r], "undefined rule '" + names_[r] + "'");
    g->root = root->second;
    g->classes = std::move(classes_);
    g->names = names_;
    g->alts.resize(rules_.size());
    size_t total = 0;
    for (const auto& alts : rules_)
      for (const auto& seq : alts) total += seq.size() + 1;
    if (total > kMaxElems) throw GrammarError("grammar: too large (" + std::to_string(total) + " elements)");
    g->elems.reserve(total + 1);
    for (size_t r = 0; r < rules_.size(); r++) {
      for (const auto& seq : rules_[r]) {
        g->alts[r].push_back(uint32_t(g->elems.size()));
        g->elems.insert(g->elems.end(), seq.begin(), seq.end());
        g->elems.push_back({Grammar::kEnd, 0});
      }
    }
    check_left_recursion(*g);
    return g;
  }

 private:
  using Seq = std::vector<Elem>;
  using Alts = std::vector<Seq>;

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < s_.size(); k++) {
      if (s_[k] == '\n') { line++; col = 1; } else col++;
    }
    throw GrammarError("grammar: line " + std::to_string(line) + " col " + std::to_string(col) + ": " + what);
  }

  // Whitespace (newlines included) and # comments.
  void skip_ws() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') i_++;
      else if (c == '#') { while (i_ < s_.size() && s_[i_] != '\n') i_++; }
      else break;
    }
  }

  std::string ident() {
    const size_t b = i_;
    while (i_ < s_.size() && is_name_char(s_[i_])) i_++;
    return std::string(s_.substr(b, i_ - b));
  }

  // Whether the text at i_ starts the next rule (`name ::=`): sequences end there.
  bool at_rule_start() const {
    size_t k = i_;
    while (k < s_.size() && is_name_char(s_[k])) k++;
    if (k == i_) return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\n' || s_[k] == '\r')) k++;
    return s_.compare(k, 3, "::=") == 0;
  }

  uint32_t rule_id(const std::string& name, size_t at) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return it->second;
    const uint32_t r = new_rule(name);
    by_name_.emplace(name, r);
    first_use_[r] = at;
    return r;
  }

  uint32_t new_rule(const std::string& name) {
    if (rules_.size() >= kMaxElems) fail(i_, "grammar too large (too many rules)");
    rules_.emplace_back();
    names_.push_back(name);
    defined_.push_back(0);
    first_use_.push_back(0);
    return uint32_t(rules_.size() - 1);
  }

  uint32_t anon(const std::string& owner, Alts alts) {
    const uint32_t r = new_rule(owner + "_" + std::to_string(++anon_count_));
    defined_[r] = 1;
    rules_[r] = std::move(alts);
    return r;
  }

  uint32_t class_id(const ByteSet& set) {
    auto it = class_ids_.find(set);
    if (it != class_ids_.end()) return it->second;
    classes_.push_back(set);
    const uint32_t id = uint32_t(classes_.size() - 1);
    class_ids_.emplace(set, id);
    return id;
  }

  Elem byte_elem(uint8_t b) {
    ByteSet set{};
    set[b >> 6] |= uint64_t(1) << (b & 63);
    return {Grammar::kByte, class_id(set)};
  }

  Alts alternatives(const std::string& owner) {
    Alts alts;
    alts.push_back(sequence(owner));
    for (;;) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '|') break;
      i_++;
      alts.push_back(sequence(owner));
    }
    return alts;
  }

  Seq sequence(const std::string& owner) {
    Seq seq;
    for (;;) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || at_rule_start()) break;
      Seq item = primary(owner);
      for (;;) {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) i_++;
        if (i_ >= s_.size()) break;
        const char c = s_[i_];
        if (c == '*') { i_++; item = repeat(owner, std::move(item), 0, UINT32_MAX); }
        else if (c == '+') { i_++; item = repeat(owner, std::move(item), 1, UINT32_MAX); }
        else if (c == '?') { i_++; item = repeat(owner, std::move(item), 0, 1); }
        else if (c == '{') {
          const size_t at = i_++;
          uint32_t lo = number(at), hi = lo;
          if (i_ < s_.size() && s_[i_] == ',') {
            i_++;
            hi = (i_ < s_.size() && s_[i_] == '}') ? UINT32_MAX : number(at);
          }
          if (i_ >= s_.size() || s_[i_] != '}') fail(at, "expected '}' to close a repetition count");
          i_++;
          if (hi != UINT32_MAX && hi < lo) fail(at, "repetition {m,n} with n < m");
          item = repeat(owner, std::move(item), lo, hi);
        } else break;
      }
      seq.insert(seq.end(), item.begin(), item.end());
      // A running total over all rules, so repetitions cannot build a huge grammar first.
      total_elems_ += item.size();
      if (total_elems_ > kMaxElems) fail(i_, "grammar too large");
    }
    return seq;
  }

  uint32_t number(size_t at) {
    while (i_ < s_.size() && s_[i_] == ' ') i_++;
    const size_t b = i_;
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9' && v <= kMaxRepeat) v = v * 10 + uint64_t(s_[i_++] - '0');
    if (i_ == b) fail(at, "expected a number in a repetition count");
    if (v > kMaxRepeat) fail(at, "repetition count over " + std::to_string(kMaxRepeat));
    while (i_ < s_.size() && s_[i_] == ' ') i_++;
    return uint32_t(v);
  }

  // x{lo,hi} (hi = UINT32_MAX: unbounded) as lo copies, then a right-recursive star or a chain
  // of nested optionals; right recursion keeps the parse stacks from growing per repetition.
  Seq repeat(const std::string& owner, Seq item, uint32_t lo, uint32_t hi) {
    if (item.empty()) return item;  // ""* is just empty
    const Elem x = item.size() == 1 ? item[0] : Elem{Grammar::kRef, anon(owner, {item})};
    total_elems_ += size_t(lo) + (hi == UINT32_MAX ? 2 : size_t(hi - lo) * 2);
    if (total_elems_ > kMaxElems) fail(i_, "grammar too large");
    Seq out(lo, x);
    if (hi == UINT32_MAX) {
      const uint32_t r = new_rule(owner + "_" + std::to_string(++anon_count_));
      defined_[r] = 1;
      rules_[r] = {{x, Elem{Grammar::kRef, r}}, {}};
      out.push_back({Grammar::kRef, r});
    } else if (hi > lo) {
      uint32_t inner = anon(owner, {{x}, {}});
      for (uint32_t k = 1; k < hi - lo; k++) inner = anon(owner, {{x, Elem{Grammar::kRef, inner}}, {}});
      out.push_back({Grammar::kRef, inner});
    }
    return out;
  }

  Seq primary(const std::string& owner) {
    const size_t at = i_;
    const char c = s_[i_];
    if (c == '"') {
      i_++;
      Seq seq;
      for (;;) {
        if (i_ >= s_.size()) fail(at, "unterminated string literal");
        const char d = s_[i_];
        if (d == '"') { i_++; break; }
        if (d == '\n') fail(i_, "newline in string literal (write \\n)");
        std::string bytes;
        if (d == '\\') bytes = escape(false);
        else { bytes = std::string(1, d); i_++; }
        for (unsigned char b : bytes) seq.push_back(byte_elem(b));
      }
      return seq;
    }
    if (c == '[') return {char_class()};
    if (c == '.') {
      i_++;
      ByteSet all;
      all.fill(~uint64_t(0));
      return {{Grammar::kByte, class_id(all)}};
    }
    if (c == '(') {
      if (++depth_ > kMaxNesting) fail(at, "parentheses nested too deeply");
      i_++;
      Alts alts = alternatives(owner);
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ')') fail(at, "unclosed '('");
      i_++;
      depth_--;
      // A group of one sequence needs no rule of its own.
      if (alts.size() == 1) return alts[0];
      return {{Grammar::kRef, anon(owner, std::move(alts))}};
    }
    if (is_name_char(c)) {
      std::string name = ident();
      return {{Grammar::kRef, rule_id(name, at)}};
    }
    fail(at, std::string("unexpected character '") + c + "'");
  }

  Elem char_class() {
    const size_t at = i_++;
    bool negate = false;
    if (i_ < s_.size() && s_[i_] == '^') { negate = true; i_++; }
    ByteSet set{};
    bool any = false;
    auto one = [&]() -> uint8_t {
      if (i_ >= s_.size()) fail(at, "unterminated character class");
      const unsigned char d = static_cast<unsigned char>(s_[i_]);
      if (d == '\\') {
        const size_t e = i_;
        std::string b = escape(true);
        if (b.size() != 1) fail(e, "escape in a character class must be one byte");
        return static_cast<uint8_t>(b[0]);
      }
      if (d >= 0x80) fail(i_, "non-ASCII character in a class: classes match single bytes (use \\xHH)");
      if (d == '\n') fail(i_, "newline in character class (write \\n)");
      i_++;
      return d;
    };
    for (;;) {
      if (i_ >= s_.size()) fail(at, "unterminated character class");
      if (s_[i_] == ']') { i_++; break; }
      const uint8_t lo = one();
      uint8_t hi = lo;
      if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        i_++;
        hi = one();
        if (hi < lo) fail(at, "character range out of order");
      }
      for (unsigned b = lo; b <= hi; b++) set[b >> 6] |= uint64_t(1) << (b & 63);
      any = true;
    }
    if (!any) fail(at, "empty character class");
    if (negate)
      for (auto& w : set) w = ~w;
    return {Grammar::kByte, class_id(set)};
  }

  // At a backslash; returns the bytes the escape stands for.
  std::string escape(bool in_class) {
    const size_t at = i_++;
    if (i_ >= s_.size()) fail(at, "dangling backslash");
    const char e = s_[i_++];
    switch (e) {
      case 'n': return "\n";
      case 'r': return "\r";
      case 't': return "\t";
      case '0': return std::string(1, '\0');
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
        return std::string(1, e);
      case 'x': {
        if (i_ + 2 > s_.size() || hex_value(s_[i_]) < 0 || hex_value(s_[i_ + 1]) < 0) fail(at, "\\x needs two hex digits");
        const int v = hex_value(s_[i_]) * 16 + hex_value(s_[i_ + 1]);
        i_ += 2;
        return std::string(1, char(v));
      }
      case 'u': {
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
          if (i_ >= s_.size() || hex_value(s_[i_]) < 0) fail(at, "\\u needs four hex digits");
          v = v * 16 + uint32_t(hex_value(s_[i_++]));
        }
        if (in_class && v >= 0x80) fail(at, "\\u above U+007F in a character class (classes match bytes; use \\xHH)");
        std::string out;
        append_utf8(out, v);
        return out;
      }
      default:
        fail(at, std::string("unknown escape '\\") + e + "'");
    }
  }

  // A rule that can reach itself before consuming a byte would expand forever.
  void check_left_recursion(const Grammar& g) const {
    const size_t n = g.alts.size();
    std::vector<uint8_t> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; r++) {
        if (nullable[r]) continue;
        for (uint32_t a : g.alts[r]) {
          bool all = true;
          for (uint32_t p = a; g.elems[p].kind != Grammar::kEnd; p++) {
            const Elem& e = g.elems[p];
            if (e.kind == Grammar::kByte || !nullable[e.arg]) { all = false; break; }
          }
          if (all) { nullable[r] = 1; changed = true; break; }
        }
      }
    }
    std::vector<std::vector<uint32_t>> adj(n);  // r -> rules it may start with
    for (size_t r = 0; r < n; r++)
      for (uint32_t a : g.alts[r])
        for (uint32_t p = a; g.elems[p].kind == Grammar::kRef; p++) {
          adj[r].push_back(g.elems[p].arg);
          if (!nullable[g.elems[p].arg]) break;
        }
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
    std::vector<std::pair<uint32_t, size_t>> st;
    for (size_t s = 0; s < n; s++) {
      if (color[s]) continue;
      st.push_back({uint32_t(s), 0});
      color[s] = 1;
      while (!st.empty()) {
        auto& [r, k] = st.back();
        if (k == adj[r].size()) { color[r] = 2; st.pop_back(); continue; }
        const uint32_t t = adj[r][k++];
        if (color[t] == 1)
          throw GrammarError("grammar: rule '" + g.names[t] + "' is left-recursive (it can reach itself without consuming a byte)");
        if (color[t] == 0) { color[t] = 1; st.push_back({t, 0}); }
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  std::vector<Alts> rules_;
  std::vector<std::string> names_;
  std::vector<uint8_t> defined_;
  std::vector<size_t> first_use_;
  std::unordered_map<std::string, uint32_t> by_name_;
  std::map<ByteSet, uint32_t> class_ids_;
  std::vector<ByteSet> classes_;
  uint32_t anon_count_ = 0;
  int depth_ = 0;
  size_t total_elems_ = 0;
};

}  // namespace

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text) { return Parser(text).run(); }

// ---- TokenTrie ----

TokenTrie::TokenTrie(const std::vector<std::string>& pieces, const std::vector<uint8_t>& eog)
    : pieces_(pieces), in_trie_(pieces.size(), 0), eog_flag_(pieces.size(), 0) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < pieces.size(); i++) {
    if (i < eog.size() && eog[i]) {
      eog_flag_[i] = 1;
      eog_.push_back(int32_t(i));
    } else if (!pieces[i].empty()) {
      in_trie_[i] = 1;
      ids.push_back(int32_t(i));
    }
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const int c = pieces_[size_t(a)].compare(pieces_[size_t(b)]);
    return c < 0 || (c == 0 && a < b);
  });
  // Breadth-first over ranges of the sorted ids that share a prefix of length `depth`, so each
  // node's children (and tokens) are contiguous. Tokens equal to the prefix sort first.
  struct Item { uint32_t node; size_t lo, hi, depth; };
  std::vector<Item> queue;
  nodes_.push_back({0, 0, 0, 0});
  queue.push_back({0, 0, ids.size(), 0});
  for (size_t q = 0; q < queue.size(); q++) {
    const Item it = queue[q];
    size_t k = it.lo;
    nodes_[it.node].tok_begin = uint32_t(toks_.size());
    while (k < it.hi && pieces_[size_t(ids[k])].size() == it.depth) toks_.push_back(ids[k++]);
    nodes_[it.node].tok_end = uint32_t(toks_.size());
    nodes_[it.node].edge_begin = uint32_t(edge_byte_.size());
    while (k < it.hi) {
      const uint8_t b = static_cast<uint8_t>(pieces_[size_t(ids[k])][it.depth]);
      size_t e = k;
      while (e < it.hi && static_cast<uint8_t>(pieces_[size_t(ids[e])][it.depth]) == b) e++;
      const uint32_t child = uint32_t(nodes_.size());
      nodes_.push_back({0, 0, 0, 0});
      edge_byte_.push_back(b);
      edge_child_.push_back(child);
      queue.push_back({child, k, e, it.depth + 1});
      k = e;
    }
    nodes_[it.node].edge_end = uint32_t(edge_byte_.size());
  }
}

// ---- GrammarMatcher ----

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  nodes_.push_back({UINT32_MAX, 0});
  seen_.push_back(0);
  work_.clear();
  for (uint32_t a : g_->alts[g_->root]) work_.push_back(g_->elems[a].kind == Grammar::kEnd ? kEmpty : node(a, kEmpty));
  closure(work_, out_);
  cur_ = intern_set(out_);
}

uint32_t GrammarMatcher::node(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t(pos) << 32) | parent;
  auto it = node_ids_.find(key);
  if (it != node_ids_.end()) return it->second;
  const uint32_t id = uint32_t(nodes_.size());
  nodes_.push_back({pos, parent});
  seen_.push_back(0);
  node_ids_.emplace(key, id);
  return id;
}

// Expands rule references until every stack's top is a byte element (or the stack is empty).
// A stack holds "what to match next" at each level; a reference is replaced by its continuation
// (dropped when the reference was last in its alternative: tail calls keep stacks shallow) with
// one alternative pushed on top. Visit stamps make each node expand once per closure.
void GrammarMatcher::closure(std::vector<uint32_t>& work, std::vector<uint32_t>& out) {
  out.clear();
  if (++stamp_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
  while (!work.empty()) {
    const uint32_t n = work.back();
    work.pop_back();
    if (seen_[n] == stamp_) continue;
    seen_[n] = stamp_;
    if (n == kEmpty) { out.push_back(n); continue; }
    const Node nd = nodes_[n];  // a copy: node() below may reallocate nodes_
    const Grammar::Elem e = g_->elems[nd.pos];
    if (e.kind == Grammar::kByte) { out.push_back(n); continue; }
    const uint32_t cont = nd.pos + 1;
    const uint32_t base = g_->elems[cont].kind == Grammar::kEnd ? nd.parent : node(cont, nd.parent);
    for (uint32_t a : g_->alts[e.arg]) work.push_back(g_->elems[a].kind == Grammar::kEnd ? base : node(a, base));
  }
}

int32_t GrammarMatcher::intern_set(std::vector<uint32_t>& stacks) {
  if (stacks.empty()) return kDead;
  if (stacks.size() > kMaxStacks) {
    error_ = "grammar: too ambiguous (over " + std::to_string(kMaxStacks) + " parse stacks alive at once)";
    return kDead;
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(uint32_t));
  auto it = set_ids_.find(key);
  if (it != set_ids_.end()) return it->second;
  const int32_t id = int32_t(set_off_.size());
  set_off_.push_back(uint32_t(set_pool_.size()));
  set_len_.push_back(uint32_t(stacks.size()));
  set_pool_.insert(set_pool_.end(), stacks.begin(), stacks.end());
  const bool complete = stacks[0] == kEmpty;  // sorted: node 0 comes first
  set_complete_.push_back(complete ? 1 : 0);
  set_more_.push_back(stacks.size() > (complete ? 1u : 0u) ? 1 : 0);
  trans_.resize(trans_.size() + 256, kUnknown);
  set_ids_.emplace(std::move(key), id);
  return id;
}

int32_t GrammarMatcher::advance(int32_t set, uint8_t b) {
  const size_t k = size_t(set) * 256 + b;
  int32_t t = trans_[k];
  if (t != kUnknown) return t;
  t = compute(set, b);
  trans_[k] = t;  // by index: compute() may have grown trans_
  return t;
}

int32_t GrammarMatcher::compute(int32_t set, uint8_t b) {
  work_.clear();
  const uint32_t off = set_off_[size_t(set)], len = set_len_[size_t(set)];
  for (uint32_t k = 0; k < len; k++) {
    const uint32_t n = set_pool_[off + k];
    if (n == kEmpty) continue;
    const Node nd = nodes_[n];
    if (!g_->matches(g_->elems[nd.pos].arg, b)) continue;
    const uint32_t next = nd.pos + 1;
    work_.push_back(g_->elems[next].kind == Grammar::kEnd ? nd.parent : node(next, nd.parent));
  }
  if (work_.empty()) return kDead;
  closure(work_, out_);
  return intern_set(out_);
}

void GrammarMatcher::reset_caches() {
  if (nodes_.size() <= kMaxNodes && set_off_.size() <= kMaxSets) return;
  // Keep only the current state: its stacks as position lists, re-interned from the bottom up.
  std::vector<std::vector<uint32_t>> stacks;
  if (cur_ >= 0) {
    const uint32_t off = set_off_[size_t(cur_)], len = set_len_[size_t(cur_)];
    for (uint32_t k = 0; k < len; k++) {
      std::vector<uint32_t> ps;
      for (uint32_t n = set_pool_[off + k]; n != kEmpty; n = nodes_[n].parent) ps.push_back(nodes_[n].pos);
      stacks.push_back(std::move(ps));
    }
  }
  nodes_.resize(1);
  seen_.assign(1, 0);
  stamp_ = 0;
  node_ids_.clear();
  set_pool_.clear();
  set_off_.clear();
  set_len_.clear();
  set_complete_.clear();
  set_more_.clear();
  set_ids_.clear();
  trans_.clear();
  masks_.clear();  // keyed by state ids, which are renumbered now
  if (cur_ < 0) return;
  out_.clear();
  for (const auto& ps : stacks) {
    uint32_t n = kEmpty;
    for (size_t k = ps.size(); k-- > 0;) n = node(ps[k], n);
    out_.push_back(n);
  }
  cur_ = intern_set(out_);
}

bool GrammarMatcher::accept(std::string_view bytes) {
  reset_caches();
  int32_t s = cur_;
  for (unsigned char b : bytes) {
    if (s < 0) return false;
    s = advance(s, b);
  }
  if (s < 0) return false;
  cur_ = s;
  return true;
}

bool GrammarMatcher::allows(std::string_view bytes) {
  int32_t s = cur_;
  for (unsigned char b : bytes) {
    if (s < 0) return false;
    s = advance(s, b);
  }
  return s >= 0;
}

bool GrammarMatcher::find_dead_end(size_t max_states, std::string& input) {
  if (cur_ < 0) return false;
  // Bytes every element of the grammar treats alike lead to the same state: one stands for all.
  std::array<uint16_t, 256> group{};  // [256] byte -> its class of indistinguishable bytes
  uint16_t n_groups = 1;
  for (const Grammar::ByteSet& cls : g_->classes) {
    std::array<int16_t, 512> split;  // (old group, in cls) -> new group
    split.fill(-1);
    uint16_t n = 0;
    for (int b = 0; b < 256; b++) {
      int16_t& to = split[size_t(group[size_t(b)]) * 2 + ((cls[size_t(b) >> 6] >> (b & 63)) & 1)];
      if (to < 0) to = int16_t(n++);
      group[size_t(b)] = uint16_t(to);
    }
    n_groups = n;
  }
  std::vector<uint8_t> reps;
  std::vector<uint8_t> have(n_groups, 0);
  for (int b = 0; b < 256; b++)
    if (!have[group[size_t(b)]]) have[group[size_t(b)]] = 1, reps.push_back(uint8_t(b));

  const int32_t start = cur_;
  std::vector<std::pair<int32_t, uint8_t>> from;  // [S] the state and byte each was first reached by
  auto mark = [&](int32_t st, int32_t prev, uint8_t b) {
    if (size_t(st) >= from.size()) from.resize(size_t(st) + 1, {kUnknown, 0});
    if (from[size_t(st)].first != kUnknown || st == start) return false;
    from[size_t(st)] = {prev, b};
    return true;
  };
  std::vector<int32_t> queue{start};
  for (size_t q = 0; q < queue.size(); q++) {
    const int32_t st = queue[q];
    for (uint8_t b : reps) {
      const int32_t next = advance(st, b);
      if (next == kDead) {
        if (error_.empty()) continue;
        input.assign(1, char(b));
        for (int32_t at = st; at != start; at = from[size_t(at)].first) input.push_back(char(from[size_t(at)].second));
        std::reverse(input.begin(), input.end());
        return true;
      }
      if (mark(next, st, b)) queue.push_back(next);
      if (queue.size() >= max_states || nodes_.size() > kMaxNodes) return false;
    }
  }
  return false;
}

bool GrammarMatcher::complete() const { return cur_ >= 0 && set_complete_[size_t(cur_)]; }
bool GrammarMatcher::can_continue() const { return cur_ >= 0 && set_more_[size_t(cur_)]; }

const std::vector<uint64_t>& GrammarMatcher::allowed_tokens(const TokenTrie& trie) {
  reset_caches();
  auto hit = masks_.find(cur_);
  if (hit != masks_.end()) return hit->second;
  mask_.assign((size_t(trie.n_vocab()) + 63) / 64, 0);
  if (cur_ < 0) return mask_;
  size_t visited = 0;
  walk_.clear();
  walk_.push_back({0, cur_});
  while (!walk_.empty()) {
    const auto [tn, st] = walk_.back();
    walk_.pop_back();
    visited++;
    const TokenTrie::Node& nd = trie.nodes_[tn];
    for (uint32_t k = nd.tok_begin; k < nd.tok_end; k++) {
      const uint32_t t = uint32_t(trie.toks_[k]);
      mask_[t >> 6] |= uint64_t(1) << (t & 63);
    }
    for (uint32_t e = nd.edge_begin; e < nd.edge_end; e++) {
      const int32_t ns = advance(st, trie.edge_byte_[e]);
      if (ns >= 0) walk_.push_back({trie.edge_child_[e], ns});
    }
  }
  // Only walks that were expensive are worth keeping; the memo is bounded (V/8 bytes a state).
  if (visited < 256) return mask_;
  if (masks_.size() >= kMaxMasks) masks_.clear();
  return masks_.emplace(cur_, mask_).first->second;
}

// ---- GrammarConstraint ----

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie)
    : m_(std::move(g)), trie_(std::move(trie)) {}

bool GrammarConstraint::allows(int32_t tok) {
  if (trie_->is_eog(tok)) return m_.complete();
  if (!trie_->in_trie(tok)) return false;
  return m_.allows(trie_->piece(tok));
}

void GrammarConstraint::mask(float* logits, int n_vocab) {
  const std::vector<uint64_t>& bits = m_.allowed_tokens(*trie_);
  const int n = std::min(n_vocab, trie_->n_vocab());
  const bool eog_ok = m_.complete();
  for (int i = 0; i < n; i++)
    if (!((bits[size_t(i) >> 6] >> (i & 63)) & 1) && !(eog_ok && trie_->is_eog(i))) logits[i] = -INFINITY;
  for (int i = n; i < n_vocab; i++) logits[i] = -INFINITY;  // rows past the tokenizer's vocabulary
}

bool GrammarConstraint::accept(int32_t tok) {
  if (trie_->is_eog(tok)) return m_.complete();
  if (!trie_->in_trie(tok)) return false;
  return m_.accept(trie_->piece(tok));
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

TriggerScanner::TriggerScanner(std::vector<GrammarTrigger> triggers, TriggerOptions opts)
    : triggers_(std::move(triggers)), opts_(std::move(opts)) {
  triggers_.erase(std::remove_if(triggers_.begin(), triggers_.end(), [](const GrammarTrigger& t) { return t.pieces.empty() || t.pieces[0].empty(); }), triggers_.end());
  for (const auto& t : triggers_) {
    size_t n = kGap * (t.pieces.size() - 1);
    for (const auto& p : t.pieces) n += p.size();
    max_len_ = std::max(max_len_, n);
  }
  if (opts_.think_close.empty()) think_decided_ = true;
  else if (opts_.starts_in_thinking) thinking_ = think_decided_ = true;
}

size_t TriggerScanner::match(const GrammarTrigger& t, std::string_view s, size_t at) const {
  size_t i = at;
  for (size_t k = 0; k < t.pieces.size(); k++) {
    if (k > 0)
      for (size_t gap = 0; gap < kGap && i < s.size() && is_ws(s[i]); gap++) i++;
    const std::string& p = t.pieces[k];
    if (s.size() - i < p.size() || s.compare(i, p.size(), p) != 0) return 0;
    i += p.size();
  }
  return i - at;
}

// Whether `out` (the start of an output) opens a think block: 1 yes, 0 no, -1 not known yet.
// "<think>" opens one only as the first thing the model writes.
static int opens_thinking(std::string_view out, const std::string& open) {
  if (open.empty()) return 0;
  size_t i = 0;
  while (i < out.size() && is_ws(out[i])) i++;
  const std::string_view rest = out.substr(i);
  if (rest.size() >= open.size()) return rest.compare(0, open.size(), open) == 0 ? 1 : 0;
  return open.compare(0, rest.size(), rest) == 0 ? -1 : 0;
}

void TriggerScanner::append(std::string_view piece) {
  const size_t old_len = text_.size();
  text_.append(piece.data(), piece.size());
  if (!think_decided_) {
    const int t = opens_thinking(text_, opts_.think_open);
    think_decided_ = t >= 0;
    thinking_ = t == 1;
  }
  if (thinking_) {
    const std::string& close = opts_.think_close;
    const size_t from = old_len >= close.size() ? old_len - close.size() + 1 : 0;
    const size_t at = text_.find(close, from);
    if (at != std::string::npos) {
      thinking_ = false;
      answer_ = at + close.size();
    }
  }
}

size_t TriggerScanner::scan(std::string_view piece) const {
  if (triggers_.empty() || piece.empty()) return npos;
  // Inside the think block (or not yet known to be outside one): nothing opens a call. A token
  // that holds both the end of thinking and an opening is not in any vocabulary met so far.
  if (thinking_) return npos;
  const size_t old_len = text_.size();
  if (!think_decided_) {
    std::string all = text_;
    all.append(piece.data(), piece.size());
    if (opens_thinking(all, opts_.think_open) != 0) return npos;
  }
  // A match that completes inside `piece` starts at most max_len_ bytes before its end.
  const size_t from = std::max(answer_, old_len > max_len_ ? old_len - max_len_ : size_t(0));
  std::string s;
  s.reserve(old_len - from + piece.size());
  s.append(text_, from, std::string::npos);
  s.append(piece.data(), piece.size());
  const size_t base = old_len - from;  // where `piece` begins in s
  for (size_t at = 0; at < s.size(); at++) {
    for (const auto& t : triggers_) {
      if (s[at] != t.pieces[0][0]) continue;
      const size_t n = match(t, s, at);
      if (n == 0 || at + n <= base) continue;  // no match, or one an earlier token completed
      if (t.at_start) {
        // Whitespace only, back to the answer's start (possibly older than the window).
        bool only_ws = true;
        for (size_t i = from + at; i > answer_ && only_ws;) {
          i--;
          const char c = i < old_len ? text_[i] : piece[i - old_len];
          only_ws = is_ws(c);
        }
        if (!only_ws) continue;
      }
      return from + at;
    }
  }
  return npos;
}

void CallConstraint::mask(float* logits, int n_vocab) {
  if (own_) {
    both_.assign(logits, logits + n_vocab);
    call_->mask(both_.data(), n_vocab);
    own_->mask(both_.data(), n_vocab);
    for (int i = 0; i < n_vocab; i++)
      if (both_[size_t(i)] != -INFINITY) {
        std::copy(both_.begin(), both_.end(), logits);
        return;
      }
    own_ = nullptr;  // the two grammars part: the call grammar alone decides from here
  }
  call_->mask(logits, n_vocab);
}

}  // namespace mb
