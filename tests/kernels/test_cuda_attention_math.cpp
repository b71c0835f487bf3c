// The index arithmetic and online-softmax steps of the CUDA attention
// kernels (kernels/cuda/attention_common.h, plain C++), run on the host:
// split ranges, the flash-decoding merge and the prefill tiles' causal
// online softmax, each replayed step by step against a direct softmax in
// double, plus the launch configuration rules and the shared-memory layout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/attention_common.h"

using namespace servesim::cuda::attention;

namespace {

// The kernels' running state over a block of keys.
struct State {
  float m = -INFINITY, l = 0;
  std::vector<float> acc;
};

// One chunk of keys [c0, c0 + n) of which those < end are real, as the
// decode kernel steps: max, rescale, weights, sum, weighted values.
void decode_chunk(State& st, const std::vector<float>& s2, const std::vector<float>& v, int dv, int c0, int n,
                  int end) {
  float mx = -INFINITY;
  std::vector<float> p(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) mx = max_of(mx, c0 + k < end ? s2[size_t(c0 + k)] : -INFINITY);
  const float m_new = max_of(st.m, mx), alpha = rescale_factor(st.m, m_new);
  float sum = 0;
  for (int k = 0; k < n; ++k) sum += p[size_t(k)] = softmax_weight(c0 + k < end ? s2[size_t(c0 + k)] : -INFINITY, m_new);
  st.l = st.l * alpha + sum;
  st.m = m_new;
  for (float& a : st.acc) a *= alpha;
  for (int k = 0; k < n; ++k)
    if (c0 + k < end)
      for (int d = 0; d < dv; ++d) st.acc[size_t(d)] += p[size_t(k)] * v[size_t((c0 + k) * dv + d)];
}

// softmax(s2 * ln 2) . v in double over keys 0 .. n - 1.
std::vector<double> direct(const std::vector<float>& s2, const std::vector<float>& v, int dv, int n) {
  double mx = -INFINITY, l = 0;
  for (int k = 0; k < n; ++k) mx = std::max(mx, double(s2[size_t(k)]));
  std::vector<double> out(size_t(dv), 0.0);
  for (int k = 0; k < n; ++k) {
    const double w = std::exp2(double(s2[size_t(k)]) - mx);
    l += w;
    for (int d = 0; d < dv; ++d) out[size_t(d)] += w * v[size_t(k * dv + d)];
  }
  for (double& o : out) o /= l;
  return out;
}

std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(n);
  for (float& e : x) e = u(rng);
  return x;
}

}  // namespace

