// cuda::Gemm (kernels/cuda/gemm.h) against a CPU reference. Small-integer
// inputs (CUTLASS examples' trick): every product and partial sum is an
// integer well inside fp32's exact range, and every result within bf16's
// (|x| <= 256), so the check is bit-exact whatever order cuBLASLt sums in.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "cuda_test_support.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/gemm.h"

using namespace servesim::cuda;
using namespace servesim::cuda::test;

namespace {

// Integers in [-2, 2] as floats (exact in bf16).
std::vector<float> small_ints(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(-2, 2);
  std::vector<float> v(n);
  for (float& x : v) x = float(u(rng));
  return v;
}

// out[T, N] = in[T, K] W[N, K]^T in double.
std::vector<double> reference(const std::vector<float>& in, const std::vector<float>& w, int64_t T, int64_t N,
                              int64_t K) {
  std::vector<double> out(size_t(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(in[size_t(t * K + k)]) * double(w[size_t(n * K + k)]);
      out[size_t(t * N + n)] = s;
    }
  return out;
}

// One product of T rows through `gemm`, `offset` elements into its buffers
// (an offset of 2 bf16 = 4 bytes misaligns them for the 256-byte algorithms).
void check_product(Gemm& gemm, cudaStream_t stream, int64_t T, int64_t N, int64_t K, bool f32, size_t offset = 0) {
  INFO("T = " << T << ", N = " << N << ", K = " << K << (f32 ? ", fp32 out" : ", bf16 out") << ", offset " << offset);
  const std::vector<float> in = small_ints(size_t(T * K), uint64_t(T * 7 + 1));
  const std::vector<float> w = small_ints(size_t(N * K), uint64_t(N * 13 + 5));
  std::vector<bf16> in_h(offset), w_h(offset);
  for (float x : in) in_h.push_back(to_bf16(x));
  for (float x : w) w_h.push_back(to_bf16(x));
  const DeviceBuffer<bf16> in_d = device_copy(in_h), w_d = device_copy(w_h);
  const std::vector<double> want = reference(in, w, T, N, K);
  std::vector<float> got(size_t(T * N));
  if (f32) {
    DeviceBuffer<float> out = poisoned<float>(offset + size_t(T * N));
    gemm.f32_out(in_d.data() + offset, w_d.data() + offset, T, N, K, out.data() + offset);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> all = out.download();
    for (size_t i = offset; i < all.size(); ++i) got[i - offset] = all[i];
  } else {
    DeviceBuffer<bf16> out = poisoned<bf16>(offset + size_t(T * N));
    gemm.bf16_out(in_d.data() + offset, w_d.data() + offset, T, N, K, out.data() + offset);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<bf16> all = out.download();
    for (size_t i = 0; i < got.size(); ++i) got[i] = to_float(all[offset + i]);
  }
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += double(got[i]) != want[i];
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("cuda Gemm is exact on small integers, for T inside and at the edges of its buckets", "[cuda]") {
  CudaStream stream;
  Gemm gemm(stream.get());
  // K = 64: sums of 64 products of [-2, 2] stay within 256, exact in bf16.
  for (int64_t T : {1, 2, 3, 8, 13, 100, 104, 256, 257, 300, 320, 700})
    for (bool f32 : {false, true}) check_product(gemm, stream.get(), T, 96, 64, f32);
}

TEST_CASE("cuda Gemm on operands that are not 256-byte aligned", "[cuda]") {
  CudaStream stream;
  Gemm gemm(stream.get());
  for (int64_t T : {1, 5, 77}) check_product(gemm, stream.get(), T, 40, 64, false, 2);
}

TEST_CASE("cuda Gemm: prepare chooses every bucket's algorithm once, and products after it query none", "[cuda]") {
  CudaStream stream;
  Gemm gemm(stream.get());
  gemm.prepare(96, 64, false, 512);
  const int64_t prepared = gemm.heuristic_queries();
  CHECK(prepared == 39);  // 1, 2, 4; 8 .. 256 by 8; 320, 384, 448, 512
  gemm.prepare(96, 64, false, 512);
  CHECK(gemm.heuristic_queries() == prepared);  // cached
  for (int64_t T : {1, 3, 50, 199, 333, 512}) check_product(gemm, stream.get(), T, 96, 64, false);
  CHECK(gemm.heuristic_queries() == prepared);
  check_product(gemm, stream.get(), 600, 96, 64, false);  // beyond: its bucket on first use
  CHECK(gemm.heuristic_queries() == prepared + 1);
}

TEST_CASE("cuda Gemm's small-M kernel is exact on small integers at every T of 1 .. 8", "[cuda]") {
  CudaStream stream;
  Gemm gemm(stream.get());
  REQUIRE(gemm.small_m_rows() == kSmallMGemmMaxRows);
  for (int64_t T = 1; T <= kSmallMGemmMaxRows; ++T) {
    // N = 97: rows that fill no whole warp's group of 2 or 4.
    for (bool f32 : {false, true}) check_product(gemm, stream.get(), T, 97, 64, f32);
    // K = 4104 (513 chunks of 8, not a multiple of a warp's 32): fp32 out,
    // whose integers stay exact; 16-byte aligned but not 256 (offset 8).
    check_product(gemm, stream.get(), T, 33, 4104, true, 8);
  }
  // 4-byte aligned operands do not fit the kernel: cuBLASLt takes them.
  for (int64_t T : {1, 8}) check_product(gemm, stream.get(), T, 40, 64, false, 2);
}

TEST_CASE("cuda Gemm's small-M kernel against cuBLASLt on random bf16 at a decode shape", "[cuda]") {
  CudaStream stream;
  Gemm small(stream.get()), cublaslt(stream.get());
  cublaslt.set_small_m_rows(0);
  const int64_t N = 1000, K = 4096;
  const std::vector<float> w = round_to_bf16(random_floats(size_t(N * K), 11));
  const DeviceBuffer<bf16> w_d = device_copy(to_bf16(std::span<const float>(w)));
  for (int64_t T : {1, 3, 8}) {
    INFO("T = " << T);
    const std::vector<float> in = round_to_bf16(random_floats(size_t(T * K), uint64_t(20 + T)));
    const DeviceBuffer<bf16> in_d = device_copy(to_bf16(std::span<const float>(in)));
    DeviceBuffer<float> a = poisoned<float>(size_t(T * N)), b = poisoned<float>(size_t(T * N));
    small.f32_out(in_d.data(), w_d.data(), T, N, K, a.data());
    cublaslt.f32_out(in_d.data(), w_d.data(), T, N, K, b.data());
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const std::vector<float> got = a.download(), want = b.download();
    // Both accumulate in fp32, in different orders. The worst case is K
    // roundings of 2^-24 of the running sum (2.4e-4 of the sum of
    // |products|); rounding errors of random signs add up to about
    // sqrt(K) of them, so 1e-5 of that sum holds with a wide margin.
    int64_t wrong = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double magnitude = 0;
        for (int64_t k = 0; k < K; ++k)
          magnitude += std::fabs(double(in[size_t(t * K + k)]) * double(w[size_t(n * K + k)]));
        const size_t i = size_t(t * N + n);
        wrong += !(std::fabs(double(got[i]) - double(want[i])) <= 1e-5 * magnitude);
      }
    CHECK(wrong == 0);
  }
}

TEST_CASE("cuda small-M kernel: refusals", "[cuda]") {
  CudaStream stream;
  DeviceBuffer<bf16> in(9 * 64 + 8), w(4 * 64 + 8);
  DeviceBuffer<float> out(9 * 4);
  CHECK_THROWS_AS(launch_small_m_gemm(in.data(), w.data(), 9, 4, 64, out.data(), stream.get()),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_small_m_gemm(in.data() + 1, w.data(), 1, 4, 64, out.data(), stream.get()),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_small_m_gemm(in.data(), w.data(), 1, 4, 60, out.data(), stream.get()),
                  std::invalid_argument);
  CHECK_FALSE(small_m_gemm_fits(in.data(), w.data() + 4, 64));
  CHECK(small_m_gemm_fits(in.data() + 8, w.data() + 8, 64));
  Gemm gemm(stream.get());
  CHECK_THROWS_AS(gemm.set_small_m_rows(kSmallMGemmMaxRows + 1), std::invalid_argument);
  CHECK_THROWS_AS(gemm.set_small_m_rows(-1), std::invalid_argument);
}

TEST_CASE("cuda small-M gate_up with SwiGLU fused is bit for bit the product then launch_swiglu", "[cuda]") {
  CudaStream stream;
  const int64_t I = 99, K = 256;  // I odd: columns that fill no warp's group of 1 or 2
  const DeviceBuffer<bf16> w = device_copy(to_bf16(std::span<const float>(random_floats(size_t(2 * I * K), 3))));
  for (int32_t T = 1; T <= kSmallMGemmMaxRows; ++T) {
    INFO("T = " << T);
    const DeviceBuffer<bf16> in =
        device_copy(to_bf16(std::span<const float>(random_floats(size_t(T) * size_t(K), uint64_t(40 + T), -2, 2))));
    DeviceBuffer<bf16> gate_up = poisoned<bf16>(size_t(T) * size_t(2 * I));
    DeviceBuffer<bf16> unfused = poisoned<bf16>(size_t(T) * size_t(I)), fused = poisoned<bf16>(size_t(T) * size_t(I));
    launch_small_m_gemm(in.data(), w.data(), T, 2 * I, K, gate_up.data(), stream.get());
    launch_swiglu(gate_up.data(), T, I, unfused.data(), stream.get());
    launch_small_m_gemm_swiglu(in.data(), w.data(), T, I, K, fused.data(), stream.get());
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const std::vector<bf16> a = unfused.download(), b = fused.download();
    int64_t different = 0;
    for (size_t i = 0; i < a.size(); ++i)
      different += std::memcmp(&a[i], &b[i], sizeof(bf16)) != 0 || std::isnan(to_float(b[i]));
    CHECK(different == 0);
  }
}
