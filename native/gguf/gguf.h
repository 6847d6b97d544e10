// GGUF v3 reader over an mmap'd file. Knows nothing of models: it exposes metadata and the
// tensor table; the per-architecture loaders in native/model/ interpret them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace mb {

// ggml type ids as stored in GGUF (values fixed by the format).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, BF16 = 30, MXFP4 = 39,
};

struct GgufError : std::runtime_error { using std::runtime_error::runtime_error; };

using GgufArray = std::vector<std::variant<int64_t, uint64_t, double, bool, std::string>>;
// Scalars are widened: signed ints -> int64_t, unsigned -> uint64_t, floats -> double.
using GgufValue = std::variant<int64_t, uint64_t, double, bool, std::string, GgufArray>;

struct GgufTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the contiguous (row) dimension
  const uint8_t* data;       // points into the mapping
  size_t n_bytes;
  int64_t n_elements() const;
};

class GgufFile {
 public:
  // Throws GgufError naming the problem (bad magic, version, truncation, offsets, unknown type).
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parse from memory (used by the fuzz test); the buffer must outlive the object.
  static std::unique_ptr<GgufFile> parse(const uint8_t* data, size_t size);
  ~GgufFile();

  bool has(const std::string& key) const;
  const GgufValue* find(const std::string& key) const;
  std::string get_str(const std::string& key) const;                   // throws if missing
  std::string get_str(const std::string& key, const std::string& dflt) const;
  int64_t get_int(const std::string& key) const;                       // any integer type
  int64_t get_int(const std::string& key, int64_t dflt) const;
  double get_float(const std::string& key, double dflt) const;
  bool get_bool(const std::string& key, bool dflt) const;
  std::vector<std::string> get_str_array(const std::string& key) const; // empty if missing
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;

  const GgufTensor* tensor(const std::string& name) const;  // nullptr if absent
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  size_t file_size() const { return size_; }

 private:
  GgufFile() = default;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
  void* map_ = nullptr;
  size_t size_ = 0;
};

// Size in bytes of one block and elements per block for a tensor type; throws for unsupported.
size_t ggml_block_bytes(GgmlType t);
int ggml_block_elems(GgmlType t);
const char* ggml_type_name(GgmlType t);

}  // namespace mb
