// The CPU backend's bf16 and int8 storage: conversions, the matmul over
// stored weights, the KV cache, and the decoder at each precision against
// the fp32 decoder.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/decoder_precision.h"
#include "kernels/decoder/host_weights.h"
#include "kernels/decoder/precision_agreement.h"
#include "sim/errors.h"
#include "sim/model_spec.h"
#include "support/test_support.h"

using namespace servesim;
using cpu::Matrix;
using cpu::Storage;

namespace {

Matrix random_matrix(Eigen::Index rows, Eigen::Index cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = float(2 * (double(rng() >> 11) * 0x1.0p-53) - 1);
  return m;
}

}  // namespace

TEST_CASE("bf16 and int8 storage: rounding bounds and edge values", "[cpu][quantized]") {
  // bf16 keeps 8 significant bits: round to nearest is within 2^-8 relative.
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10000; ++i) {
    const float x = float((double(rng() >> 11) * 0x1.0p-53 - 0.5) * std::ldexp(1.0, int(rng() % 40) - 20));
    const float y = cpu::from_bf16(cpu::to_bf16(x));
    REQUIRE(std::abs(double(y) - double(x)) <= std::ldexp(std::abs(double(x)), -8));
  }
  CHECK(cpu::from_bf16(cpu::to_bf16(1.0f)) == 1.0f);
  CHECK(cpu::from_bf16(cpu::to_bf16(-0.0f)) == 0.0f);
  CHECK(std::isnan(cpu::from_bf16(cpu::to_bf16(std::nanf("")))));
  CHECK(std::isinf(cpu::from_bf16(cpu::to_bf16(INFINITY))));

  // int8: |x - q s| <= s / 2, the largest |x| maps to +-127, a zero row to zeros.
  const std::vector<float> row = {0.5f, -2.0f, 1.25f, 0.0f, 1.999f, -0.01f};
  const float s = cpu::int8_scale(row.data(), int64_t(row.size()));
  CHECK(s == Approx(2.0 / 127));
  std::vector<int8_t> q(row.size());
  cpu::quantize_int8(row.data(), int64_t(row.size()), s, q.data());
  CHECK(q[1] == -127);
  std::vector<float> back(row.size());
  cpu::load_int8(q.data(), int64_t(q.size()), s, back.data());
  for (size_t i = 0; i < row.size(); ++i) REQUIRE(std::abs(back[i] - row[i]) <= s / 2 * (1 + 1e-6));
  const std::vector<float> zeros(8, 0.0f);
  const float zs = cpu::int8_scale(zeros.data(), 8);
  CHECK(zs == 1.0f);
  cpu::quantize_int8(zeros.data(), 8, zs, q.data());
  CHECK(std::all_of(q.begin(), q.begin() + 6, [](int8_t v) { return v == 0; }));
}

TEST_CASE("matmul over bf16 and int8 weights equals the product with their fp32 values", "[cpu][quantized]") {
  // Every path of matmul: one token (dot from the stored row), a decode
  // batch (2..7: the row converted once), a prefill (the chunk converted,
  // then a GEMM; 32+ tokens split the columns by thread), accumulating or not.
  const Eigen::Index K = 96, N = 200;
  const Matrix w = random_matrix(N, K, 2);
  for (Storage storage : {Storage::Bf16, Storage::Int8}) {
    const cpu::WeightMatrix stored(w, storage);
    CHECK(stored.bytes() == double(N * K) * cpu::storage_bytes(storage) + (storage == Storage::Int8 ? 4.0 * N : 0));
    Matrix values(N, K);
    stored.load_rows(0, N, values.data());
    // Stored values are a rounding of w, not w: within half an int8 step of
    // each row (1/254 of its largest value) or 2^-8 relative for bf16.
    for (Eigen::Index n = 0; n < N; ++n) {
      const double row_max = w.row(n).cwiseAbs().maxCoeff();
      for (Eigen::Index k = 0; k < K; ++k)
        REQUIRE(std::abs(values(n, k) - w(n, k)) <=
                (storage == Storage::Int8 ? row_max / 254 * 1.0001 : std::ldexp(std::abs(w(n, k)), -8)));
    }
    for (Eigen::Index T : {1, 2, 5, 7, 8, 31, 32, 100}) {
      for (bool accumulate : {false, true}) {
        INFO(cpu::to_string(storage) << ", T = " << T << (accumulate ? ", accumulating" : ""));
        const Matrix in = random_matrix(T, K, 10 + uint64_t(T));
        Matrix out = accumulate ? random_matrix(T, N, 99) : Matrix();
        const Matrix before = out;
        cpu::matmul(in, stored, out, accumulate);
        REQUIRE(out.rows() == T);
        REQUIRE(out.cols() == N);
        for (Eigen::Index t = 0; t < T; ++t)
          for (Eigen::Index n = 0; n < N; ++n) {
            double ref = accumulate ? double(before(t, n)) : 0.0;
            for (Eigen::Index k = 0; k < K; ++k) ref += double(in(t, k)) * double(values(n, k));
            REQUIRE(std::abs(double(out(t, n)) - ref) <= 1e-5 * (1 + std::abs(ref)));
          }
      }
    }
  }
}

