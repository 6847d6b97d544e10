#include "unicode.h"

#include <algorithm>

namespace mb::uni {

CptCat category(uint32_t cp) {
  if (cp >= 0x110000) return kUndefined;
  // Last run whose start <= cp: search for the first entry greater than (cp, max category).
  const uint32_t key = (cp << 3) | 7u;
  const uint32_t* end = kCategoryRuns + kCategoryRunsCount;
  const uint32_t* it = std::upper_bound(kCategoryRuns, end, key);
  return static_cast<CptCat>(*(it - 1) & 7u);
}

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint32_t decode_one(std::string_view s, size_t& off) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[off + i]); };
  const auto cont = [&](size_t i) { return off + i < s.size() && (b(i) & 0xC0) == 0x80; };
  uint8_t c = b(0);
  if (c < 0x80) { off += 1; return c; }
  if ((c & 0x40) == 0) { off += 1; return 0xFFFD; }
  if ((c & 0x20) == 0) {
    if (!cont(1)) { off += 1; return 0xFFFD; }
    uint32_t r = ((c & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    off += 2;
    return r;
  }
  if ((c & 0x10) == 0) {
    if (!cont(1) || !cont(2)) { off += 1; return 0xFFFD; }
    uint32_t r = ((c & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    off += 3;
    return r;
  }
  if ((c & 0x08) == 0) {
    if (!cont(1) || !cont(2) || !cont(3)) { off += 1; return 0xFFFD; }
    uint32_t r = ((c & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
    off += 4;
    return r;
  }
  off += 1;
  return 0xFFFD;
}

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t off = 0;
  while (off < s.size()) out.push_back(decode_one(s, off));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    // Codepoints up to 0x1FFFFF can come out of the lenient decoder; re-encode them the same way.
    out += static_cast<char>(0xF0 | ((cp >> 18) & 0x07));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace mb::uni
