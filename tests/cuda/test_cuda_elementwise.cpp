// The CUDA backend's element-wise kernels (embedding, add_rmsnorm, rotary,
// swiglu, select_tokens, fill, convert) against plain host loops in double.
//
// Tolerances: a bf16 output is the device's fp32 value rounded once, so it
// must lie within |ref| / 128 + 1e-5 of the double reference (bf16 keeps 8
// significant bits: one rounding is at most 1/256 relative; the rest allows
// for a rounding flip caused by fp32 arithmetic and for cancellation near
// zero). Gathers, copies, fp32 adds and cache writes are checked bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.h"

using namespace servesim::cuda;
using namespace servesim::cuda::test;

namespace {

uint16_t bits(bf16 x) {
  uint16_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

bool near_bf16(double got, double want) { return std::fabs(got - want) <= std::fabs(want) / 128 + 1e-5; }

// Counts failed element checks and remembers the first, so a million
// elements cost one assertion.
struct Mismatches {
  size_t count = 0;
  std::string first;
  void check(bool ok, size_t index, double got, double want) {
    if (ok) return;
    if (count++ == 0) first = "index " + std::to_string(index) + ": got " + std::to_string(got) + ", want " + std::to_string(want);
  }
};
#define REQUIRE_NONE(m)    \
  do {                     \
    INFO((m).first);       \
    REQUIRE((m).count == 0); \
  } while (0)

std::vector<int32_t> random_ints(size_t n, int32_t lo, int32_t hi, uint64_t seed) {  // [lo, hi]
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> u(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = u(rng);
  return v;
}

}  // namespace

// ---- embedding ------------------------------------------------------------------

TEST_CASE("cuda embedding gathers token rows exactly", "[cuda]") {
  const int32_t V = 50;
  struct Case {
    int32_t T;
    int64_t d;
  };
  // 70000 tokens > 65535: the token loop strides over gridDim.y.
  for (const Case c : {Case{1, 288}, Case{3, 4096}, Case{37, 288}, Case{37, 7}, Case{70000, 5}}) {
    CAPTURE(c.T, c.d);
    const std::vector<bf16> table = to_bf16(random_floats(size_t(V * c.d), 11, -2.0f, 2.0f));
    const std::vector<int32_t> tokens = random_ints(size_t(c.T), 0, V - 1, 12 + uint64_t(c.T));
    const auto d_table = device_copy(table);
    const auto d_tokens = device_copy(tokens);
    auto x = poisoned<float>(size_t(c.T * c.d));
    launch_embedding(d_table.data(), d_tokens.data(), c.T, c.d, x.data(), nullptr);
    const std::vector<float> got = x.download();
    Mismatches m;
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < c.d; ++j) {
        const float want = to_float(table[size_t(tokens[size_t(t)] * c.d + j)]);
        m.check(got[size_t(t * c.d + j)] == want, size_t(t * c.d + j), got[size_t(t * c.d + j)], want);
      }
    REQUIRE_NONE(m);
  }
}

// ---- add_rmsnorm ------------------------------------------------------------------

namespace {

// x_rows rows of x; rows empty = every row (rows == nullptr); misalign
// shifts x by one float so the kernel must take its scalar path.
void check_add_rmsnorm(int32_t x_rows, std::vector<int32_t> rows, int64_t d, bool with_branch, bool misalign) {
  CAPTURE(x_rows, rows.size(), d, with_branch, misalign);
  const float eps = 1e-5f;
  const int32_t num_rows = rows.empty() ? x_rows : int32_t(rows.size());
  const size_t n = size_t(x_rows * d);
  const std::vector<float> x_in = random_floats(n, 21 + uint64_t(d), -2.0f, 2.0f);
  const std::vector<bf16> branch = to_bf16(random_floats(n, 22 + uint64_t(d)));
  const std::vector<float> weight = random_floats(size_t(d), 23, 0.5f, 1.5f);

  std::vector<float> x_host(n + 1, 7.0f);  // x starts at element `misalign`
  std::copy(x_in.begin(), x_in.end(), x_host.begin() + (misalign ? 1 : 0));
  auto d_x = device_copy(x_host);
  const auto d_branch = device_copy(branch);
  const auto d_weight = device_copy(weight);
  const auto d_rows = device_copy(rows);
  auto out = poisoned<bf16>(size_t(num_rows * d));
  launch_add_rmsnorm(d_x.data() + (misalign ? 1 : 0), with_branch ? d_branch.data() : nullptr,
                     rows.empty() ? nullptr : d_rows.data(), num_rows, d, d_weight.data(), eps, out.data(), nullptr);
  const std::vector<float> x_all = d_x.download();
  const std::vector<float> x_got(x_all.begin() + (misalign ? 1 : 0), x_all.begin() + (misalign ? 1 : 0) + ptrdiff_t(n));
  const std::vector<float> out_got = to_float(out.download());

  // Expected x: picked rows get the branch added (one fp32 add, exact on
  // the host too), every other row is untouched.
  std::vector<float> x_want = x_in;
  std::vector<bool> picked(size_t(x_rows), rows.empty());
  for (int32_t r : rows) picked[size_t(r)] = true;
  if (with_branch)
    for (int32_t r = 0; r < x_rows; ++r)
      if (picked[size_t(r)])
        for (int64_t j = 0; j < d; ++j) x_want[size_t(r * d + j)] += to_float(branch[size_t(r * d + j)]);
  Mismatches mx;
  for (size_t i = 0; i < n; ++i) mx.check(x_got[i] == x_want[i], i, x_got[i], x_want[i]);
  REQUIRE_NONE(mx);
  REQUIRE(x_all[0] == (misalign ? 7.0f : x_want[0]));

  // out[k] = RMSNorm(x[r]) * weight, in double.
  Mismatches mo;
  for (int32_t k = 0; k < num_rows; ++k) {
    const int64_t r = rows.empty() ? k : rows[size_t(k)];
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(x_want[size_t(r * d + j)]) * x_want[size_t(r * d + j)];
    const double scale = 1.0 / std::sqrt(ss / double(d) + double(eps));
    for (int64_t j = 0; j < d; ++j) {
      const double want = double(x_want[size_t(r * d + j)]) * scale * weight[size_t(j)];
      const size_t i = size_t(k * d + j);
      mo.check(near_bf16(out_got[i], want), i, out_got[i], want);
    }
  }
  REQUIRE_NONE(mo);
}

}  // namespace

TEST_CASE("cuda add_rmsnorm matches the residual add and RMSNorm in double", "[cuda]") {
  for (int64_t d : {288, 4096, 7, 290, 16384})
    for (int32_t T : {1, 3, 37})
      for (bool branch : {false, true}) check_add_rmsnorm(T, {}, d, branch, false);
}

TEST_CASE("cuda add_rmsnorm takes its scalar path on a misaligned x", "[cuda]") {
  for (int64_t d : {288, 4096})
    for (bool branch : {false, true}) check_add_rmsnorm(3, {}, d, branch, true);
}

TEST_CASE("cuda add_rmsnorm with row indices touches only the picked rows", "[cuda]") {
  for (int64_t d : {288, 4096})
    for (bool branch : {false, true}) {
      check_add_rmsnorm(37, {36, 0, 17}, d, branch, false);
      check_add_rmsnorm(37, {5}, d, branch, false);
    }
}

TEST_CASE("cuda add_rmsnorm on many rows", "[cuda]") { check_add_rmsnorm(70000, {}, 16, true, false); }

// ---- rotary -------------------------------------------------------------------------

namespace {

std::vector<double> inv_freq_for(int32_t dh, double theta) {
  std::vector<double> f(static_cast<size_t>(dh / 2));
  for (int32_t i = 0; i < dh / 2; ++i) f[size_t(i)] = std::pow(theta, -2.0 * i / dh);
  return f;
}

}  // namespace

TEST_CASE("cuda rotary tables match cos and sin in double", "[cuda]") {
  for (int32_t dh : {48, 64, 128})
    for (int32_t T : {1, 3, 37}) {
      CAPTURE(dh, T);
      const int32_t half = dh / 2;
      std::vector<int32_t> positions = random_ints(size_t(T), 0, 131072, 31 + uint64_t(T));
      positions[0] = T == 1 ? 131071 : 0;
      if (T > 2) positions[size_t(T - 1)] = 131072;
      const std::vector<double> inv_freq = inv_freq_for(dh, 500000.0);
      const auto d_pos = device_copy(positions);
      const auto d_freq = device_copy(inv_freq);
      auto cos_d = poisoned<float>(size_t(T * half)), sin_d = poisoned<float>(size_t(T * half));
      launch_rotary_tables(d_pos.data(), T, d_freq.data(), half, cos_d.data(), sin_d.data(), nullptr);
      const std::vector<float> c = cos_d.download(), s = sin_d.download();
      Mismatches m;
      for (int32_t t = 0; t < T; ++t)
        for (int32_t i = 0; i < half; ++i) {
          const double angle = double(positions[size_t(t)]) * inv_freq[size_t(i)];
          const size_t e = size_t(t * half + i);
          // fp32 of a double-accurate cos: within one fp32 rounding.
          m.check(std::fabs(c[e] - std::cos(angle)) <= 1e-7, e, c[e], std::cos(angle));
          m.check(std::fabs(s[e] - std::sin(angle)) <= 1e-7, e, s[e], std::sin(angle));
        }
      REQUIRE_NONE(m);
    }
}

namespace {

struct RotaryCase {
  int32_t H, Hkv, dh, block_size, T;
  bool bias;
};

void check_rotary_cache_write(const RotaryCase& c) {
  CAPTURE(c.H, c.Hkv, c.dh, c.block_size, c.T, c.bias);
  const int32_t H = c.H, Hkv = c.Hkv, dh = c.dh, bs = c.block_size, T = c.T, half = dh / 2;
  const int64_t width = int64_t(H + 2 * Hkv) * dh;
  const uint64_t seed = uint64_t(H * 1000 + Hkv * 100 + dh + bs + T) * 2 + c.bias;

  // Inputs: qkv, bias, and cos / sin tables made on the host.
  const std::vector<bf16> qkv_in = to_bf16(random_floats(size_t(T * width), seed));
  const std::vector<float> bias = random_floats(size_t(width), seed + 1, -0.5f, 0.5f);
  const std::vector<int32_t> positions = random_ints(size_t(T), 0, 131072, seed + 2);
  const std::vector<double> inv_freq = inv_freq_for(dh, 10000.0);
  std::vector<float> cos_tab(size_t(T * half)), sin_tab(size_t(T * half));
  for (int32_t t = 0; t < T; ++t)
    for (int32_t i = 0; i < half; ++i) {
      cos_tab[size_t(t * half + i)] = float(std::cos(positions[size_t(t)] * inv_freq[size_t(i)]));
      sin_tab[size_t(t * half + i)] = float(std::sin(positions[size_t(t)] * inv_freq[size_t(i)]));
    }

  // Distinct random slots in a cache with spare room; row 1 (when there is
  // one) is a padding row: slot -1, no cache write.
  const int64_t num_blocks = (T + 10 + bs - 1) / bs + 2;
  std::vector<int32_t> all_slots(static_cast<size_t>(num_blocks * bs));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::mt19937_64 rng(seed + 3);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<int32_t> slots(all_slots.begin(), all_slots.begin() + T);
  if (T > 1) slots[1] = -1;

  const size_t cache_n = size_t(num_blocks * Hkv * bs * dh);
  const bf16 sentinel = to_bf16(-77.0f);
  const std::vector<bf16> cache_in(cache_n, sentinel);

  auto d_qkv = device_copy(qkv_in);
  const auto d_bias = device_copy(bias);
  const auto d_cos = device_copy(cos_tab), d_sin = device_copy(sin_tab);
  const auto d_slots = device_copy(slots);
  auto d_k = device_copy(cache_in), d_v = device_copy(cache_in);
  launch_rotary_cache_write(d_qkv.data(), c.bias ? d_bias.data() : nullptr, d_cos.data(), d_sin.data(),
                            d_slots.data(), T, H, Hkv, dh, bs, d_k.data(), d_v.data(), nullptr);
  const std::vector<bf16> qkv = d_qkv.download(), k_got = d_k.download(), v_got = d_v.download();

  // qkv: bias added, q and k heads rotated (rotate-half), v heads only biased.
  Mismatches mq;
  for (int64_t t = 0; t < T; ++t) {
    const bf16* in = &qkv_in[size_t(t * width)];
    const bf16* out = &qkv[size_t(t * width)];
    auto biased = [&](int64_t col) { return double(to_float(in[col])) + (c.bias ? double(bias[size_t(col)]) : 0.0); };
    for (int64_t head = 0; head < H + Hkv; ++head)
      for (int64_t j = 0; j < half; ++j) {
        const int64_t c1 = head * dh + j, c2 = c1 + half;
        const double x1 = biased(c1), x2 = biased(c2);
        const double co = cos_tab[size_t(t * half + j)], si = sin_tab[size_t(t * half + j)];
        const double y1 = x1 * co - x2 * si, y2 = x2 * co + x1 * si;
        mq.check(near_bf16(to_float(out[c1]), y1), size_t(t * width + c1), to_float(out[c1]), y1);
        mq.check(near_bf16(to_float(out[c2]), y2), size_t(t * width + c2), to_float(out[c2]), y2);
      }
    for (int64_t col = int64_t(H + Hkv) * dh; col < width; ++col) {
      if (c.bias)
        mq.check(near_bf16(to_float(out[col]), biased(col)), size_t(t * width + col), to_float(out[col]), biased(col));
      else
        mq.check(bits(out[col]) == bits(in[col]), size_t(t * width + col), to_float(out[col]), to_float(in[col]));
    }
  }
  REQUIRE_NONE(mq);

  // Caches: exactly the k / v values now in qkv at exactly their slots, the
  // sentinel everywhere else.
  std::vector<bf16> k_want = cache_in, v_want = cache_in;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t slot = slots[size_t(t)];
    if (slot < 0) continue;
    const int64_t block = slot / bs, offset = slot % bs;
    for (int64_t g = 0; g < Hkv; ++g)
      for (int64_t j = 0; j < dh; ++j) {
        const size_t at = size_t(((block * Hkv + g) * bs + offset) * dh + j);
        k_want[at] = qkv[size_t(t * width + (H + g) * dh + j)];
        v_want[at] = qkv[size_t(t * width + (H + Hkv + g) * dh + j)];
      }
  }
  Mismatches mk, mv;
  for (size_t i = 0; i < cache_n; ++i) {
    mk.check(bits(k_got[i]) == bits(k_want[i]), i, to_float(k_got[i]), to_float(k_want[i]));
    mv.check(bits(v_got[i]) == bits(v_want[i]), i, to_float(v_got[i]), to_float(v_want[i]));
  }
  REQUIRE_NONE(mk);
  REQUIRE_NONE(mv);
}

}  // namespace

