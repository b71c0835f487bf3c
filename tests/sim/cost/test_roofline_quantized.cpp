// Quantized weights and KV cache (sim/quantization.h) in the byte counts,
// the KV capacity and the roofline, checked against hand arithmetic on the
// tiny model of test_roofline.cpp; the efficiencies against the evidence
// bands docs/quantization.md quotes, on llama-3.1-8b and the h200 preset;
// and the refusals.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>

#include "sim/cost/cost_models.h"
#include "sim/cost/roofline_model.h"
#include "sim/errors.h"
#include "sim/hardware_spec.h"
#include "sim/iteration_plan.h"
#include "sim/kv_capacity.h"
#include "sim/model_spec.h"
#include "sim/random.h"
#include "sim/quantization.h"
#include "support/synthetic_profile.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

// d 64, I 128, L 2, H 4, Hkv 2, dh 16, V 1000, bf16, untied, no biases
// (test_roofline.cpp): linear weights per layer q,k,v 64 x 128, o 64 x 64,
// gate+up 64 x 256, down 128 x 64 = 36,864; others: embedding and LM head
// 2 x 64,000, norms 2 x 2 x 64 + 64 = 320.
ModelSpec tiny(WeightQuantization w = WeightQuantization::None, KvCacheDtype kv = KvCacheDtype::Auto) {
  ModelSpec m = test::small_model("tiny", 64, 128, 2, 4, 2, 16, 1000, 1 << 20, "bfloat16");
  m.quantization.weights = w;
  m.quantization.kv_cache = kv;
  m.validate("tiny");
  return m;
}

HardwareSpec round_gpu(double flops, double bandwidth) {
  HardwareSpec h;
  h.name = "round";
  h.bf16_flops = flops;
  h.fp8_flops = 2 * flops;
  h.int8_ops = 2 * flops;
  h.memory_bandwidth = bandwidth;
  h.memory_bytes = 1e9;
  return h;
}

RooflineOptions ideal() {
  RooflineOptions o;
  o.compute_efficiency = 1.0;
  o.memory_efficiency = 1.0;
  o.iteration_overhead_s = 0;
  return o;
}

double gemms(const RooflineBreakdown& b) { return b.qkv_proj + b.o_proj + b.gate_up_proj + b.down_proj; }

constexpr double kTight = 1e-9;
constexpr double kOthers = 2 * 64000 + 320;  // parameters outside the linear layers

}  // namespace

TEST_CASE("Quantized weight bytes: linear layers as stored, the rest in the checkpoint's dtype", "[quantization]") {
  const double linear = 2 * 36864;  // both layers
  CHECK(tiny().weight_bytes() == Approx(2 * (linear + kOthers)).epsilon(kTight));
  // 8 bits + an fp32 scale per output channel: N = 128 + 64 + 256 + 64 = 512 per layer.
  for (auto w : {WeightQuantization::Fp8, WeightQuantization::Int8, WeightQuantization::W8A16}) {
    INFO(to_string(w));
    CHECK(tiny(w).weight_bytes() == Approx(linear + 2 * 4 * 512 + 2 * kOthers).epsilon(kTight));
  }
  // int4 in groups of 128 along K with fp16 scales: ceil(K / 128) = 1 group
  // for K = 64 (q,k,v, o, gate+up) and K = 128 (down): 2 x N bytes.
  CHECK(tiny(WeightQuantization::W4A16).weight_bytes() ==
        Approx(linear / 2 + 2 * 2 * 512 + 2 * kOthers).epsilon(kTight));
  // Llama-3.1-8B: 16.06 GB in bf16; the linear layers are 6.98e9 of its
  // 8.03e9 parameters, so fp8 stores them in ~7.0 GB and keeps 2.1 GB of
  // embedding and LM head in bf16.
  ModelSpec llama = resolve_model("llama-3.1-8b");
  CHECK(llama.weight_bytes() / 1e9 == Approx(16.06).margin(0.01));
  llama.quantization.weights = WeightQuantization::Fp8;
  CHECK(llama.weight_bytes() / 1e9 == Approx(6.98 + 2.10).margin(0.02));
}

