// cuBLAS for F16/BF16 weights in the batched case (prefill, many slots), where its tuned
// tensor-core GEMMs beat gemm_f16's simple tiles: the activations are rounded to the weight's
// type (as the CPU's F16/BF16 path rounds them too), then one cublasGemmEx sums in f32.
// test_cuda_ops --perf (kernels/cuda/tests/) times both on the same matrix so the choice stays measured.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "common.cuh"

namespace mb {
namespace cuda {
namespace {

template <bool BF16>
__global__ void round_activations(const float* __restrict__ x, uint16_t* __restrict__ out, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (BF16) out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
  else out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cublas: ") + what + ": " + cublasGetStatusString(st));
}

}  // namespace

CublasHandle::CublasHandle(cudaStream_t s) {
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  check_cublas(cublasSetStream(h, s), "cublasSetStream");
  handle_ = h;
}
CublasHandle::~CublasHandle() {
  if (handle_) cublasDestroy((cublasHandle_t)handle_);
}

bool cublas_supported(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16; }

void gemm_cublas(CublasHandle& h, const QMatrix& W, const float* x, uint16_t* x16, float* y, int T, cudaStream_t s) {
  if (!cublas_supported(W.type)) throw std::invalid_argument("cuda gemm_cublas: F16 or BF16 weights only");
  if (T <= 0) return;
  const bool bf = W.type == GgmlType::BF16;
  const int64_t n = (int64_t)T * W.K;
  if (bf) round_activations<true><<<blocks_for(n, 256), 256, 0, s>>>(x, x16, n);
  else round_activations<false><<<blocks_for(n, 256), 256, 0, s>>>(x, x16, n);
  MB_CUDA_LAUNCHED("gemm_cublas rounding");
  const cudaDataType dt = bf ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.f, zero = 0.f;
  // cuBLAS is column-major: the same bytes read that way are W' = W^T [K x N], x' = x^T [K x T] and
  // y' = y^T [N x T], and y' = W'^T x', hence op(A) = T on W (lda K) and op(B) = N on x16 (ldb K).
  check_cublas(cublasSetStream((cublasHandle_t)h.get(), s), "cublasSetStream");
  check_cublas(cublasGemmEx((cublasHandle_t)h.get(), CUBLAS_OP_T, CUBLAS_OP_N, (int)W.N, T, (int)W.K, &one, W.data, dt,
                            (int)W.K, x16, dt, (int)W.K, &zero, y, CUDA_R_32F, (int)W.N, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

}  // namespace cuda
}  // namespace mb