TEST_CASE("cuda rotary_cache_write rotates q and k and fills exactly the mapped cache slots", "[cuda]") {
  for (const RotaryCase& shape : {RotaryCase{32, 8, 128, 16, 0, false}, RotaryCase{4, 4, 48, 7, 0, false},
                                  RotaryCase{8, 2, 64, 7, 0, false}, RotaryCase{2, 2, 64, 16, 0, false}})
    for (int32_t T : {1, 3, 37})
      for (bool bias : {false, true}) {
        RotaryCase c = shape;
        c.T = T;
        c.bias = bias;
        check_rotary_cache_write(c);
      }
}

TEST_CASE("cuda rotary_cache_write on many rows", "[cuda]") {
  check_rotary_cache_write(RotaryCase{1, 1, 16, 16, 70000, true});  // T > 65535: the grid's y stride
}

// ---- swiglu ----------------------------------------------------------------------------

TEST_CASE("cuda swiglu matches silu(gate) times up in double", "[cuda]") {
  struct Case {
    int32_t T;
    int64_t I;
  };
  for (const Case c : {Case{1, 288}, Case{3, 7}, Case{37, 288}, Case{37, 14336}, Case{70000, 3}}) {
    CAPTURE(c.T, c.I);
    const std::vector<float> g = random_floats(size_t(c.T * c.I), 41, -8.0f, 8.0f);
    const std::vector<float> u = random_floats(size_t(c.T * c.I), 42, -2.0f, 2.0f);
    std::vector<bf16> gate_up(static_cast<size_t>(c.T * 2 * c.I));
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t i = 0; i < c.I; ++i) {
        gate_up[size_t(t * 2 * c.I + i)] = to_bf16(g[size_t(t * c.I + i)]);
        gate_up[size_t(t * 2 * c.I + c.I + i)] = to_bf16(u[size_t(t * c.I + i)]);
      }
    const auto d_gate_up = device_copy(gate_up);
    auto act = poisoned<bf16>(size_t(c.T * c.I));
    launch_swiglu(d_gate_up.data(), c.T, c.I, act.data(), nullptr);
    const std::vector<float> got = to_float(act.download());
    Mismatches m;
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t i = 0; i < c.I; ++i) {
        const double gv = to_float(gate_up[size_t(t * 2 * c.I + i)]);
        const double uv = to_float(gate_up[size_t(t * 2 * c.I + c.I + i)]);
        const double want = gv / (1.0 + std::exp(-gv)) * uv;
        const size_t e = size_t(t * c.I + i);
        m.check(near_bf16(got[e], want), e, got[e], want);
      }
    REQUIRE_NONE(m);
  }
}

