// Builds a small valid GGUF in memory, checks it parses to exactly what was written, then feeds
// the parser every truncation and a few thousand random byte-flipped variants: each must either
// parse or throw GgufError. A crash, hang or other exception fails the test (ASan build catches
// out-of-bounds reads that happen not to crash).
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf.h"
#include "../../util/tests/check.h"

using namespace mb;

namespace {
struct Writer {
  std::vector<uint8_t> b;
  template <class T> void put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
  }
  void str(const std::string& s) { put<uint64_t>(s.size()); b.insert(b.end(), s.begin(), s.end()); }
  void key(const std::string& k, uint32_t t) { str(k); put<uint32_t>(t); }
  void pad(size_t a) { while (b.size() % a) b.push_back(0); }
};

std::vector<uint8_t> build(uint32_t version, uint64_t alignment) {
  Writer w;
  w.put<uint32_t>(0x46554747);
  w.put<uint32_t>(version);
  w.put<uint64_t>(2);   // tensors
  w.put<uint64_t>(12);  // kv
  w.key("general.architecture", 8); w.str("llama");
  w.key("general.alignment", 4); w.put<uint32_t>(static_cast<uint32_t>(alignment));
  w.key("u8", 0); w.put<uint8_t>(200);
  w.key("i8", 1); w.put<int8_t>(-5);
  w.key("u16", 2); w.put<uint16_t>(60000);
  w.key("i16", 3); w.put<int16_t>(-30000);
  w.key("i32", 5); w.put<int32_t>(-7);
  w.key("f32", 6); w.put<float>(0.5f);
  w.key("flag", 7); w.put<uint8_t>(1);
  w.key("u64", 10); w.put<uint64_t>(1ull << 40);
  w.key("strs", 9); w.put<uint32_t>(8); w.put<uint64_t>(3); w.str("a"); w.str(""); w.str("ccc");
  // nested: array of 2 arrays of i32
  w.key("nested", 9); w.put<uint32_t>(9); w.put<uint64_t>(2);
  w.put<uint32_t>(5); w.put<uint64_t>(2); w.put<int32_t>(1); w.put<int32_t>(2);
  w.put<uint32_t>(5); w.put<uint64_t>(1); w.put<int32_t>(3);
  // tensor infos
  w.str("a.weight"); w.put<uint32_t>(2); w.put<uint64_t>(4); w.put<uint64_t>(3); w.put<uint32_t>(0); w.put<uint64_t>(0);
  w.str("b.weight"); w.put<uint32_t>(1); w.put<uint64_t>(64); w.put<uint32_t>(8);
  w.put<uint64_t>((48 + alignment - 1) / alignment * alignment);
  w.pad(alignment);
  size_t data0 = w.b.size();
  for (int i = 0; i < 12; ++i) w.put<float>(static_cast<float>(i));
  w.pad(alignment);
  for (size_t i = 0; i < 2 * 34; ++i) w.b.push_back(static_cast<uint8_t>(i));
  (void)data0;
  return w.b;
}

void check_valid(const std::vector<uint8_t>& buf, uint64_t alignment) {
  auto f = GgufFile::parse(buf.data(), buf.size());
  CHECK(f->get_str("general.architecture") == "llama");
  CHECK(f->get_int("u8") == 200);
  CHECK(f->get_int("i8") == -5);
  CHECK(f->get_int("u16") == 60000);
  CHECK(f->get_int("i16") == -30000);
  CHECK(f->get_int("i32") == -7);
  CHECK(f->get_float("f32", 0) == 0.5);
  CHECK(f->get_bool("flag", false));
  CHECK(f->get_int("u64") == (1ll << 40));
  CHECK(f->get_int("missing", 42) == 42);
  CHECK((f->get_str_array("strs") == std::vector<std::string>{"a", "", "ccc"}));
  CHECK((f->get_int_array("nested") == std::vector<int64_t>{1, 2, 3}));
  CHECK(f->tensors().size() == 2);
  const GgufTensor* a = f->tensor("a.weight");
  CHECK(a && a->type == GgmlType::F32 && a->n_elements() == 12 && a->n_bytes == 48);
  if (a) {
    float v;
    std::memcpy(&v, a->data + 4 * 11, 4);
    CHECK(v == 11.0f);
    CHECK(static_cast<size_t>(a->data - buf.data()) % alignment == 0);
  }
  const GgufTensor* b = f->tensor("b.weight");
  CHECK(b && b->type == GgmlType::Q8_0 && b->n_bytes == 68 && b->data[1] == 1 && b->data[67] == 67);
  CHECK(f->tensor("nope") == nullptr);
  bool threw = false;
  try { f->get_str("missing"); } catch (const GgufError&) { threw = true; }
  CHECK(threw);
}

// Returns 0 parsed, 1 GgufError.
int try_parse(const std::vector<uint8_t>& buf) {
  try {
    auto f = GgufFile::parse(buf.data(), buf.size());
    // Touch every tensor's bytes so ASan sees any bounds slip.
    unsigned s = 0;
    for (auto& t : f->tensors())
      for (size_t i = 0; i < t.n_bytes; ++i) s += t.data[i];
    (void)s;
    return 0;
  } catch (const GgufError&) {
    return 1;
  }
}

std::string err_of(const std::vector<uint8_t>& buf) {
  try { GgufFile::parse(buf.data(), buf.size()); } catch (const GgufError& e) { return e.what(); }
  return "";
}
}  // namespace

int main() {
  for (uint64_t al : {32ull, 64ull}) {
    auto buf = build(3, al);
    check_valid(buf, al);
    check_valid(build(2, al), al);
  }
  auto buf = build(3, 32);

  // Specific error messages.
  {
    auto b = buf; b[0] = 'X';
    CHECK(err_of(b).find("bad magic") != std::string::npos);
    b = buf; b[4] = 9;
    CHECK(err_of(b).find("unsupported version 9") != std::string::npos);
    b = std::vector<uint8_t>(buf.begin(), buf.begin() + 30);
    CHECK(err_of(b).find("truncated at offset") != std::string::npos);
    b = std::vector<uint8_t>(buf.begin(), buf.end() - 1);
    CHECK(err_of(b).find("'b.weight' out of file bounds") != std::string::npos);
  }

  // Every truncation must fail cleanly (the full file uses every byte of tensor data).
  int parsed = 0, errors = 0;
  for (size_t n = 0; n < buf.size(); ++n) {
    std::vector<uint8_t> t(buf.begin(), buf.begin() + n);
    if (try_parse(t) == 0) ++parsed; else ++errors;
  }
  CHECK(parsed == 0);
  std::printf("truncations: %d errors, %d parsed\n", errors, parsed);

  std::mt19937 rng(1234);
  parsed = errors = 0;
  for (int it = 0; it < 5000; ++it) {
    auto b = buf;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t pos = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: b[pos] = static_cast<uint8_t>(rng()); break;
        default: b[pos] = 0xff; break;
      }
    }
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    if (try_parse(b) == 0) ++parsed; else ++errors;
  }
  std::printf("random mutations: %d errors, %d parsed\n", errors, parsed);
  CHECK(errors > 0 && parsed > 0);  // both paths exercised, or the mutator is broken

  TEST_MAIN_END();
}
