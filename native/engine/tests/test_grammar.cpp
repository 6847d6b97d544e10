// The grammar engine: parse errors, byte-level acceptance, completion, the vocabulary trie mask
// (checked against a token-by-token brute force on a toy vocabulary) and the sampler hook.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../grammar.h"
#include "../sampler.h"
#include "../../util/tests/check.h"

using namespace mb;

static std::string parse_error(const std::string& text) {
  try {
    Grammar::parse(text);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

static bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// "1" complete, "p" prefix only, "0" rejected.
static std::string run(const std::shared_ptr<const Grammar>& g, const std::string& bytes) {
  GrammarMatcher m(g);
  if (!m.accept(bytes)) return "0";
  return m.complete() ? "1" : "p";
}

// A JSON grammar in the converter's fixed spacing (", " and ": ").
static const char* kJson = R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( string ": " value ( ", " string ": " value )* )? "}"
array  ::= "[" ( value ( ", " value )* )? "]"
string ::= "\"" char* "\""
char   ::= [\x20-\x21\x23-\x5b\x5d-\x7f] | utf8 | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
utf8   ::= [\xc2-\xdf] [\x80-\xbf] | [\xe0-\xef] [\x80-\xbf]{2} | [\xf0-\xf4] [\x80-\xbf]{3}
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]{1,2} )?
)";