// ---- select_tokens -------------------------------------------------------------------------

namespace {

// sampler.cpp's sample_token with top_p = 1, in double, for a given u; also
// how far u lies from the chosen token's interval ends (in probability).
int32_t cpu_sample(const float* logits, int64_t V, double temperature, double u, double* margin) {
  const double m = *std::max_element(logits, logits + V);
  std::vector<double> probs(static_cast<size_t>(V));
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += probs[size_t(i)] = std::exp((logits[i] - m) / temperature);
  double cumulative = 0;
  int32_t last_nonzero = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double p = probs[size_t(i)] / sum;
    if (p == 0.0) continue;
    last_nonzero = int32_t(i);
    const double before = cumulative;
    cumulative += p;
    if (u < cumulative) {
      *margin = std::min(u - before, cumulative - u);
      return int32_t(i);
    }
  }
  *margin = 0;
  return last_nonzero;
}

// Uniform logits in [-4, 4) plus a few planted peaks, so some tokens carry
// wide probability intervals.
std::vector<float> sampling_logits(int32_t S, int64_t V, uint64_t seed) {
  std::vector<float> logits = random_floats(size_t(S * V), seed, -4.0f, 4.0f);
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<int64_t> id(0, V - 1);
  std::uniform_real_distribution<float> lift(6.0f, 12.0f);
  for (int32_t k = 0; k < S; ++k)
    for (int p = 0; p < 8; ++p) logits[size_t(k * V + id(rng))] += lift(rng);
  return logits;
}

