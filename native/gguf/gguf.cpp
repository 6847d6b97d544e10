// GGUF reader. Every read goes through Cursor, which checks bounds before touching memory, so a
// truncated or corrupted file becomes a GgufError instead of a wild read.
#include "gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace mb {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
// Caps that keep a corrupted count from turning into a multi-GB allocation before the bounds
// check on the data would catch it.
constexpr uint64_t kMaxDims = 4;

enum GgufValType : uint32_t {
  T_U8 = 0, T_I8 = 1, T_U16 = 2, T_I16 = 3, T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7,
  T_STRING = 8, T_ARRAY = 9, T_U64 = 10, T_I64 = 11, T_F64 = 12,
};

class Cursor {
 public:
  Cursor(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  size_t pos() const { return p_; }
  size_t remaining() const { return n_ - p_; }
  void need(size_t k, const char* what) const {
    if (k > n_ - p_)
      throw GgufError(std::string("gguf: truncated at offset ") + std::to_string(p_) + " reading " + what +
                      " (need " + std::to_string(k) + " bytes, file has " + std::to_string(n_) + ")");
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, d_ + p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    uint64_t len = get<uint64_t>(what);
    if (len > remaining())
      throw GgufError(std::string("gguf: truncated at offset ") + std::to_string(p_) + ": " + what +
                      " string of length " + std::to_string(len) + " exceeds file");
    std::string s(reinterpret_cast<const char*>(d_ + p_), static_cast<size_t>(len));
    p_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t p_ = 0;
};

// Minimum serialized size of one value of a type; used to reject absurd array counts up front.
size_t min_size(uint32_t t) {
  switch (t) {
    case T_U8: case T_I8: case T_BOOL: return 1;
    case T_U16: case T_I16: return 2;
    case T_U32: case T_I32: case T_F32: return 4;
    case T_U64: case T_I64: case T_F64: case T_STRING: return 8;
    case T_ARRAY: return 12;
    default: return 0;
  }
}

std::variant<int64_t, uint64_t, double, bool, std::string> read_scalar(Cursor& c, uint32_t t, const std::string& key) {
  switch (t) {
    case T_U8: return static_cast<uint64_t>(c.get<uint8_t>("u8"));
    case T_I8: return static_cast<int64_t>(c.get<int8_t>("i8"));
    case T_U16: return static_cast<uint64_t>(c.get<uint16_t>("u16"));
    case T_I16: return static_cast<int64_t>(c.get<int16_t>("i16"));
    case T_U32: return static_cast<uint64_t>(c.get<uint32_t>("u32"));
    case T_I32: return static_cast<int64_t>(c.get<int32_t>("i32"));
    case T_U64: return c.get<uint64_t>("u64");
    case T_I64: return c.get<int64_t>("i64");
    case T_F32: return static_cast<double>(c.get<float>("f32"));
    case T_F64: return c.get<double>("f64");
    case T_BOOL: {
      uint8_t b = c.get<uint8_t>("bool");
      if (b > 1) throw GgufError("gguf: key '" + key + "': invalid bool byte " + std::to_string(b));
      return b != 0;
    }
    case T_STRING: return c.str("string value");
    default:
      throw GgufError("gguf: key '" + key + "': unknown value type " + std::to_string(t) + " at offset " +
                      std::to_string(c.pos()));
  }
}

// Nested arrays are flattened into the outer GgufArray: the public type has no nesting, and no
// consumer needs the structure (llama.cpp itself rejects nested arrays for the keys it reads).
void read_array(Cursor& c, const std::string& key, GgufArray& out, int depth) {
  if (depth > 8) throw GgufError("gguf: key '" + key + "': arrays nested too deeply");
  uint32_t et = c.get<uint32_t>("array type");
  uint64_t n = c.get<uint64_t>("array length");
  size_t ms = min_size(et);
  if (ms == 0)
    throw GgufError("gguf: key '" + key + "': unknown array element type " + std::to_string(et));
  if (n > c.remaining() / ms)
    throw GgufError("gguf: truncated at offset " + std::to_string(c.pos()) + ": key '" + key + "' array of " +
                    std::to_string(n) + " elements exceeds file");
  if (et == T_ARRAY) {
    for (uint64_t i = 0; i < n; ++i) read_array(c, key, out, depth + 1);
    return;
  }
  out.reserve(out.size() + static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) out.push_back(read_scalar(c, et, key));
}

bool known_type(uint32_t t) {
  switch (static_cast<GgmlType>(t)) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0:
    case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q8_1: case GgmlType::Q2_K: case GgmlType::Q3_K:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::Q8_K: case GgmlType::BF16:
    case GgmlType::MXFP4:
      return true;
  }
  return false;
}

bool mul_overflow(uint64_t a, uint64_t b, uint64_t* r) { return __builtin_mul_overflow(a, b, r); }

}  // namespace

