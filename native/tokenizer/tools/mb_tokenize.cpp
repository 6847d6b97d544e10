// mb_tokenize: command-line front end to the tokenizer, used by the oracle tests and for
// debugging prompts.
//
//   mb_tokenize MODEL.gguf [--add-special] [--parse-special] [--file PATH]   text -> [ids]
//   mb_tokenize MODEL.gguf --jsonl [flags]     each stdin line is a JSON string -> one [ids] line
//   mb_tokenize MODEL.gguf --detokenize [--render-special] [--hex]
//                                              each stdin line is [ids] -> JSON string (or hex)
//   mb_tokenize MODEL.gguf --stream [--render-special]
//                                              each stdin line is [ids] -> ["hex chunk", ...], one
//                                              chunk per Utf8Stream::push plus the final flush
//   mb_tokenize MODEL.gguf --pieces [--render-special]   one line per token id: hex of its piece
//   mb_tokenize MODEL.gguf --info              {"n_vocab","bos","eos","eog":[...]}
//   --time                                     print encode time to stderr
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf.h"
#include "tokenizer.h"

namespace {

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) out += static_cast<char>(cp);
  else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Parses one JSON string literal (the whole line). Lone surrogates become U+FFFD, as they do
// when Node encodes a JS string to UTF-8.
bool parse_json_string(const std::string& s, std::string& out) {
  size_t i = s.find('"');
  if (i == std::string::npos) return false;
  ++i;
  auto hex4 = [&](size_t at, uint32_t& v) {
    if (at + 4 > s.size()) return false;
    v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      char c = s[k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return false;
    }
    return true;
  };
  while (i < s.size()) {
    char c = s[i++];
    if (c == '"') return true;
    if (c != '\\') { out += c; continue; }
    if (i >= s.size()) return false;
    char e = s[i++];
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t v;
        if (!hex4(i, v)) return false;
        i += 4;
        if (v >= 0xD800 && v < 0xDC00) {
          uint32_t lo;
          if (i + 6 <= s.size() && s[i] == '\\' && s[i + 1] == 'u' && hex4(i + 2, lo) && lo >= 0xDC00 && lo < 0xE000) {
            i += 6;
            v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
          } else {
            v = 0xFFFD;
          }
        } else if (v >= 0xDC00 && v < 0xE000) {
          v = 0xFFFD;
        }
        put_utf8(out, v);
        break;
      }
      default: return false;
    }
  }
  return false;
}

std::string json_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

// Escapes valid UTF-8 as a JSON string; callers pass Utf8Stream output, so it is always valid.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  const char* p = line.c_str();
  while (*p) {
    if ((*p >= '0' && *p <= '9') || *p == '-') {
      char* end;
      ids.push_back(static_cast<int32_t>(std::strtol(p, &end, 10)));
      p = end;
    } else {
      ++p;
    }
  }
  return ids;
}

int usage() {
  std::fprintf(stderr,
               "usage: mb_tokenize MODEL.gguf [--add-special] [--parse-special] [--file PATH] [--jsonl]\n"
               "                   [--detokenize [--render-special] [--hex]] [--stream] [--pieces] [--info] [--time]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string model = argv[1], file;
  bool add_special = false, parse_special = false, jsonl = false, detok = false, render_special = false;
  bool hex = false, info = false, timing = false, stream = false, pieces = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--add-special") add_special = true;
    else if (a == "--parse-special") parse_special = true;
    else if (a == "--jsonl") jsonl = true;
    else if (a == "--detokenize") detok = true;
    else if (a == "--render-special") render_special = true;
    else if (a == "--hex") hex = true;
    else if (a == "--stream") stream = true;
    else if (a == "--pieces") pieces = true;
    else if (a == "--info") info = true;
    else if (a == "--time") timing = true;
    else if (a == "--file" && i + 1 < argc) file = argv[++i];
    else return usage();
  }
  try {
    auto gguf = mb::GgufFile::open(model);
    auto tok = mb::Tokenizer::from_gguf(*gguf);
    if (info) {
      std::vector<int32_t> eog;
      for (int32_t i = 0; i < tok->n_vocab(); ++i)
        if (tok->is_eog(i)) eog.push_back(i);
      std::printf("{\"n_vocab\":%d,\"bos\":%d,\"eos\":%d,\"eog\":%s}\n", tok->n_vocab(), tok->bos(), tok->eos(),
                  json_ids(eog).c_str());
      return 0;
    }
    if (pieces) {
      static const char* d = "0123456789abcdef";
      std::string out;
      for (int32_t id = 0; id < tok->n_vocab(); ++id) {
        for (unsigned char c : tok->piece(id, render_special)) { out += d[c >> 4]; out += d[c & 15]; }
        out += '\n';
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
      return 0;
    }
    if (stream) {
      static const char* d = "0123456789abcdef";
      auto to_hex = [](const std::string& raw) {
        std::string h;
        for (unsigned char c : raw) { h += d[c >> 4]; h += d[c & 15]; }
        return h;
      };
      std::string line;
      while (std::getline(std::cin, line)) {
        mb::Utf8Stream st;
        std::string out = "[";
        for (int32_t id : parse_ids(line)) out += "\"" + to_hex(st.push(tok->piece(id, render_special))) + "\",";
        out += "\"" + to_hex(st.flush()) + "\"]";
        std::printf("%s\n", out.c_str());
      }
      return 0;
    }
    if (detok) {
      std::string line;
      while (std::getline(std::cin, line)) {
        std::string raw;
        for (int32_t id : parse_ids(line)) raw += tok->piece(id, render_special);
        if (hex) {
          std::string h;
          static const char* d = "0123456789abcdef";
          for (unsigned char c : raw) { h += d[c >> 4]; h += d[c & 15]; }
          std::printf("\"%s\"\n", h.c_str());
        } else {
          mb::Utf8Stream st;
          std::string text = st.push(raw) + st.flush();
          std::printf("%s\n", json_string(text).c_str());
        }
      }
      return 0;
    }
    auto encode = [&](const std::string& text) {
      auto t0 = std::chrono::steady_clock::now();
      auto ids = tok->encode(text, add_special, parse_special);
      if (timing) {
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "encode: %zu bytes -> %zu tokens in %.3f ms\n", text.size(), ids.size(), ms);
      }
      return ids;
    };
    if (jsonl) {
      std::string line;
      while (std::getline(std::cin, line)) {
        if (line.empty()) continue;
        std::string text;
        if (!parse_json_string(line, text)) {
          std::fprintf(stderr, "mb_tokenize: bad JSON string line\n");
          return 1;
        }
        std::printf("%s\n", json_ids(encode(text)).c_str());
      }
      return 0;
    }
    std::string text;
    if (file.empty()) {
      std::ostringstream ss;
      ss << std::cin.rdbuf();
      text = ss.str();
    } else {
      std::ifstream in(file, std::ios::binary);
      if (!in) { std::fprintf(stderr, "mb_tokenize: cannot read %s\n", file.c_str()); return 1; }
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    std::printf("%s\n", json_ids(encode(text)).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mb_tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