TEST_CASE("KV cache in bf16 and int8: what is written is read back within one rounding", "[cpu][quantized]") {
  const int64_t layers = 2, blocks = 3, heads = 2, dh = 8;
  const int32_t bs = 4;
  for (Storage storage : {Storage::Fp32, Storage::Bf16, Storage::Int8}) {
    INFO(cpu::to_string(storage));
    cpu::KvCache kv(layers, blocks, bs, heads, dh, storage);
    const double elements = double(layers * blocks * heads * bs * dh);
    CHECK(kv.bytes() == 2 * elements * cpu::storage_bytes(storage) +
                            (storage == Storage::Int8 ? 2 * 4.0 * double(layers * blocks * heads * bs) : 0.0));
    // Distinct values in every (layer, block, head, slot): a read from the
    // wrong place is off by far more than a rounding.
    auto value = [&](int64_t l, int64_t b, int64_t h, int64_t s, int64_t i, bool is_v) {
      return float((is_v ? -1 : 1) * (1 + l * 100 + b * 30 + h * 10 + s * 2 + 0.1 * double(i)));
    };
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t s = 0; s < bs; ++s) {
            std::vector<float> k(dh), v(dh);
            for (int64_t i = 0; i < dh; ++i) k[size_t(i)] = value(l, b, h, s, i, false), v[size_t(i)] = value(l, b, h, s, i, true);
            kv.write(l, b, h, s, k.data(), v.data());
          }
    std::vector<float> k(size_t(bs * dh)), v(size_t(bs * dh));
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t h = 0; h < heads; ++h) {
          kv.load_k(l, b, h, 3, k.data());  // the first 3 slots
          kv.load_v(l, b, h, 3, v.data());
          for (int64_t s = 0; s < 3; ++s)
            for (int64_t i = 0; i < dh; ++i) {
              const double want_k = value(l, b, h, s, i, false), want_v = value(l, b, h, s, i, true);
              // int8: half a step of the row's largest value; bf16: 2^-8 relative.
              const double row_max = std::abs(value(l, b, h, s, dh - 1, false));  // the same for V
              auto tol = [&](double want) {
                return storage == Storage::Int8   ? row_max / 254 * 1.0001
                       : storage == Storage::Bf16 ? std::ldexp(std::abs(want), -8)
                                                  : 0.0;
              };
              REQUIRE(std::abs(k[size_t(s * dh + i)] - want_k) <= tol(want_k));
              REQUIRE(std::abs(v[size_t(s * dh + i)] - want_v) <= tol(want_v));
            }
        }
  }
}