TEST_CASE("Quantized KV bytes per token, and the capacity they free", "[quantization]") {
  // 2 x L x Hkv x dh = 128 elements per token.
  CHECK(tiny().kv_bytes_per_token() == 256);
  CHECK(tiny(WeightQuantization::None, KvCacheDtype::Fp8E4M3).kv_bytes_per_token() == 128);
  CHECK(tiny(WeightQuantization::None, KvCacheDtype::Fp8E5M2).kv_bytes_per_token() == 128);
  // int8: an fp32 scale per token and KV head for K and for V: 2 x 2 x 2 x 4.
  CHECK(tiny(WeightQuantization::None, KvCacheDtype::Int8).kv_bytes_per_token() == 128 + 32);

  // Capacity: floor((memory x utilization - weights) / (block x KV per token)).
  const HardwareSpec h200 = resolve_hardware("h200");
  ModelSpec llama = resolve_model("llama-3.1-8b");
  const int64_t bf16 = kv_capacity_blocks(llama, h200, 0.9, 16);
  llama.quantization.kv_cache = KvCacheDtype::Fp8E4M3;
  const int64_t fp8_kv = kv_capacity_blocks(llama, h200, 0.9, 16);
  llama.quantization.weights = WeightQuantization::Fp8;
  const int64_t fp8_both = kv_capacity_blocks(llama, h200, 0.9, 16);
  // 126.9 GB - 16.06 GB of weights over 2 MiB blocks (128 KiB per token).
  CHECK(bf16 == int64_t((141e9 * 0.9 - resolve_model("llama-3.1-8b").weight_bytes()) / (16 * 131072.0)));
  CHECK(fp8_kv == int64_t((141e9 * 0.9 - resolve_model("llama-3.1-8b").weight_bytes()) / (16 * 65536.0)));
  CHECK(fp8_kv >= 2 * bf16);
  CHECK(fp8_both == int64_t((141e9 * 0.9 - llama.weight_bytes()) / (16 * 65536.0)));
  CHECK(fp8_both > fp8_kv);
}

TEST_CASE("Roofline with quantized weights: bytes, compute dtype, activation quantization", "[quantization]") {
  SECTION("batch-1 decode is memory-bound: w4a16 streams a quarter of the weights") {
    const ModelSpec m = tiny(WeightQuantization::W4A16);
    RooflineModel r(m, round_gpu(1e30, 1e11), ideal());
    const RooflineBreakdown b = r.breakdown(test::decode_plan(1, 99));
    // q,k,v: 64 x 128 / 2 + 2 x 128 (scales) + (64 + 128) x 2 (bf16 in and out)
    // = 4096 + 256 + 384 = 4736 B per layer, at 0.95 of the bandwidth.
    CHECK(b.qkv_proj == Approx(2 * 4736 / (1e11 * 0.95)).epsilon(kTight));
  }
  SECTION("W8A8 inputs are 8-bit and a large prefill runs at the fp8 peak") {
    const ModelSpec m = tiny(WeightQuantization::Fp8);
    RooflineModel mem(m, round_gpu(1e30, 1e11), ideal());
    // q,k,v: 64 x 128 + 4 x 128 + 64 x 1 (fp8 in) + 128 x 2 (bf16 out) = 9024 B, at 0.75.
    CHECK(mem.breakdown(test::decode_plan(1, 99)).qkv_proj == Approx(2 * 9024 / (1e11 * 0.75)).epsilon(kTight));
    RooflineModel compute(m, round_gpu(1e12, 1e30), ideal());
    const RooflineBreakdown b = compute.breakdown(test::prefill_plan(4096));
    // 2 x 73,728 x 4096 FLOP at 2e12 x 0.80.
    CHECK(gemms(b) == Approx(2 * 73728.0 * 4096 / (2e12 * 0.80)).epsilon(kTight));
    // The quantization of each GEMM input: (2 + 1) B x (2 d + H dh + I) = 3 x 320
    // per token and layer, beside the bf16 elementwise bytes.
    RooflineModel plain(tiny(), round_gpu(1e30, 1e11), ideal());
    const double extra = mem.breakdown(test::prefill_plan(100)).elementwise - plain.breakdown(test::prefill_plan(100)).elementwise;
    CHECK(extra == Approx(2 * 100 * 3 * 320 / 1e11).epsilon(1e-6));
  }
  SECTION("an 8-bit KV cache halves decode attention's bytes at 0.7 of the bandwidth efficiency") {
    RooflineModel bf16(tiny(), round_gpu(1e30, 1e11), ideal());
    RooflineModel fp8(tiny(WeightQuantization::None, KvCacheDtype::Fp8E4M3), round_gpu(1e30, 1e11), ideal());
    // bf16 (test_roofline.cpp): (64,000 + 64 + 128) x 2 B x 2 layers; fp8:
    // (64,000 + 64) x 1 B + 128 x 2 B of Q and O, per layer.
    CHECK(bf16.breakdown(test::decode_plan(1, 999)).decode_attention == Approx(256768 / 1e11).epsilon(kTight));
    CHECK(fp8.breakdown(test::decode_plan(1, 999)).decode_attention ==
          Approx(2 * (64064 + 256) / (1e11 * 0.70)).epsilon(kTight));
  }
  SECTION("defaults unchanged: no quantization costs exactly what it did") {
    RooflineModel a(tiny(), round_gpu(1e12, 1e11), ideal());
    CHECK(a.breakdown(test::decode_plan(4, 100)).total() ==
          RooflineModel(tiny(), round_gpu(1e12, 1e11), ideal()).breakdown(test::decode_plan(4, 100)).total());
    CHECK(a.describe().count("quantization") == 0);
  }
}

