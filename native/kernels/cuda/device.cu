// Device discovery, memory and error reporting for the CUDA kernel set.
#include <cstdio>

#include "common.cuh"

namespace mb {
namespace cuda {

void check(int err, const char* what) {
  if (err == 0) return;
  const cudaError_t e = (cudaError_t)err;
  throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                           ")");
}

DeviceInfo probe_device() {
  DeviceInfo info;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    info.error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    (void)cudaGetLastError();  // not a sticky error: clear it so later calls start clean
    return info;
  }
  info.count = n;
  if (n == 0) {
    info.error = "no CUDA device";
    return info;
  }
  cudaDeviceProp p;
  check((int)cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  info.name = p.name;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  info.total_bytes = p.totalGlobalMem;
  info.sm_count = p.multiProcessorCount;
  size_t free_b = 0, total_b = 0;
  check((int)cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  info.free_bytes = free_b;
  return info;
}

void* dev_alloc(size_t bytes) {
  void* p = nullptr;
  check((int)cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  return p;
}
void dev_free(void* p) {
  if (p) check((int)cudaFree(p), "cudaFree");
}
void upload(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  check((int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "upload");
}
void download(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  check((int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "download");
}
void sync(cudaStream_t s) { check((int)cudaStreamSynchronize(s), "cudaStreamSynchronize"); }

bool supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

}  // namespace cuda
}  // namespace mb