TEST_CASE("split ranges tile the context in order, the tail ones empty", "[attention-math]") {
  for (int32_t context : {1, 2, 7, 15, 16, 17, 63, 64, 65, 100, 1000, 4999, 5000, 131072})
    for (int32_t splits = 1; splits <= 70; ++splits) {
      const int32_t len = (context + splits - 1) / splits;
      int32_t next = 0;
      for (int32_t s = 0; s < splits; ++s) {
        const KeyRange r = split_range(context, splits, s);
        REQUIRE(r.begin == next);
        REQUIRE(r.end >= r.begin);
        REQUIRE(r.end - r.begin <= len);
        if (r.end < context) REQUIRE(r.end - r.begin == len);  // only the last non-empty one is short
        next = r.end;
      }
      REQUIRE(next == context);
    }
  // No overflow near the int32 limit.
  const KeyRange r = split_range(2'000'000'000, 64, 63);
  REQUIRE(r.end == 2'000'000'000);
  REQUIRE(r.begin < r.end);
}

TEST_CASE("the online-softmax steps never make NaN from empty states", "[attention-math]") {
  REQUIRE(rescale_factor(-INFINITY, -INFINITY) == 0.0f);
  REQUIRE(rescale_factor(-INFINITY, 3.0f) == 0.0f);
  REQUIRE(rescale_factor(2.0f, 2.0f) == 1.0f);
  REQUIRE(rescale_factor(1.0f, 3.0f) == Approx(0.25f));
  REQUIRE(softmax_weight(-INFINITY, -INFINITY) == 0.0f);
  REQUIRE(softmax_weight(-INFINITY, 1.0f) == 0.0f);
  REQUIRE(softmax_weight(5.0f, 5.0f) == 1.0f);
  REQUIRE(softmax_weight(4.0f, 5.0f) == Approx(0.5f));
}

TEST_CASE("flash-decoding's chunks, splits and merge equal one softmax", "[attention-math]") {
  const int dv = 5;
  for (int context : {1, 15, 16, 17, 100, 1000, 5000})
    for (int splits : {1, 4, 64, 100})
      for (int chunk : {16, 64, 256}) {
        const auto s2 = uniform(size_t(context), uint64_t(context * 7 + splits), -6.0f, 6.0f);
        const auto v = uniform(size_t(context * dv), uint64_t(context + 3 * splits), -1.0f, 1.0f);
        // Each split as decode_partial_kernel walks it.
        std::vector<State> parts(static_cast<size_t>(splits));
        for (int s = 0; s < splits; ++s) {
          State& st = parts[size_t(s)];
          st.acc.assign(size_t(dv), 0.0f);
          const KeyRange r = split_range(context, splits, s);
          for (int c0 = r.begin; c0 < r.end; c0 += chunk) decode_chunk(st, s2, v, dv, c0, chunk, r.end);
          if (r.begin == r.end) {  // an empty range is the neutral partial
            REQUIRE(st.m == -INFINITY);
            REQUIRE(st.l == 0.0f);
          }
        }
        // decode_combine_kernel.
        float m_all = -INFINITY, l_all = 0;
        for (const State& st : parts) m_all = max_of(m_all, st.m);
        for (const State& st : parts) l_all += softmax_weight(st.m, m_all) * st.l;
        const auto want = direct(s2, v, dv, context);
        for (int d = 0; d < dv; ++d) {
          float sum = 0;
          for (const State& st : parts) {
            const float w = softmax_weight(st.m, m_all);
            if (w != 0.0f) sum += w * st.acc[size_t(d)];
          }
          const float got = sum / l_all;
          INFO("context " << context << ", splits " << splits << ", chunk " << chunk << ", d " << d);
          REQUIRE(std::isfinite(got));
          REQUIRE(std::fabs(got - want[size_t(d)]) <= 1e-5);
        }
      }
}

TEST_CASE("prefill tiles: causal bounds and the tiled online softmax", "[attention-math]") {
  const int dv = 3;
  struct Item {
    int num_cached, first_query, num_query;
  };
  for (const Item it : {Item{0, 0, 1}, Item{0, 0, 64}, Item{0, 64, 1}, Item{0, 192, 8}, Item{100, 0, 37},
                        Item{4000, 0, 3}, Item{17, 128, 64}}) {
    const int kv_len = prefill_kv_len(it.num_cached, it.first_query, it.num_query);
    REQUIRE(kv_len == it.num_cached + it.first_query + it.num_query);
    const auto s2 = uniform(size_t(kv_len), uint64_t(kv_len), -6.0f, 6.0f);
    const auto v = uniform(size_t(kv_len * dv), uint64_t(kv_len + 1), -1.0f, 1.0f);
    for (int row = 0; row < kPrefillRows; ++row) {
      const int last = prefill_last_visible(it.num_cached, it.first_query, it.num_query, row);
      REQUIRE(last >= 0);
      REQUIRE(last <= kv_len - 1);
      if (row < it.num_query) REQUIRE(last == it.num_cached + it.first_query + row);  // new token's own position
      // The kernel's tile loop for this row: keys past `last` masked.
      State st;
      st.acc.assign(size_t(dv), 0.0f);
      for (int kt0 = 0; kt0 < kv_len; kt0 += kPrefillKeys)
        decode_chunk(st, s2, v, dv, kt0, std::min(kPrefillKeys, kv_len - kt0), last + 1);
      REQUIRE(st.l >= 1.0f);  // the row's max key has weight 1: no division by zero
      const auto want = direct(s2, v, dv, last + 1);
      for (int d = 0; d < dv; ++d) REQUIRE(std::fabs(st.acc[size_t(d)] / st.l - want[size_t(d)]) <= 1e-5);
    }
  }
}

TEST_CASE("KV cache offsets follow [block][Hkv][block_size][dh] in 64 bits", "[attention-math]") {
  REQUIRE(kv_row_offset(0, 0, 8, 16, 0, 128) == 0);
  REQUIRE(kv_row_offset(0, 0, 8, 16, 1, 128) == 128);
  REQUIRE(kv_row_offset(0, 1, 8, 16, 0, 128) == 16 * 128);
  REQUIRE(kv_row_offset(1, 0, 8, 16, 0, 128) == 8 * 16 * 128);
  REQUIRE(kv_row_offset(3, 2, 4, 7, 5, 48) == ((3 * 4 + 2) * 7 + 5) * 48);
  // An 8B model's cache of 2 million blocks passes 2^31 elements.
  REQUIRE(kv_row_offset(2'000'000, 7, 8, 16, 15, 128) == ((2'000'000LL * 8 + 7) * 16 + 15) * 128);
}

TEST_CASE("decode launch configuration", "[attention-math]") {
  for (int dh = 16; dh <= 256; dh += 16) {
    const int lanes = decode_lanes_per_key(dh);
    REQUIRE((lanes & (lanes - 1)) == 0);  // a shuffle group
    REQUIRE(lanes * 8 >= dh);             // covers the row, 8 elements a lane
    REQUIRE(lanes / 2 * 8 < dh);          // and no wider than needed
    REQUIRE(lanes <= 32);
    REQUIRE(kDecodeThreads % lanes == 0);
  }
  for (int group = 1; group <= 64; ++group) {
    const int g = decode_heads_per_block(group);
    REQUIRE((g & (g - 1)) == 0);
    REQUIRE(g <= 8);
    REQUIRE(g >= std::min(group, 8));
    REQUIRE(ceil_div(group, g) * g >= group);  // the block chunks cover the group
    REQUIRE((ceil_div(group, g) - 1) * g < group);
  }
  REQUIRE(choose_decode_splits(1, 8, 132) == 33);
  REQUIRE(choose_decode_splits(1, 1, 132) == 64);
  REQUIRE(choose_decode_splits(64, 8, 132) == 1);
  REQUIRE(choose_decode_splits(0, 8, 132) == 33);
  for (int n : {1, 2, 5, 37, 256})
    for (int hkv : {1, 2, 8, 32}) {
      const int s = choose_decode_splits(n, hkv, 132);
      REQUIRE(s >= 1);
      REQUIRE(s <= 64);
    }
  REQUIRE(decode_workspace_floats(3, 32, 128, 4) == 3 * 32 * 4 * 130);
  REQUIRE(decode_partial_index(2, 5, 3, 32, 4) == (2 * 32 + 5) * 4 + 3);
}

TEST_CASE("prefill shared-memory layout fits and suits wmma", "[attention-math]") {
  for (int dh = 16; dh <= 256; dh += 16) {
    const PrefillSmem s = prefill_smem(dh);
    const int warps = kPrefillThreads / 32;
    for (int off : {s.q, s.k, s.v, s.scratch, s.p, s.alpha, s.l, s.bytes}) REQUIRE(off % 128 == 0);
    REQUIRE(s.k >= s.q + kPrefillRows * s.ld_qkv * 2);
    REQUIRE(s.v >= s.k + kPrefillKeys * s.ld_qkv * 2);
    REQUIRE(s.scratch >= s.v + kPrefillKeys * s.ld_qkv * 2);
    REQUIRE(s.p >= s.scratch + warps * 16 * s.ld_scratch * 4);
    REQUIRE(s.alpha >= s.p + warps * 16 * s.ld_p * 2);
    REQUIRE(s.l >= s.alpha + warps * 16 * 4);
    REQUIRE(s.bytes >= s.l + warps * 16 * 4);
    REQUIRE(s.bytes <= 227 * 1024);  // Hopper's opt-in limit per block
    // wmma: ldm a multiple of 16 bytes, fragment pointers 32-byte aligned.
    REQUIRE(s.ld_qkv % 8 == 0);
    REQUIRE(s.ld_p % 8 == 0);
    REQUIRE(s.ld_scratch % 4 == 0);
    REQUIRE(s.ld_qkv >= dh);
    REQUIRE(s.ld_scratch >= std::max(dh, kPrefillKeys));
    REQUIRE(16 * s.ld_qkv * 2 % 32 == 0);
    REQUIRE(16 * s.ld_p * 2 % 32 == 0);
    REQUIRE(16 * s.ld_scratch * 4 % 32 == 0);
    // Row strides an odd multiple of 16 bytes: the same 16-byte column of 8
    // consecutive rows falls in 8 distinct bank quads.
    REQUIRE(s.ld_qkv * 2 % 32 == 16);
    REQUIRE(s.ld_p * 2 % 32 == 16);
  }
  REQUIRE(prefill_smem(128).bytes <= 113 * 1024);  // two blocks per SM at dh 128
}