std::vector<int32_t> run_select(const std::vector<float>& logits, int32_t S, int64_t V, float temperature,
                                const std::vector<double>& uniforms) {
  const auto d_logits = device_copy(logits);
  const auto d_u = device_copy(uniforms);
  auto tokens = poisoned<int32_t>(size_t(S));
  launch_select_tokens(d_logits.data(), S, V, temperature, uniforms.empty() ? nullptr : d_u.data(), tokens.data(),
                       nullptr);
  return tokens.download();
}

}  // namespace

TEST_CASE("cuda select_tokens greedy is argmax with ties to the lowest id", "[cuda]") {
  for (int64_t V : {int64_t(1), int64_t(37), int64_t(1000), int64_t(128256)}) {
    CAPTURE(V);
    const int32_t S = 24;
    std::vector<float> logits = random_floats(size_t(S * V), 51 + uint64_t(V), -4.0f, 4.0f);
    std::vector<int32_t> want(static_cast<size_t>(S));
    std::mt19937_64 rng(52);
    std::uniform_int_distribution<int64_t> id(0, V - 1);
    for (int32_t k = 0; k < S; ++k) {
      float* row = &logits[size_t(k * V)];
      if (k % 3 == 0) {
        // Planted ties: the maximum at several ids, some in one thread's
        // stride (i, i + 1024), some far apart.
        std::vector<int64_t> ids = {id(rng), id(rng), id(rng)};
        if (ids[0] + 1024 < V) ids.push_back(ids[0] + 1024);
        for (int64_t i : ids) row[i] = 9.5f;
        want[size_t(k)] = int32_t(*std::min_element(ids.begin(), ids.end()));
      } else if (k == 1) {
        std::fill(row, row + V, 0.25f);  // all equal: id 0
        want[size_t(k)] = 0;
      } else {
        want[size_t(k)] = int32_t(std::max_element(row, row + V) - row);
      }
    }
    REQUIRE(run_select(logits, S, V, 0.0f, {}) == want);
  }
}

