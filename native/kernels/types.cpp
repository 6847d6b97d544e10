// Type tables and the public helpers that do not depend on the instruction set.
#include <stdexcept>
#include <string>

#include "dispatch.h"
#include "ref/ref.h"

namespace mb {
namespace kq {

bool is_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0:
    case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q8_1: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::Q8_K: case GgmlType::MXFP4: return true;
    default: return false;
  }
}

[[noreturn]] static void unsupported(GgmlType t) {
  throw std::invalid_argument("kernels: unsupported ggml type " + std::to_string((unsigned)t));
}

size_t block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: case GgmlType::BF16: return 2;
    case GgmlType::Q4_0: return sizeof(block_q4_0);
    case GgmlType::Q4_1: return sizeof(block_q4_1);
    case GgmlType::Q5_0: return sizeof(block_q5_0);
    case GgmlType::Q5_1: return sizeof(block_q5_1);
    case GgmlType::Q8_0: return sizeof(block_q8_0);
    case GgmlType::Q8_1: return sizeof(block_q8_1);
    case GgmlType::Q4_K: return sizeof(block_q4_K);
    case GgmlType::Q5_K: return sizeof(block_q5_K);
    case GgmlType::Q6_K: return sizeof(block_q6_K);
    case GgmlType::Q8_K: return sizeof(block_q8_K);
    case GgmlType::MXFP4: return sizeof(block_mxfp4);
    default: unsupported(t);
  }
}

int block_elems(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return 1;
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::Q8_K: return QK_K;
    default: if (is_supported(t)) return QK;
  }
  unsupported(t);
}

GgmlType vec_dot_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return GgmlType::F32;
    case GgmlType::F16: return GgmlType::F16;
    case GgmlType::BF16: return GgmlType::BF16;
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::MXFP4: return GgmlType::Q8_0;
    case GgmlType::Q4_1: case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: return GgmlType::Q8_K;
    default: unsupported(t);
  }
}

int type_slot(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return S_F32;
    case GgmlType::F16: return S_F16;
    case GgmlType::BF16: return S_BF16;
    case GgmlType::Q4_0: return S_Q4_0;
    case GgmlType::Q4_1: return S_Q4_1;
    case GgmlType::Q5_0: return S_Q5_0;
    case GgmlType::Q5_1: return S_Q5_1;
    case GgmlType::Q8_0: return S_Q8_0;
    case GgmlType::Q4_K: return S_Q4_K;
    case GgmlType::Q5_K: return S_Q5_K;
    case GgmlType::Q6_K: return S_Q6_K;
    case GgmlType::MXFP4: return S_MXFP4;
    default: return -1;
  }
}

size_t quantize_row_for(const KernelTable& kt, GgmlType wtype, const float* x, void* y, int64_t k) {
  const GgmlType vt = vec_dot_type(wtype);
  switch (vt) {
    case GgmlType::F32: std::memcpy(y, x, (size_t)k * 4); break;
    case GgmlType::F16: kt.to_f16(x, y, k); break;
    case GgmlType::BF16: kt.to_bf16(x, y, k); break;
    case GgmlType::Q8_0: kt.quantize_q8_0(x, y, k); break;
    case GgmlType::Q8_1: kt.quantize_q8_1(x, y, k); break;
    case GgmlType::Q8_K: kt.quantize_q8_K(x, y, k); break;
    default: unsupported(vt);
  }
  return (size_t)(k / block_elems(vt)) * block_bytes(vt);
}

}  // namespace kq

size_t ggml_row_bytes(GgmlType t, int64_t k) {
  const int be = kq::block_elems(t);
  if (k % be != 0)
    throw std::invalid_argument("kernels: row of " + std::to_string(k) + " elements is not a multiple of " +
                                std::to_string(be));
  return (size_t)(k / be) * kq::block_bytes(t);
}

void dequantize_row(const QMatrix& W, int64_t row, float* dst) {
  kq::ref::dequantize(W.type, W.data + (size_t)row * ggml_row_bytes(W.type, W.K), dst, W.K);
}

}  // namespace mb