int64_t GgufTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

size_t ggml_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: return 2;
    case GgmlType::BF16: return 2;
    case GgmlType::Q4_0: return 18;
    case GgmlType::Q4_1: return 20;
    case GgmlType::Q5_0: return 22;
    case GgmlType::Q5_1: return 24;
    case GgmlType::Q8_0: return 34;
    case GgmlType::Q8_1: return 36;
    case GgmlType::Q2_K: return 84;
    case GgmlType::Q3_K: return 110;
    case GgmlType::Q4_K: return 144;
    case GgmlType::Q5_K: return 176;
    case GgmlType::Q6_K: return 210;
    case GgmlType::Q8_K: return 292;
    case GgmlType::MXFP4: return 17;
  }
  throw GgufError("gguf: unknown type " + std::to_string(static_cast<uint32_t>(t)));
}

int ggml_block_elems(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return 1;
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q8_1: case GgmlType::MXFP4: return 32;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::Q8_K: return 256;
  }
  throw GgufError("gguf: unknown type " + std::to_string(static_cast<uint32_t>(t)));
}

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "F32";
    case GgmlType::F16: return "F16";
    case GgmlType::BF16: return "BF16";
    case GgmlType::Q4_0: return "Q4_0";
    case GgmlType::Q4_1: return "Q4_1";
    case GgmlType::Q5_0: return "Q5_0";
    case GgmlType::Q5_1: return "Q5_1";
    case GgmlType::Q8_0: return "Q8_0";
    case GgmlType::Q8_1: return "Q8_1";
    case GgmlType::Q2_K: return "Q2_K";
    case GgmlType::Q3_K: return "Q3_K";
    case GgmlType::Q4_K: return "Q4_K";
    case GgmlType::Q5_K: return "Q5_K";
    case GgmlType::Q6_K: return "Q6_K";
    case GgmlType::Q8_K: return "Q8_K";
    case GgmlType::MXFP4: return "MXFP4";
  }
  return "unknown";
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->size_ = size;
  Cursor c(data, size);

  uint32_t magic = c.get<uint32_t>("magic");
  if (magic != kMagic) throw GgufError("gguf: bad magic (not a GGUF file)");
  uint32_t version = c.get<uint32_t>("version");
  // v1 used 32-bit counts and lengths; nothing produces it any more.
  if (version != 2 && version != 3)
    throw GgufError("gguf: unsupported version " + std::to_string(version) + " (expected 2 or 3)");
  uint64_t n_tensors = c.get<uint64_t>("tensor count");
  uint64_t n_kv = c.get<uint64_t>("metadata count");
  // Each kv needs at least 8 (key len) + 4 (type) + 1 bytes; each tensor info at least 8+4+8+4+8.
  if (n_kv > c.remaining() / 13)
    throw GgufError("gguf: truncated at offset " + std::to_string(c.pos()) + ": metadata count " + std::to_string(n_kv) + " exceeds file");
  if (n_tensors > c.remaining() / 32)
    throw GgufError("gguf: truncated at offset " + std::to_string(c.pos()) + ": tensor count " + std::to_string(n_tensors) + " exceeds file");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str("metadata key");
    uint32_t t = c.get<uint32_t>("metadata type");
    GgufValue v;
    if (t == T_ARRAY) {
      GgufArray arr;
      read_array(c, key, arr, 0);
      v = std::move(arr);
    } else {
      auto s = read_scalar(c, t, key);
      std::visit([&](auto&& x) { v = std::move(x); }, s);
    }
    if (f->kv_.count(key)) throw GgufError("gguf: duplicate metadata key '" + key + "'");
    f->kv_.emplace(std::move(key), std::move(v));
  }

  uint64_t alignment = 32;
  if (const GgufValue* a = f->find("general.alignment")) {
    if (auto* u = std::get_if<uint64_t>(a)) alignment = *u;
    else if (auto* s = std::get_if<int64_t>(a)) alignment = *s > 0 ? static_cast<uint64_t>(*s) : 0;
    else throw GgufError("gguf: general.alignment is not an integer");
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 20))
      throw GgufError("gguf: general.alignment " + std::to_string(alignment) + " is not a power of two");
  }

  struct Info { uint64_t offset; };
  std::vector<Info> infos;
  infos.reserve(static_cast<size_t>(n_tensors));
  f->tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.str("tensor name");
    uint32_t nd = c.get<uint32_t>("tensor n_dims");
    if (nd == 0 || nd > kMaxDims)
      throw GgufError("gguf: tensor '" + t.name + "' has " + std::to_string(nd) + " dimensions");
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t ne = c.get<uint64_t>("tensor dim");
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || mul_overflow(n_el, ne, &n_el) ||
          n_el > (uint64_t(1) << 60))
        throw GgufError("gguf: tensor '" + t.name + "' has an invalid shape");
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    uint32_t ty = c.get<uint32_t>("tensor type");
    if (!known_type(ty))
      throw GgufError("gguf: tensor '" + t.name + "' has unknown type " + std::to_string(ty));
    t.type = static_cast<GgmlType>(ty);
    uint64_t off = c.get<uint64_t>("tensor offset");
    size_t be = static_cast<size_t>(ggml_block_elems(t.type));
    if (t.ne[0] % static_cast<int64_t>(be) != 0)
      throw GgufError("gguf: tensor '" + t.name + "': row length " + std::to_string(t.ne[0]) +
                      " is not a multiple of the " + ggml_type_name(t.type) + " block size");
    t.n_bytes = static_cast<size_t>(n_el / be * ggml_block_bytes(t.type));
    if (off % alignment != 0)
      throw GgufError("gguf: tensor '" + t.name + "' offset " + std::to_string(off) + " is not aligned");
    if (f->tensor_index_.count(t.name)) throw GgufError("gguf: duplicate tensor '" + t.name + "'");
    f->tensor_index_.emplace(t.name, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
    infos.push_back({off});
  }

  uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  if (n_tensors > 0 && data_start > size)
    throw GgufError("gguf: truncated at offset " + std::to_string(size) + ": tensor data would start at " + std::to_string(data_start) +
                    " beyond file size " + std::to_string(size));
  for (size_t i = 0; i < f->tensors_.size(); ++i) {
    GgufTensor& t = f->tensors_[i];
    uint64_t off = infos[i].offset;
    if (off > size - data_start || t.n_bytes > size - data_start - off)
      throw GgufError("gguf: tensor '" + t.name + "' out of file bounds (offset " + std::to_string(off) +
                      ", " + std::to_string(t.n_bytes) + " bytes, data section " +
                      std::to_string(size - data_start) + " bytes)");
    t.data = data + data_start + off;
  }
  return f;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw GgufError("gguf: cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw GgufError("gguf: cannot stat '" + path + "': " + std::strerror(e));
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw GgufError("gguf: '" + path + "' is empty");
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) throw GgufError("gguf: cannot mmap '" + path + "': " + std::strerror(e));
  std::unique_ptr<GgufFile> f;
  try {
    f = parse(static_cast<const uint8_t*>(m), size);
  } catch (const GgufError& err) {
    munmap(m, size);
    throw GgufError(std::string(err.what()) + " [" + path + "]");
  }
  f->map_ = m;
  return f;
}