TEST_CASE("Quantized GEMM speedups over bf16 on h200 fall in the published bands", "[quantization]") {
  // docs/quantization.md: W8A8 fp8 1.25-1.7x at small M; w4a16 ~3-3.9x up to
  // batch 16-32, ~1x by 128 and below 1x above; 8-bit KV decode attention
  // ~1.4x (half the bytes at 0.7 of the efficiency).
  const HardwareSpec h200 = resolve_hardware("h200");
  const RooflineOptions defaults;
  auto speedup = [&](WeightQuantization w, int batch) {
    ModelSpec q = resolve_model("llama-3.1-8b");
    q.quantization.weights = w;
    const RooflineModel base(resolve_model("llama-3.1-8b"), h200, defaults);
    const RooflineModel quant(q, h200, defaults);
    const IterationPlan p = test::decode_plan(batch, 512);
    return gemms(base.breakdown(p)) / gemms(quant.breakdown(p));
  };
  for (int b : {1, 8, 32}) {
    INFO("batch " << b);
    CHECK(speedup(WeightQuantization::Fp8, b) >= 1.25);
    CHECK(speedup(WeightQuantization::Fp8, b) <= 1.7);
  }
  for (int b : {1, 16}) {
    INFO("batch " << b);
    CHECK(speedup(WeightQuantization::W4A16, b) >= 3.0);
    CHECK(speedup(WeightQuantization::W4A16, b) <= 3.9);
  }
  CHECK(speedup(WeightQuantization::W4A16, 128) == Approx(1.0).margin(0.15));
  CHECK(speedup(WeightQuantization::W4A16, 256) < 1.0);
  ModelSpec kv = resolve_model("llama-3.1-8b");
  kv.quantization.kv_cache = KvCacheDtype::Fp8E4M3;
  const IterationPlan long_decode = test::decode_plan(32, 4096);
  const double attention = RooflineModel(resolve_model("llama-3.1-8b"), h200, defaults)
                               .breakdown(long_decode).decode_attention /
                           RooflineModel(kv, h200, defaults).breakdown(long_decode).decode_attention;
  CHECK(attention == Approx(1.4).margin(0.02));
}