TEST_CASE("cuda select_tokens greedy on many rows", "[cuda]") {
  const int32_t S = 70000;
  const int64_t V = 3;
  const std::vector<float> logits = random_floats(size_t(S * V), 53);
  std::vector<int32_t> want(static_cast<size_t>(S));
  for (int32_t k = 0; k < S; ++k)
    want[size_t(k)] = int32_t(std::max_element(&logits[size_t(k * V)], &logits[size_t(k * V)] + V) - &logits[size_t(k * V)]);
  REQUIRE(run_select(logits, S, V, 0.0f, {}) == want);
}

TEST_CASE("cuda select_tokens sampling matches the CPU inverse CDF away from boundaries", "[cuda]") {
  const double kMargin = 1e-4;  // fp32 sums are good to ~1e-5 of the total here
  for (int64_t V : {int64_t(37), int64_t(1000), int64_t(128256)})
    for (float temperature : {0.5f, 1.0f, 1.7f}) {
      CAPTURE(V, temperature);
      const int32_t S = V > 10000 ? 24 : 64;
      const std::vector<float> logits = sampling_logits(S, V, 61 + uint64_t(V));
      std::vector<double> uniforms(static_cast<size_t>(S));
      std::vector<int32_t> want(static_cast<size_t>(S));
      std::mt19937_64 rng(62);
      for (int32_t k = 0; k < S; ++k) {
        const float* row = &logits[size_t(k * V)];
        double margin = 0;
        for (int tries = 0; tries < 200 && margin < kMargin; ++tries) {
          uniforms[size_t(k)] = double(rng() >> 11) * 0x1.0p-53;
          want[size_t(k)] = cpu_sample(row, V, temperature, uniforms[size_t(k)], &margin);
        }
        if (margin < kMargin) {  // no luck: the middle of the most probable token's interval
          const int64_t top = std::max_element(row, row + V) - row;
          const double m = row[top];
          double sum = 0, before = 0;
          for (int64_t i = 0; i < V; ++i) {
            const double p = std::exp((row[i] - m) / temperature);
            sum += p;
            if (i < top) before += p;
          }
          uniforms[size_t(k)] = (before + 0.5) / sum;  // p(top) is exp(0) = 1 before normalising
          want[size_t(k)] = cpu_sample(row, V, temperature, uniforms[size_t(k)], &margin);
        }
        if (k == 0) {  // u = 0: the first id (its probability is far above zero here)
          uniforms[0] = 0.0;
          want[0] = cpu_sample(row, V, temperature, 0.0, &margin);
          REQUIRE(want[0] == 0);
        }
        INFO("row " << k);
        REQUIRE((margin >= kMargin || k == 0));
      }
      REQUIRE(run_select(logits, S, V, temperature, uniforms) == want);
    }
}