int main() {
  {  // parse errors are GrammarError with a position, never a crash
    CHECK(contains(parse_error(""), "no 'root' rule"));
    CHECK(contains(parse_error("a ::= \"x\""), "no 'root' rule"));
    CHECK(contains(parse_error("root ::= foo"), "undefined rule 'foo'"));
    CHECK(contains(parse_error("root ::= \"abc"), "unterminated string"));
    CHECK(contains(parse_error("root ::= \"a\\q\""), "unknown escape"));
    CHECK(contains(parse_error("root ::= [a-"), "unterminated character class"));
    CHECK(contains(parse_error("root ::= []"), "empty character class"));
    CHECK(contains(parse_error("root ::= [z-a]"), "out of order"));
    CHECK(contains(parse_error("root ::= [\xC3\xA9]"), "non-ASCII"));
    CHECK(contains(parse_error("root ::= \"a\"{3,1}"), "n < m"));
    CHECK(contains(parse_error("root ::= \"a\"{1000000}"), "repetition count over"));
    CHECK(contains(parse_error("root ::= \"a\" )"), "unbalanced"));
    CHECK(contains(parse_error("root ::= ( \"a\""), "unclosed"));
    CHECK(contains(parse_error("root ::= \"a\"\nroot ::= \"b\""), "defined twice"));
    CHECK(contains(parse_error("root ::= \"a\" ::= \"b\""), "line 1 col"));
    CHECK(contains(parse_error("root ::= \"x\"\n  \"y\" %"), "line 2 col 7"));
    CHECK(contains(parse_error("root ::= root \"a\""), "left-recursive"));
    CHECK(contains(parse_error("root ::= a\na ::= b? a \"x\"\nb ::= \"y\""), "left-recursive"));
    CHECK(contains(parse_error("root ::= (\"a\"?)*"), "left-recursive"));
    CHECK(contains(parse_error("root ::= \"\\x4\""), "two hex digits"));
    CHECK(contains(parse_error("root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')')), "nested too deeply"));
    CHECK(contains(parse_error("root ::= " + std::string(2000, '(')), "nested too deeply"));
    {
      std::string big = "root ::= x\nx ::= ";
      for (int i = 0; i < 200; i++) big += "\"a\"{0,99999} ";
      CHECK(contains(parse_error(big), "too large"));
    }
    CHECK(parse_error("root ::= " + std::string(500, '(') + "\"a\"" + std::string(500, ')')).empty());
    CHECK(parse_error(kJson).empty());
    CHECK(parse_error("# comment only line\nroot ::= \"a\" # trailing\n  | \"b\"\n").empty());
  }
  {  // literals, sequences, alternatives, completion
    auto g = Grammar::parse("root ::= \"ab\" ( \"c\" | \"de\" ) \"\\n\"");
    CHECK_EQ(run(g, ""), std::string("p"));
    CHECK_EQ(run(g, "ab"), std::string("p"));
    CHECK_EQ(run(g, "abc\n"), std::string("1"));
    CHECK_EQ(run(g, "abde\n"), std::string("1"));
    CHECK_EQ(run(g, "abd\n"), std::string("0"));
    CHECK_EQ(run(g, "abc\nx"), std::string("0"));
    GrammarMatcher m(g);
    CHECK(!m.accept("ax"));     // rejected input leaves the state unchanged
    CHECK(m.accept("a"));
    CHECK(m.allows("bc"));
    CHECK(!m.allows("bx"));
    CHECK(m.accept("bc\n"));
    CHECK(m.complete());
    CHECK(!m.can_continue());
  }
  {  // repetitions: * + ? {m} {m,} {m,n}
    auto g = Grammar::parse("root ::= \"a\"{2,4} \"b\"* \"c\"+ \"d\"? \"e\"{2} \"f\"{1,}");
    CHECK_EQ(run(g, "aacee" "f"), std::string("1"));
    CHECK_EQ(run(g, "aaaabbbcccdeeffff"), std::string("1"));
    CHECK_EQ(run(g, "acee" "f"), std::string("0"));
    CHECK_EQ(run(g, "aaaaacee" "f"), std::string("0"));
    CHECK_EQ(run(g, "aaceee" "f"), std::string("0"));
    CHECK_EQ(run(g, "aacdde" "f"), std::string("0"));
    CHECK_EQ(run(g, "aace"), std::string("p"));
    auto opt = Grammar::parse("root ::= \"x\"?");
    CHECK_EQ(run(opt, ""), std::string("1"));
    GrammarMatcher m(opt);
    CHECK(m.complete() && m.can_continue());  // complete, yet "x" may still follow
  }
  {  // byte classes: ranges, negation, bytes >= 0x80, any byte
    auto g = Grammar::parse("root ::= [^\"\\\\\\x00-\\x1f]* \"\\\"\" . [\\x80-\\xff]");
    CHECK_EQ(run(g, "hi \xC3\xA9!\"z\x80"), std::string("1"));
    CHECK_EQ(run(g, "a\\b\"z\x80"), std::string("0"));
    CHECK_EQ(run(g, "a\nb"), std::string("0"));
    CHECK_EQ(run(g, "\"\x01\xFF"), std::string("1"));
    CHECK_EQ(run(g, "\"\x01\x7F"), std::string("0"));
    auto u = Grammar::parse("root ::= \"\\u00e9\\u20ac\"");  // \u escapes are UTF-8 in literals
    CHECK_EQ(run(u, "\xC3\xA9\xE2\x82\xAC"), std::string("1"));
  }
  {  // the JSON grammar
    auto g = Grammar::parse(kJson);
    CHECK_EQ(run(g, "{\"a\": [1, -2.5e10, \"x\\\"y\\u00e9\"], \"b\": {\"c\": null}}"), std::string("1"));
    CHECK_EQ(run(g, "{\"caf\xC3\xA9\": true}"), std::string("1"));
    CHECK_EQ(run(g, "{\"a\":1}"), std::string("0"));       // fixed spacing
    CHECK_EQ(run(g, "{\"a\": 01}"), std::string("0"));
    CHECK_EQ(run(g, "{\"a\": 1,}"), std::string("0"));
    CHECK_EQ(run(g, "{\"a\n\": 1}"), std::string("0"));
    CHECK_EQ(run(g, "{\"\xC3\": 1}"), std::string("0"));  // truncated UTF-8 sequence
    CHECK_EQ(run(g, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]"), std::string("1"));
    CHECK_EQ(run(g, "{\"a\": [1, 2"), std::string("p"));
    // Ambiguity stays bounded: a long string keeps one state per step.
    GrammarMatcher m(g);
    CHECK(m.accept("\""));
    const size_t before = m.n_states();
    for (int i = 0; i < 1000; i++) CHECK(m.accept("abc def "));
    CHECK(m.n_states() <= before + 8);
    CHECK(m.accept("\""));
    CHECK(m.complete());
  }
  {  // the vocabulary trie: the mask equals a token-by-token check, in every state met
    std::vector<std::string> pieces = {"{", "}", "\"", "\": ", ", ", "a", "ab", "abc", "b", "\"a", "\"}",
                                       "1", "12", "-", "null", "nu", "ll", "[", "]", " ", "\xC3", "\xA9",
                                       "\xC3\xA9", "", "<eos>", "true", "\\", "\\n", "{\"", ": ", "0", "e", "u", "."};
    std::vector<uint8_t> eog(pieces.size(), 0);
    const int32_t kEos = 24;
    eog[kEos] = 1;
    auto trie = std::make_shared<const TokenTrie>(pieces, eog);
    CHECK(!trie->in_trie(23));  // empty piece: left out
    CHECK(!trie->in_trie(kEos));
    CHECK(trie->is_eog(kEos));
    auto g = Grammar::parse(kJson);
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; trial++) {
      GrammarConstraint c(g, trie);
      std::vector<int32_t> hist;
      for (int step = 0; step < 30; step++) {
        std::vector<float> logits(pieces.size(), 1.f);
        c.mask(logits.data(), int(logits.size()));
        std::vector<int32_t> ok;
        for (int32_t t = 0; t < int32_t(pieces.size()); t++) {
          const bool brute = t == kEos ? c.matcher().complete() : (trie->in_trie(t) && c.matcher().allows(pieces[size_t(t)]));
          CHECK_EQ(logits[size_t(t)] == 1.f, brute);
          CHECK_EQ(c.allows(t), brute);
          if (brute) ok.push_back(t);
        }
        if (ok.empty()) {
          std::fprintf(stderr, "dead end after:");
          for (int32_t t : hist) std::fprintf(stderr, " [%s]", pieces[size_t(t)].c_str());
          std::fprintf(stderr, "\n");
        }
        CHECK(!ok.empty());
        if (ok.empty()) break;
        const int32_t pick = ok[rng() % ok.size()];
        CHECK(c.accept(pick));
        hist.push_back(pick);
        if (pick == kEos || c.finished()) break;
      }
    }
    // EOG only once complete; "only EOG" once complete with nothing more possible.
    GrammarConstraint c(Grammar::parse("root ::= \"ab\""), trie);
    CHECK(!c.allows(kEos));
    CHECK(c.accept(5));  // "a"
    CHECK(!c.allows(kEos));
    CHECK(c.allows(8));  // "b"
    CHECK(!c.allows(6));
    CHECK(c.accept(8));
    CHECK(c.finished());
    std::vector<float> logits(pieces.size(), 0.f);
    c.mask(logits.data(), int(logits.size()));
    for (int32_t t = 0; t < int32_t(pieces.size()); t++) CHECK_EQ(logits[size_t(t)] == 0.f, t == kEos);
    // A multi-byte piece and its split bytes are both offered.
    GrammarConstraint e(Grammar::parse("root ::= \"\\u00e9\""), trie);
    CHECK(e.allows(20) && e.allows(22) && !e.allows(21));
  }
  {  // the sampler honours the constraint: greedy fast path, masked greedy, sampling, nothing allowed
    std::vector<std::string> pieces = {"x", "y", "z", "q"};
    std::vector<uint8_t> eog = {0, 0, 0, 1};
    auto trie = std::make_shared<const TokenTrie>(pieces, eog);
    auto g = Grammar::parse("root ::= [yz] \"x\"");
    SamplerParams p;
    {
      GrammarConstraint c(g, trie);
      std::vector<float> l = {5.f, 1.f, 2.f, 9.f};
      CHECK_EQ(Sampler(p).sample(l.data(), 4, &c), 2);  // x and EOS rejected: z is the best allowed
      CHECK(c.accept(2));
      std::vector<float> l2 = {5.f, 1.f, 2.f, 9.f};
      CHECK_EQ(Sampler(p).sample(l2.data(), 4, &c), 0);
      CHECK(c.accept(0));
      std::vector<float> l3 = {5.f, 1.f, 2.f, 0.f};
      CHECK_EQ(Sampler(p).sample(l3.data(), 4, &c), 3);  // complete: only EOS
    }
    {
      p.temperature = 1.f;
      p.has_seed = true;
      p.seed = 3;
      p.top_k = 3;
      Sampler s(p);
      for (int i = 0; i < 200; i++) {
        GrammarConstraint c(g, trie);
        std::vector<float> l = {5.f, 1.f, 1.5f, 9.f};
        const int32_t t = s.sample(l.data(), 4, &c);
        CHECK(t == 1 || t == 2);
      }
    }
    {
      GrammarConstraint c(Grammar::parse("root ::= \"w\""), trie);  // no token spells "w"
      std::vector<float> l = {1.f, 2.f, 3.f, 4.f};
      CHECK_EQ(Sampler(SamplerParams{}).sample(l.data(), 4, &c), -1);
      SamplerParams t;
      t.temperature = 0.7f;
      std::vector<float> l2 = {1.f, 2.f, 3.f, 4.f};
      CHECK_EQ(Sampler(t).sample(l2.data(), 4, &c), -1);
    }
  }
  {  // long generations stay in bounded memory: past the cache limits the matcher rebuilds its
     // caches from the current state (20000 nesting levels = 20000 distinct states here)
    auto g = Grammar::parse("root ::= \"(\" root \")\" | [0-9]{1,3}");
    GrammarMatcher m(g);
    for (int i = 0; i < 20000; i++) CHECK(m.accept("("));
    CHECK(m.n_states() < 20000);
    CHECK(m.accept("42"));
    CHECK(!m.accept(")x"));
    for (int i = 0; i < 20000; i++) CHECK(m.accept(")"));
    CHECK(m.complete());
    CHECK(!m.can_continue());
  }
  {  // find_dead_end: nested alternatives that begin alike double the stacks alive per level, so
     // 12 levels of "[" pass the matcher's stack limit; the search finds that input up front,
     // and a generation that writes it meets the same dead end.
    std::string amb = "root ::= \"{\\\"a\\\": \" d0 \"}\"\n";
    for (int i = 0; i < 13; i++)
      amb += "d" + std::to_string(i) + " ::= \"[\" d" + std::to_string(i + 1) + " \"]\" | \"[\" d" + std::to_string(i + 1) + " \", \" d" + std::to_string(i + 1) + " \"]\"\n";
    amb += "d13 ::= [0-9]\n";
    auto g = Grammar::parse(amb);
    std::string input;
    GrammarMatcher probe(g);
    CHECK(probe.find_dead_end(2048, input));
    CHECK(contains(probe.error(), "too ambiguous"));
    CHECK_EQ(input, std::string("{\"a\": ") + std::string(12, '['));
    GrammarMatcher gen(g);
    CHECK(gen.accept(input.substr(0, input.size() - 1)));
    CHECK(!gen.accept("["));
    CHECK(contains(gen.error(), "too ambiguous"));
    // The same grammar 8 levels deep stays under the limit: no dead end, and it generates.
    std::string ok = "root ::= d5\n";
    for (int i = 5; i < 13; i++)
      ok += "d" + std::to_string(i) + " ::= \"[\" d" + std::to_string(i + 1) + " \"]\" | \"[\" d" + std::to_string(i + 1) + " \", \" d" + std::to_string(i + 1) + " \"]\"\n";
    ok += "d13 ::= [0-9]\n";
    GrammarMatcher fine(Grammar::parse(ok));
    input.clear();
    CHECK(!fine.find_dead_end(2048, input));
    CHECK(fine.error().empty());
    CHECK(fine.accept("[[[[[[[[1]]]]]]]]"));  // the search left the matcher at its start
    CHECK(fine.complete());
    // JSON itself (unbounded nesting) has none within the bound either.
    GrammarMatcher json(Grammar::parse(kJson));
    CHECK(!json.find_dead_end(2048, input));
    CHECK(json.error().empty());
  }
  {  // lazy-grammar triggers: where an opening begins, however the tokens split it
    std::vector<GrammarTrigger> ts = {
        {{"<tool_call>"}, false},
        {{"{", "\"name\"", ":"}, true},
        {{"```json", "{", "\"name\"", ":"}, false},
    };
    auto first = [&](const std::vector<std::string>& pieces, bool thinking = false) -> std::string {
      TriggerScanner sc(ts, TriggerOptions{"<think>", "</think>", thinking});
      for (size_t i = 0; i < pieces.size(); i++) {
        const size_t at = sc.scan(pieces[i]);
        if (at != TriggerScanner::npos) return std::to_string(i) + "@" + std::to_string(at);
        sc.append(pieces[i]);
      }
      return "-";
    };
    CHECK_EQ(first({"Hi", " there", "<tool_call>"}), std::string("2@8"));
    CHECK_EQ(first({"Hi <tool", "_call>\n{"}), std::string("1@3"));  // completes inside a later token
    CHECK_EQ(first({"{\"", "name", "\":", " \"x\""}), std::string("2@0"));
    CHECK_EQ(first({"  \n{", " \"name\"", " : \"a"}), std::string("2@3"));  // whitespace before and inside
    CHECK_EQ(first({"{\"name\": \"a\"}"}), std::string("0@0"));                // one token holds it all
    CHECK_EQ(first({"ok ", "{\"name\":"}), std::string("-"));                   // bare: only at the start
    CHECK_EQ(first({"<think>a</think>", "\n\n", "{\"name\":"}), std::string("2@18"));  // or after thinking
    CHECK_EQ(first({"<think>", "use <tool_call>?", "</think>", "<tool_call>"}), std::string("3@31"));  // never inside it
    CHECK_EQ(first({"I <tool_call>"}, true), std::string("-"));  // the prompt opened the think block
    CHECK_EQ(first({"x</think>", "{\"name\":"}, true), std::string("1@9"));
    CHECK_EQ(first({"a", "<think>", "<tool_call>"}), std::string("2@8"));  // <think> after text is text
    CHECK_EQ(first({"<tool_call>"}), std::string("0@0"));  // the very first token
    CHECK_EQ(first({"<", "tool_call>"}), std::string("1@0"));  // a start that could have been <think>
    CHECK_EQ(first({"Sure:\n```json\n{\n  \"name\": \"f\""}), std::string("0@6"));
    CHECK_EQ(first({"```json\n{\"key\": 1}\n```"}), std::string("-"));
    CHECK_EQ(first({"{", "\"name\"", std::string(TriggerScanner::kGap + 1, ' '), ":"}), std::string("-"));  // the gap is bounded
    // Past the window: a long output costs the same per token and still finds a late opening.
    std::vector<std::string> lots(500, "text ");
    lots.push_back("<tool_");
    lots.push_back("call>");
    CHECK_EQ(first(lots), std::string("501@2500"));
  }
  {  // after a trigger, a request's own grammar narrows the call grammar until the two part
    std::vector<std::string> pieces = {"a", "b", "c", "<eos>"};
    auto trie = std::make_shared<const TokenTrie>(pieces, std::vector<uint8_t>{0, 0, 0, 1});
    GrammarConstraint call(Grammar::parse("root ::= [ab]+"), trie);
    GrammarConstraint own(Grammar::parse("root ::= \"b\" \"c\""), trie);
    CallConstraint both(&call, &own);
    std::vector<float> l = {3, 1, 2, 0};
    both.mask(l.data(), 4);
    CHECK(l[0] == -INFINITY && l[1] == 1 && l[2] == -INFINITY);  // only b pleases both
    CHECK(both.own() != nullptr);
    CHECK(call.accept(1) && own.accept(1));
    std::vector<float> l2 = {3, 1, 2, 0};
    both.mask(l2.data(), 4);  // own wants c, the call grammar forbids it: own gives way
    CHECK(both.own() == nullptr);
    CHECK(l2[0] == 3 && l2[1] == 1 && l2[2] == -INFINITY);
  }
  TEST_MAIN_END();
}
