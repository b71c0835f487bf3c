// The projections and the LM head through cuBLASLt: bf16 inputs, fp32
// accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32 output. Products of at
// most kSmallMGemmMaxRows rows (a decode step's) go to the weight-streaming
// kernel of kernels/cuda/small_m_gemm.cu instead, where its layout rules
// hold (K % 8 == 0, 16-byte aligned operands).
//
// Row-major out[T, N] = in[T, K] W[N, K]^T is, in cuBLAS's column-major
// terms, out' (N x T) = W' (K x N)^T in' (K x T): one matmul with
// op(A) = T, op(B) = N and leading dimensions K, K, N.
//
// Why algorithms chosen per bucket of T, and prepared ahead: a served
// prefill of a prompt length not seen before paid for choosing the
// algorithm and for its kernel's first launch, more than the prefill itself
// (docs/cuda.md has the H200 measurements). The algorithm is chosen once per
// bucket of T (rounded up: 1, 2, 4, 8, multiples of 8 to 256, then four
// steps per octave, every T of a bucket reusing it: the rule is
// kernels/decoder/gemm_buckets.h, which the calibration's GEMM axis follows
// too); prepare() chooses every bucket's up to a bound, and the CUDA
// decoder launches each bucket once at start-up (Backend::prepare_gemms), as
// a serving engine's warm-up does.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/decoder/gemm_buckets.h"  // gemm_algorithm_bucket: the buckets

namespace servesim::cuda {

class Gemm {
 public:
  // A handle bound to `stream`, with its own workspace so that cuBLASLt
  // never allocates during a CUDA graph capture.
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[T, N] = in[T, K] W[N, K]^T, bf16 out     in bf16 [T, K], W bf16 [N, K]
  void bf16_out(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, bf16* out);
  // The same with an fp32 out (logits).
  void f32_out(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, float* out);

  // Chooses the algorithms of every bucket of T up to max_T for an [N, K]
  // weight with a bf16 (or fp32: `f32_out`) output, on 256-byte-aligned
  // operands. Host work only; nothing is launched.
  void prepare(int64_t N, int64_t K, bool f32_out, int64_t max_T);
  // Heuristic queries made so far (for tests and progress lines).
  int64_t heuristic_queries() const { return heuristic_queries_; }
  // Products of T <= rows (at most kSmallMGemmMaxRows) take the small-M
  // kernel; 0 sends every product to cuBLASLt (benchmarks compare the two).
  void set_small_m_rows(int32_t rows);
  int32_t small_m_rows() const { return small_m_rows_; }
  // Whether a product of T rows of `in` with `w` (K columns) takes the
  // small-M kernel: T <= small_m_rows() and small_m_gemm_fits. The CUDA
  // backend asks it before fusing the MLP's gate_up with SwiGLU.
  bool takes_small_m(const bf16* in, const bf16* w, int64_t T, int64_t K) const {
    return T <= small_m_rows_ && small_m_gemm_fits(in, w, K);
  }

 private:
  // (N, K, output type, operand alignment in bytes, T the algorithm was chosen for)
  using Key = std::tuple<int64_t, int64_t, int, int, int64_t>;
  void run(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, void* out, cudaDataType out_type);
  // The algorithm for `key` (its heuristic run on first use), or false when
  // the heuristic offers none.
  bool algorithm(const Key& key, cublasLtMatmulAlgo_t& algo);
  cublasStatus_t matmul(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, void* out,
                        cudaDataType out_type, const cublasLtMatmulAlgo_t& algo);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;  // fp32 compute and scale, A transposed
  DeviceBuffer<uint8_t> workspace_;
  std::map<Key, cublasLtMatmulAlgo_t> algorithms_;
  int64_t heuristic_queries_ = 0;
  int32_t small_m_rows_ = kSmallMGemmMaxRows;
};

}  // namespace servesim::cuda