TEST_CASE("cuda select_tokens sampling with u just below 1 takes the last id", "[cuda]") {
  // The last id carries a wide interval, so fp32 rounding cannot move the draw.
  const int64_t V = 128256;
  const int32_t S = 4;
  std::vector<float> logits = sampling_logits(S, V, 71);
  for (int32_t k = 0; k < S; ++k) logits[size_t(k * V + V - 1)] = 18.0f;
  const std::vector<double> uniforms(size_t(S), 1.0 - 0x1.0p-53);
  const std::vector<int32_t> got = run_select(logits, S, V, 1.0f, uniforms);
  REQUIRE(got == std::vector<int32_t>(size_t(S), int32_t(V - 1)));
}

// ---- fill_uniform and convert_to_bf16 ----------------------------------------------------------

namespace {

uint64_t host_splitmix64_finalize(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// fill.cu's documented value of element i: random_weights()' stream
// (SplitMix64 from `seed`, 53-bit uniforms, offset + scale * float(2u - 1)
// in float). Volatile stops the compiler contracting the float mul-add.
float host_fill_value(uint64_t seed, int64_t i, float scale, float offset) {
  const double u = double(host_splitmix64_finalize(seed + uint64_t(i) * 0x9E3779B97F4A7C15ULL) >> 11) * 0x1.0p-53;
  const float symmetric = float(u * 2.0 - 1.0);
  volatile float product = scale * symmetric;
  return offset + product;
}

}  // namespace

TEST_CASE("cuda fill_uniform has uniform moments and is deterministic and seeded", "[cuda]") {
  const int64_t n = 1000000;
  const float scale = 0.5f, offset = 0.25f;
  auto a = poisoned<float>(size_t(n)), b = poisoned<float>(size_t(n)), other = poisoned<float>(size_t(n));
  launch_fill_uniform(a.data(), n, 42, scale, offset, nullptr);
  launch_fill_uniform(b.data(), n, 42, scale, offset, nullptr);
  launch_fill_uniform(other.data(), n, 43, scale, offset, nullptr);
  const std::vector<float> x = a.download(), y = b.download(), z = other.download();

  double sum = 0, sum_sq = 0, lo = INFINITY, hi = -INFINITY;
  std::vector<int64_t> histogram(16, 0);
  for (float v : x) {
    sum += v;
    sum_sq += double(v) * v;
    lo = std::min(lo, double(v));
    hi = std::max(hi, double(v));
    histogram[size_t(std::clamp(int((v - (offset - scale)) / (2 * scale) * 16), 0, 15))]++;
  }
  const double mean = sum / double(n), var = sum_sq / double(n) - mean * mean;
  // Uniform on [offset - scale, offset + scale): mean offset (sd of the
  // estimate 2.9e-4), variance scale^2 / 3 (sd 7.5e-5).
  CHECK(std::fabs(mean - offset) < 2e-3);
  CHECK(std::fabs(var - scale * scale / 3) < 5e-4);
  CHECK(lo >= offset - scale);
  CHECK(hi <= offset + scale);
  CHECK(lo < offset - scale + 1e-4);
  CHECK(hi > offset + scale - 1e-4);
  for (int64_t count : histogram) CHECK(std::fabs(double(count) - double(n) / 16) < 6 * std::sqrt(double(n) / 16));

  REQUIRE(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  size_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += x[size_t(i)] == z[size_t(i)];
  CHECK(same < size_t(n) / 1000);

  // The documented hash, element by element (a last-bit FMA difference on
  // the host allowed).
  Mismatches m;
  for (int64_t i = 0; i < 4096; ++i) {
    const float want = host_fill_value(42, i, scale, offset);
    m.check(std::fabs(x[size_t(i)] - want) <= 1e-7, size_t(i), x[size_t(i)], want);
  }
  REQUIRE_NONE(m);
}

TEST_CASE("cuda fill_uniform in bf16 is the fp32 fill rounded", "[cuda]") {
  for (int64_t n : {int64_t(1), int64_t(37), int64_t(1000003)}) {
    CAPTURE(n);
    auto f = poisoned<float>(size_t(n));
    auto h = poisoned<bf16>(size_t(n));
    launch_fill_uniform(f.data(), n, 7, 0.02f, 1.0f, nullptr);
    launch_fill_uniform(h.data(), n, 7, 0.02f, 1.0f, nullptr);
    const std::vector<float> fv = f.download();
    const std::vector<bf16> hv = h.download();
    Mismatches m;
    for (size_t i = 0; i < fv.size(); ++i) m.check(bits(hv[i]) == bits(to_bf16(fv[i])), i, to_float(hv[i]), fv[i]);
    REQUIRE_NONE(m);
  }
}

TEST_CASE("cuda fill_uniform indexes beyond the int32 range", "[cuda]") {
  const int64_t n = (int64_t(1) << 31) + 1000;
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < size_t(n) * sizeof(bf16) + (size_t(1) << 30)) {
    WARN("skipped: needs " << n * 2 / (1 << 20) << " MiB of free device memory");
    return;
  }
  DeviceBuffer<bf16> p(static_cast<size_t>(n));
  launch_fill_uniform(p.data(), n, 99, 1.0f, 0.0f, nullptr);
  const int64_t tail = 4096;
  std::vector<bf16> got(static_cast<size_t>(tail));
  CUDA_CHECK(cudaMemcpy(got.data(), p.data() + (n - tail), size_t(tail) * sizeof(bf16), cudaMemcpyDeviceToHost));
  Mismatches m;
  for (int64_t k = 0; k < tail; ++k) {
    const float want = host_fill_value(99, n - tail + k, 1.0f, 0.0f);
    m.check(near_bf16(to_float(got[size_t(k)]), want), size_t(k), to_float(got[size_t(k)]), want);
  }
  REQUIRE_NONE(m);
}

TEST_CASE("cuda convert_to_bf16 rounds to nearest even like the host conversion", "[cuda]") {
  const int64_t n = 1000003;
  std::vector<float> src = random_floats(size_t(n), 81, -3.0f, 3.0f);
  std::mt19937_64 rng(82);
  for (size_t i = 0; i < src.size(); i += 3) src[i] = std::ldexp(src[i], int(rng() % 200) - 100);  // wide exponents
  src[1] = INFINITY, src[4] = -INFINITY, src[7] = 1e-40f, src[10] = 3.4e38f, src[13] = 1.00390625f;  // a tie
  const auto d_src = device_copy(src);
  auto dst = poisoned<bf16>(size_t(n));
  launch_convert_to_bf16(d_src.data(), n, dst.data(), nullptr);
  const std::vector<bf16> got = dst.download();
  Mismatches m;
  for (size_t i = 0; i < src.size(); ++i) m.check(bits(got[i]) == bits(to_bf16(src[i])), i, to_float(got[i]), src[i]);
  REQUIRE_NONE(m);
  REQUIRE(to_float(got[13]) == 1.0f);  // 1 + 2^-8 ties to even: 1
}
