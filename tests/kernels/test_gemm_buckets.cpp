// The token-count buckets cuda::Gemm chooses its cuBLASLt algorithms for
// (kernels/decoder/gemm_buckets.h): pure host arithmetic, built and tested
// with or without the CUDA backend.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "kernels/decoder/gemm_buckets.h"

using servesim::gemm_algorithm_bucket;
using servesim::gemm_algorithm_buckets;

TEST_CASE("gemm_algorithm_bucket rounds T up to 1, 2, 4, multiples of 8 to 256, then four steps per octave") {
  CHECK(gemm_algorithm_bucket(1) == 1);
  CHECK(gemm_algorithm_bucket(2) == 2);
  CHECK(gemm_algorithm_bucket(3) == 4);
  CHECK(gemm_algorithm_bucket(5) == 8);
  CHECK(gemm_algorithm_bucket(9) == 16);
  CHECK(gemm_algorithm_bucket(17) == 24);
  CHECK(gemm_algorithm_bucket(256) == 256);
  CHECK(gemm_algorithm_bucket(257) == 320);
  CHECK(gemm_algorithm_bucket(320) == 320);
  CHECK(gemm_algorithm_bucket(321) == 384);
  CHECK(gemm_algorithm_bucket(513) == 640);
  CHECK(gemm_algorithm_bucket(4097) == 5120);
  CHECK(gemm_algorithm_bucket(8192) == 8192);
}

TEST_CASE("gemm_algorithm_bucket: every T lands in a bucket at least T and within a quarter above it past 8") {
  std::set<int64_t> buckets;
  for (int64_t T = 1; T <= 20000; ++T) {
    const int64_t b = gemm_algorithm_bucket(T);
    INFO("T = " << T);
    REQUIRE(b >= T);
    CHECK(gemm_algorithm_bucket(b) == b);  // a bucket is its own bucket
    if (T > 8) CHECK(double(b) <= 1.25 * double(T) + 7);
    buckets.insert(b);
  }
  // The heuristic runs once per bucket: few of them up to a typical token budget.
  CHECK(std::distance(buckets.begin(), buckets.upper_bound(8192)) <= 60);
}
TEST_CASE("gemm_algorithm_buckets lists each bucket of 1 .. max_T once, the last covering max_T") {
  const std::vector<int64_t> b = gemm_algorithm_buckets(512);
  CHECK(b.size() == 39);  // 1, 2, 4; 8 .. 256 by 8; 320, 384, 448, 512
  CHECK(b.front() == 1);
  CHECK(b.back() == 512);
  CHECK(gemm_algorithm_buckets(300).back() == 320);
  for (size_t i = 1; i < b.size(); ++i) CHECK(b[i] == gemm_algorithm_bucket(b[i - 1] + 1));
  CHECK(gemm_algorithm_buckets(0).empty());
}