GgufFile::~GgufFile() {
  if (map_) munmap(map_, size_);
}

bool GgufFile::has(const std::string& key) const { return kv_.count(key) != 0; }

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::string GgufFile::get_str(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw GgufError("gguf: missing key '" + key + "'");
  if (auto* s = std::get_if<std::string>(v)) return *s;
  throw GgufError("gguf: key '" + key + "' is not a string");
}

std::string GgufFile::get_str(const std::string& key, const std::string& dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  throw GgufError("gguf: key '" + key + "' is not a string");
}

namespace {
bool as_int(const GgufValue& v, int64_t* out) {
  if (auto* i = std::get_if<int64_t>(&v)) { *out = *i; return true; }
  if (auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(*u);
    return true;
  }
  if (auto* b = std::get_if<bool>(&v)) { *out = *b; return true; }
  return false;
}
template <class E>
bool elem_int(const E& v, int64_t* out) {
  if (auto* i = std::get_if<int64_t>(&v)) { *out = *i; return true; }
  if (auto* u = std::get_if<uint64_t>(&v)) { *out = static_cast<int64_t>(*u); return true; }
  if (auto* b = std::get_if<bool>(&v)) { *out = *b; return true; }
  return false;
}
}  // namespace

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw GgufError("gguf: missing key '" + key + "'");
  int64_t r;
  if (!as_int(*v, &r)) throw GgufError("gguf: key '" + key + "' is not an integer");
  return r;
}

