#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace servesim::cuda {
namespace {

// cuBLAS's recommended workspace on Hopper is 32 MiB.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// The alignment cuBLASLt's heuristic assumes by default, and the most it uses.
constexpr int kMaxAlignment = 256;

int64_t checked(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw std::invalid_argument(std::string("Gemm: ") + what + " out of cuBLAS's int range");
  return v;
}

// The largest power of two (at most 256) dividing the address.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int align = kMaxAlignment;
  while (align > 1 && a % uintptr_t(align) != 0) align /= 2;
  return align;
}

// Matrix layouts of one product, destroyed with it.
struct Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  // A = W' (K x N, ld K), B = in' (K x T, ld K), C = D = out' (N x T, ld N); column-major.
  Layouts(int64_t T, int64_t N, int64_t K, cudaDataType out_type) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, uint64_t(K), uint64_t(N), K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, uint64_t(K), uint64_t(T), K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, out_type, uint64_t(N), uint64_t(T), N));
  }
  ~Layouts() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
  Layouts(const Layouts&) = delete;
  Layouts& operator=(const Layouts&) = delete;
};

}  // namespace

Gemm::Gemm(cudaStream_t stream) : stream_(stream), workspace_(kWorkspaceBytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)));
}

Gemm::~Gemm() {
  if (op_) cublasLtMatmulDescDestroy(op_);
  if (handle_) cublasLtDestroy(handle_);
}

void Gemm::bf16_out(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, bf16* out) {
  run(in, w, T, N, K, out, CUDA_R_16BF);
}

void Gemm::f32_out(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, float* out) {
  run(in, w, T, N, K, out, CUDA_R_32F);
}

void Gemm::set_small_m_rows(int32_t rows) {
  if (rows < 0 || rows > kSmallMGemmMaxRows)
    throw std::invalid_argument("Gemm::set_small_m_rows: expected 0 .. " + std::to_string(kSmallMGemmMaxRows));
  small_m_rows_ = rows;
}

void Gemm::prepare(int64_t N, int64_t K, bool f32_out, int64_t max_T) {
  const int out_type = f32_out ? CUDA_R_32F : CUDA_R_16BF;
  cublasLtMatmulAlgo_t algo;
  for (int64_t bucket : gemm_algorithm_buckets(max_T))
    algorithm(Key{checked(N, "N"), checked(K, "K"), out_type, kMaxAlignment, bucket}, algo);
}

bool Gemm::algorithm(const Key& key, cublasLtMatmulAlgo_t& algo) {
  if (auto it = algorithms_.find(key); it != algorithms_.end()) {
    algo = it->second;
    return true;
  }
  const auto [N, K, out_type, alignment, T] = key;
  const Layouts layouts(T, N, K, cudaDataType(out_type));
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = workspace_.bytes();
  const uint32_t align = uint32_t(alignment);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(preference, attribute, &align, sizeof(align));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle_, op_, layouts.a, layouts.b, layouts.c, layouts.c, preference, 1,
                                            &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  ++heuristic_queries_;
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  CUBLAS_CHECK(status);
  algo = result.algo;
  algorithms_.emplace(key, algo);
  return true;
}

cublasStatus_t Gemm::matmul(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, void* out,
                            cudaDataType out_type, const cublasLtMatmulAlgo_t& algo) {
  const float alpha = 1.0f, beta = 0.0f;
  const Layouts layouts(T, N, K, out_type);
  return cublasLtMatmul(handle_, op_, &alpha, w, layouts.a, in, layouts.b, &beta, out, layouts.c, out, layouts.c,
                        &algo, workspace_.data(), workspace_.bytes(), stream_);
}

void Gemm::run(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, void* out, cudaDataType out_type) {
  if (T == 0) return;
  checked(T, "T");
  checked(N, "N");
  checked(K, "K");
  if (takes_small_m(in, w, T, K)) {
    if (out_type == CUDA_R_32F)
      launch_small_m_gemm(in, w, int32_t(T), N, K, static_cast<float*>(out), stream_);
    else
      launch_small_m_gemm(in, w, int32_t(T), N, K, static_cast<bf16*>(out), stream_);
    return;
  }
  const int alignment = std::min({alignment_of(in), alignment_of(w), alignment_of(out)});
  cublasLtMatmulAlgo_t algo;
  // The bucket's algorithm; where cuBLASLt refuses it for this T (or offers
  // none for the bucket), one chosen for this exact T.
  if (algorithm(Key{N, K, int(out_type), alignment, gemm_algorithm_bucket(T)}, algo) &&
      matmul(in, w, T, N, K, out, out_type, algo) == CUBLAS_STATUS_SUCCESS)
    return;
  if (!algorithm(Key{N, K, int(out_type), alignment, T}, algo))
    throw CudaError("Gemm: cuBLASLt offers no algorithm for a " + std::to_string(T) + " x " + std::to_string(N) +
                    " x " + std::to_string(K) + " bf16 product");
  CUBLAS_CHECK(matmul(in, w, T, N, K, out, out_type, algo));
}

}  // namespace servesim::cuda