namespace {

// A decoder-sized shape (d 256, 4 layers, GQA 8/2): the rounding errors of
// quantized weights grow with the depth and the width of the dot products.
ModelSpec accuracy_spec() {
  return test::small_model("test-accuracy", 256, 688, 4, 8, 2, 32, 512, 2048, "float32", false, false, "llama");
}

std::vector<int32_t> random_tokens(int64_t vocab, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

// The 4-layer model at `precision` against itself in fp32 over `steps`
// greedy steps of a 32-token prompt.
PrecisionAgreement agreement(const ModelSpec& spec, const cpu::Precision& precision, int steps) {
  const int32_t bs = 16;
  const int64_t blocks = (32 + steps) / bs + 2;
  auto ref = make_cpu_decoder(random_weights(spec, 5), blocks, bs, CpuDecoderOptions{1});
  auto got = make_cpu_decoder(random_weights(spec, 5), blocks, bs, CpuDecoderOptions{1, precision});
  return precision_agreement(*ref, *got, random_tokens(spec.vocab_size, 32, 17), steps);
}

}  // namespace

TEST_CASE("decoder at bf16, w8a16 and an int8 KV cache stays close to fp32", "[decoder][quantized]") {
  // Measured on this shape (max relative logit error over 200 steps; greedy
  // agreement): bf16 0.0043 (0.995), w8a16 0.0056 (1.0), int8 KV 0.0021
  // (1.0), w8a16 + int8 KV 0.0056 (0.995). The bounds leave about 2x
  // margin on the error; a wrong scale or a misread cache is off by O(1)
  // and agrees on ~1/V of the steps. The decoder benchmark reports the same figures for
  // small-110m (docs/quantization.md).
  struct Case {
    const char* name;
    cpu::Precision precision;
    double max_rel, min_agree;
  };
  const Case cases[] = {
      {"bf16 weights and KV", {Storage::Bf16, Storage::Bf16, Storage::Bf16}, 0.01, 0.97},
      {"w8a16", {Storage::Int8, Storage::Fp32, Storage::Fp32}, 0.012, 0.97},
      {"int8 KV cache", {Storage::Fp32, Storage::Fp32, Storage::Int8}, 0.005, 0.97},
      {"w8a16 and int8 KV cache", {Storage::Int8, Storage::Fp32, Storage::Int8}, 0.012, 0.97},
  };
  const ModelSpec spec = accuracy_spec();
  for (const Case& c : cases) {
    const PrecisionAgreement a = agreement(spec, c.precision, 200);
    INFO(c.name << ": max |dlogit| / max |logit| " << a.max_rel_diff << ", greedy agreement " << a.greedy_agree);
    CHECK(a.max_rel_diff > 0);  // really quantized
    CHECK(a.max_rel_diff <= c.max_rel);
    CHECK(a.greedy_agree >= c.min_agree);
  }
}

TEST_CASE("decoder precision: the flags each device builds, and the rest refused by name", "[quantized]") {
  const DeviceChoice cpu_device{}, cuda_device{true, 0};
  DecoderPrecision p;
  CHECK(p.on(cpu_device).dtype == "fp32");
  CHECK(p.on(cuda_device).dtype == "bf16");
  p.dtype = parse_decoder_dtype("bfloat16");
  p.quantization.weights = WeightQuantization::W8A16;
  p.quantization.kv_cache = KvCacheDtype::Int8;
  const cpu::Precision storage = cpu_precision(p.on(cpu_device));
  CHECK(storage.linear == Storage::Int8);
  CHECK(storage.embedding == Storage::Bf16);
  CHECK(storage.kv == Storage::Int8);
  CHECK(p.on(cpu_device).describe() == "bf16, w8a16 weights, int8 KV cache");
  REQUIRE_THROWS_WITH(p.on(cuda_device), Catch::Contains("CUDA decoder builds bf16"));
  REQUIRE_THROWS_WITH(parse_decoder_dtype("float16"), Catch::Contains("--dtype 'float16'"));
  DecoderPrecision fp8;
  fp8.quantization.weights = WeightQuantization::Fp8;
  REQUIRE_THROWS_WITH(fp8.on(cpu_device), Catch::Contains("--quantization fp8"));
  DecoderPrecision fp8_kv;
  fp8_kv.quantization.kv_cache = KvCacheDtype::Fp8E4M3;
  REQUIRE_THROWS_AS(fp8_kv.on(cpu_device), InputError);

  // KV bytes per token: fp32 2 L Hkv dh 4, bf16 half, int8 2 L Hkv (dh + 4).
  const ModelSpec m = accuracy_spec();  // L 4, Hkv 2, dh 32
  CHECK(decoder_kv_bytes_per_token(m, cpu_device) == 2.0 * 4 * 2 * 32 * 4);
  DecoderPrecision bf16;
  bf16.dtype = "bf16";
  CHECK(decoder_kv_bytes_per_token(m, cpu_device, bf16) == 2.0 * 4 * 2 * 32 * 2);
  DecoderPrecision int8_kv;
  int8_kv.quantization.kv_cache = KvCacheDtype::Int8;
  CHECK(decoder_kv_bytes_per_token(m, cpu_device, int8_kv) == 2.0 * 4 * 2 * (32 + 4));
  CHECK(decoder_kv_bytes_per_token(m, cuda_device) == 2.0 * 4 * 2 * 32 * 2);
}

TEST_CASE("decoder: weight and KV bytes follow the storage", "[decoder][quantized]") {
  const ModelSpec m = accuracy_spec();
  const int64_t d = m.hidden_size, I = m.intermediate_size, V = m.vocab_size, L = m.num_hidden_layers;
  const int64_t qkv = (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim, q = m.num_attention_heads * m.head_dim;
  const double linear = double(L * (qkv * d + d * q + 2 * I * d + d * I)), rows = double(L * (qkv + d + 2 * I + d));
  const double other = double(2 * V * d), norms = double(L * 2 * d + d);
  auto model = make_cpu_decoder(random_weights(m, 1), 10, 16,
                                CpuDecoderOptions{1, {Storage::Int8, Storage::Bf16, Storage::Int8}});
  CHECK(model->weight_bytes() == linear + 4 * rows + 2 * other + 4 * norms);
  CHECK(model->kv_cache_bytes() == 10.0 * 16 * double(2 * L * m.num_key_value_heads * (m.head_dim + 4)));
  CHECK_THAT(model->device(), Catch::Contains("linear int8, embedding bf16, kv int8"));
}