int64_t GgufFile::get_int(const std::string& key, int64_t dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  int64_t r;
  if (!as_int(*v, &r)) throw GgufError("gguf: key '" + key + "' is not an integer");
  return r;
}

double GgufFile::get_float(const std::string& key, double dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (auto* d = std::get_if<double>(v)) return *d;
  int64_t r;
  if (as_int(*v, &r)) return static_cast<double>(r);
  throw GgufError("gguf: key '" + key + "' is not a number");
}

bool GgufFile::get_bool(const std::string& key, bool dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (auto* b = std::get_if<bool>(v)) return *b;
  int64_t r;
  if (as_int(*v, &r)) return r != 0;
  throw GgufError("gguf: key '" + key + "' is not a bool");
}

std::vector<std::string> GgufFile::get_str_array(const std::string& key) const {
  std::vector<std::string> out;
  const GgufValue* v = find(key);
  if (!v) return out;
  auto* a = std::get_if<GgufArray>(v);
  if (!a) throw GgufError("gguf: key '" + key + "' is not an array");
  out.reserve(a->size());
  for (auto& e : *a) {
    auto* s = std::get_if<std::string>(&e);
    if (!s) throw GgufError("gguf: key '" + key + "' is not a string array");
    out.push_back(*s);
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  std::vector<int64_t> out;
  const GgufValue* v = find(key);
  if (!v) return out;
  auto* a = std::get_if<GgufArray>(v);
  if (!a) throw GgufError("gguf: key '" + key + "' is not an array");
  out.reserve(a->size());
  for (auto& e : *a) {
    int64_t r;
    if (!elem_int(e, &r)) throw GgufError("gguf: key '" + key + "' is not an integer array");
    out.push_back(r);
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  std::vector<double> out;
  const GgufValue* v = find(key);
  if (!v) return out;
  auto* a = std::get_if<GgufArray>(v);
  if (!a) throw GgufError("gguf: key '" + key + "' is not an array");
  out.reserve(a->size());
  for (auto& e : *a) {
    if (auto* d = std::get_if<double>(&e)) { out.push_back(*d); continue; }
    int64_t r;
    if (!elem_int(e, &r)) throw GgufError("gguf: key '" + key + "' is not a numeric array");
    out.push_back(static_cast<double>(r));
  }
  return out;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace mb