TEST_CASE("Quantization refusals name what is wrong", "[quantization]") {
  CHECK_THROWS_WITH(parse_weight_quantization("fp4"), Catch::Contains("--quantization 'fp4'"));
  CHECK_THROWS_WITH(parse_kv_cache_dtype("int4"), Catch::Contains("4-bit KV cache is not modelled"));
  CHECK_THROWS_WITH(parse_kv_cache_dtype("bf8"), Catch::Contains("--kv-cache-dtype 'bf8'"));
  CHECK(parse_kv_cache_dtype("fp8") == KvCacheDtype::Fp8E4M3);
  CHECK(parse_weight_quantization("FP8") == WeightQuantization::Fp8);
  // A100 has no FP8 tensor cores: W8A8 fp8 is refused by name; int8 and the
  // weight-only modes run.
  const HardwareSpec a100 = resolve_hardware("a100-80gb");
  CHECK_THROWS_WITH(RooflineModel(tiny(WeightQuantization::Fp8), a100, RooflineOptions{}),
                    Catch::Contains("a100-80gb has no FP8 tensor cores"));
  CHECK_NOTHROW(RooflineModel(tiny(WeightQuantization::Int8), a100, RooflineOptions{}));
  CHECK_NOTHROW(RooflineModel(tiny(WeightQuantization::W4A16), a100, RooflineOptions{}));
  // A profile has tables for its own precision only: fp32 here, then w8a16
  // with an int8 KV cache (a JSON round trip keeps it).
  CostModelSettings settings;
  settings.profile = test::synthetic::synthetic_profile(test::synthetic::tiny_model());
  settings.profile_source = "p.json";
  ModelSpec profiled = test::synthetic::tiny_model();
  CHECK_NOTHROW(build_cost_models(settings, profiled, a100, nullptr));
  profiled.quantization.weights = WeightQuantization::W8A16;
  CHECK_THROWS_WITH(build_cost_models(settings, profiled, a100, nullptr),
                    Catch::Contains("p.json holds the tables of fp32 kernels only") &&
                        Catch::Contains("--quantization w8a16"));
  settings.profile->quantization = {WeightQuantization::W8A16, KvCacheDtype::Int8};
  settings.profile = DeviceProfile::from_json(settings.profile->to_json(), "p.json");
  CHECK(settings.profile->precision() == "fp32, w8a16 weights, int8 KV cache");
  profiled.quantization.kv_cache = KvCacheDtype::Int8;
  CHECK_NOTHROW(build_cost_models(settings, profiled, a100, nullptr));
  profiled.quantization.kv_cache = KvCacheDtype::Auto;
  CHECK_THROWS_WITH(build_cost_models(settings, profiled, a100, nullptr),
                    Catch::Contains("fp32, w8a16 weights, int8 KV cache kernels only") &&
                        Catch::Contains("--kv-cache-dtype auto"));
  // A profile naming a precision no one builds is refused naming the file.
  nlohmann::json j = settings.profile->to_json();
  j["quantization"]["kv_cache_dtype"] = "int4";
  CHECK_THROWS_WITH(DeviceProfile::from_json(j, "p.json"), Catch::Contains("p.json: quantization"));
}

TEST_CASE("Attention from the plan's sums equals the sum over its items, bit for bit", "[roofline]") {
  // The O(1) path a repeated decode step takes (the items may lag) against
  // the item-by-item sums, on random mixes of prefill chunks, decodes and
  // speculative verifications, at bf16 KV and at int8 KV (scales included).
  servesim::Rng rng(7);
  for (const KvCacheDtype kv : {KvCacheDtype::Auto, KvCacheDtype::Int8, KvCacheDtype::Fp8E4M3}) {
    ModelSpec llama = resolve_model("llama-3.1-8b");
    llama.quantization.kv_cache = kv;
    const RooflineModel m(llama, resolve_hardware("h200"), RooflineOptions{});
    for (int trial = 0; trial < 200; ++trial) {
      IterationPlan plan;
      const int64_t items = rng.uniform_int(1, 300);
      for (int64_t i = 0; i < items; ++i) {
        ScheduledSequence s;
        s.request_id = i;
        s.is_prefill = rng.uniform_int(0, 3) == 0;
        s.num_query_tokens = int32_t(s.is_prefill ? rng.uniform_int(1, 2048) : rng.uniform_int(1, 5));
        s.num_cached_tokens = int32_t(rng.uniform_int(0, 128 * 1024));
        s.samples = true;
        plan.add(s);
      }
      const RooflineModel::AttentionTerms a = m.attention_terms(plan), b = m.attention_terms_by_items(plan);
      INFO("trial " << trial);
      CHECK(std::memcmp(&a, &b, sizeof a) == 0);
    }
  }
}
