// The roofline cost model on a tiny model and a round-number GPU, checked
// against hand arithmetic; and the KV capacity rule.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "sim/errors.h"
#include "sim/hardware_spec.h"
#include "sim/iteration_plan.h"
#include "sim/kv_capacity.h"
#include "sim/model_spec.h"
#include "sim/cost/roofline_model.h"
#include "support/test_support.h"

using servesim::HardwareSpec;
using servesim::test::seq;
using servesim::InputError;
using servesim::IterationPlan;
using servesim::IterationResult;
using servesim::kv_capacity_blocks;
using servesim::ModelSpec;
using servesim::resolve_hardware;
using servesim::resolve_model;
using servesim::RooflineBreakdown;
using servesim::RooflineModel;
using servesim::RooflineOptions;
using servesim::ScheduledSequence;

namespace {

// d 64, I 128, L 2, H 4, Hkv 2, dh 16, V 1000, bf16, untied, no biases.
// Linear-layer weights per layer (K x N):
//   q,k,v 64 x (4 + 2*2)*16 = 64 x 128  =  8,192
//   o     64 x 64                        =  4,096
//   gate+up 64 x 256                     = 16,384
//   down  128 x 64                       =  8,192
//   total                                  36,864; two layers 73,728 (147,456 B)
ModelSpec tiny_model() {
  ModelSpec m =
      servesim::test::small_model("tiny", 64, 128, 2, 4, 2, 16, 1000, 1 << 20, "bfloat16");
  m.validate("tiny");
  return m;
}
constexpr double kLinearParams = 73728;  // both layers, see above

// 1 TFLOP/s, 100 GB/s: ridge point 10 FLOP/byte.
HardwareSpec round_gpu(double flops = 1e12, double bandwidth = 1e11) {
  HardwareSpec h;
  h.name = "round";
  h.bf16_flops = flops;
  h.memory_bandwidth = bandwidth;
  h.memory_bytes = 1e9;
  return h;
}

RooflineOptions ideal(double overhead_s = 0) {
  RooflineOptions o;
  o.compute_efficiency = 1.0;
  o.memory_efficiency = 1.0;
  o.iteration_overhead_s = overhead_s;
  return o;
}

// Ideal but for the given efficiencies.
RooflineOptions with_efficiency(double compute, double memory) {
  RooflineOptions o = ideal();
  o.compute_efficiency = compute;
  o.memory_efficiency = memory;
  return o;
}

IterationPlan plan_of(std::initializer_list<ScheduledSequence> seqs) {
  IterationPlan p;
  for (const ScheduledSequence& s : seqs) p.add(s);
  return p;
}

IterationPlan decode_batch(int n, int32_t cached) {
  IterationPlan p;
  for (int i = 0; i < n; ++i) p.add(seq(i, 1, cached, false, true));
  return p;
}

double gemm_time(const RooflineBreakdown& b) {
  return b.qkv_proj + b.o_proj + b.gate_up_proj + b.down_proj;
}

double duration(const RooflineModel& model, const IterationPlan& plan) { return model.seconds(plan); }

constexpr double kTight = 1e-9;  // relative: only floating-point rounding

}  // namespace

TEST_CASE("op_time is the max of compute time and memory time", "[roofline]") {
  RooflineModel m(tiny_model(), round_gpu(), ideal());
  CHECK(m.op_time(1e12, 0) == Approx(1.0));
  CHECK(m.op_time(0, 1e11) == Approx(1.0));
  CHECK(m.op_time(1e12, 1e10) == Approx(1.0));   // compute-bound
  CHECK(m.op_time(1e11, 1e11) == Approx(1.0));   // memory-bound
  CHECK(m.op_time(10.0, 1.0) == Approx(1e-11));  // exactly at the ridge (10 FLOP/B)
  RooflineModel h(tiny_model(), round_gpu(), with_efficiency(0.5, 0.25));
  CHECK(h.op_time(1e12, 0) == Approx(2.0));
  CHECK(h.op_time(0, 1e11) == Approx(4.0));
}

TEST_CASE("Batch-1 decode is memory-bound: GEMM time = bytes moved / bandwidth", "[roofline]") {
  RooflineModel m(tiny_model(), round_gpu(), ideal());
  const RooflineBreakdown b = m.breakdown(decode_batch(1, 99));
  // Weights 2 x 36,864 x 2 B = 147,456 B, plus activations in and out per
  // layer (64+128) + (64+64) + (64+256) + (128+64) = 832 elements, 2 layers x
  // 2 B = 3,328 B: 150,784 B at 1e11 B/s. FLOPs 2 x 73,728 = 147,456 would
  // take only 1.47e-7 s at 1e12.
  CHECK(gemm_time(b) == Approx(150784 / 1e11).epsilon(kTight));
  // ~ weight bytes / bandwidth (activations are 2% here).
  CHECK(gemm_time(b) == Approx(kLinearParams * 2 / 1e11).epsilon(0.03));
  CHECK(gemm_time(b) > kLinearParams * 2 / 1e11);
  // Per GEMM: q,k,v 2 x 2 x (8192 + 64 + 128) B.
  CHECK(b.qkv_proj == Approx(2 * 2 * (8192 + 64 + 128) / 1e11).epsilon(kTight));
  CHECK(b.down_proj == Approx(2 * 2 * (8192 + 128 + 64) / 1e11).epsilon(kTight));
  CHECK(b.prefill_attention == 0);
  CHECK(b.decode_attention > 0);
}

TEST_CASE("A large prefill is compute-bound: GEMM time = 2 params tokens / peak", "[roofline]") {
  RooflineModel m(tiny_model(), round_gpu(), ideal());
  const int32_t T = 4096;
  const RooflineBreakdown b = m.breakdown(plan_of({seq(0, T, 0, true, true)}));
  // 2 x 73,728 x 4096 = 603,979,776 FLOP at 1e12. The largest memory time,
  // gate+up's (16,384 + 4096 x 320) x 2 B = 2.65e-5 s per layer, is well under
  // its compute time 2 x 4096 x 16,384 / 1e12 = 1.34e-4 s: every GEMM is
  // compute-bound, so the sum is exact.
  CHECK(gemm_time(b) == Approx(2 * kLinearParams * T / 1e12).epsilon(kTight));
  CHECK(gemm_time(b) == Approx(603979776 / 1e12).epsilon(kTight));
  CHECK(b.gate_up_proj == Approx(2 * 2 * 64 * 256.0 * T / 1e12).epsilon(kTight));
  CHECK(b.decode_attention == 0);
  CHECK(b.prefill_attention > 0);
}

TEST_CASE("Attention FLOPs: 4 H dh (q c + q(q+1)/2) L", "[roofline]") {
  // Bandwidth so high that every operator is compute-bound: time x peak is
  // the FLOP count.
  RooflineModel m(tiny_model(), round_gpu(1e12, 1e30), ideal());
  const double H = 4, dh = 16, L = 2;
  auto attention_flops = [&](double q, double c) { return 4 * H * dh * (q * c + q * (q + 1) / 2) * L; };

  SECTION("a whole prompt: q = 1024 over nothing cached") {
    const RooflineBreakdown b = m.breakdown(plan_of({seq(0, 1024, 0, true, true)}));
    // 4 x 4 x 16 x (1024 x 1025 / 2) x 2 = 268,697,600 FLOP.
    CHECK(attention_flops(1024, 0) == 268697600.0);
    CHECK(b.prefill_attention * 1e12 == Approx(268697600.0).epsilon(kTight));
  }
  SECTION("a chunk: q = 256 over c = 768 cached") {
    const RooflineBreakdown b = m.breakdown(plan_of({seq(0, 256, 768, true, false)}));
    // pairs 256 x 768 + 256 x 257 / 2 = 229,504; x 64 x 4 x 2 = 117,506,048.
    CHECK(b.prefill_attention * 1e12 == Approx(117506048.0).epsilon(kTight));
    CHECK(b.prefill_attention * 1e12 == Approx(attention_flops(256, 768)).epsilon(kTight));
  }
  SECTION("decode: q = 1 over c = 99 sees 100 keys") {
    const RooflineBreakdown b = m.breakdown(decode_batch(1, 99));
    CHECK(b.decode_attention * 1e12 == Approx(4 * 4 * 16 * 100 * 2.0).epsilon(kTight));
    CHECK(b.prefill_attention == 0);
  }
  SECTION("speculative verification: q = k+1 = 5 decode tokens over c = 50") {
    const RooflineBreakdown b = m.breakdown(plan_of({seq(0, 5, 50, false, true)}));
    // pairs 5 x 50 + 15 = 265.
    CHECK(b.decode_attention * 1e12 == Approx(4 * 4 * 16 * 265 * 2.0).epsilon(kTight));
  }
  SECTION("sequences of one kind add up; prefill and decode kernels are separate") {
    const IterationPlan p = plan_of({seq(1, 100, 0, true, true), seq(2, 30, 70, true, false),
                                     seq(3, 1, 500, false, true), seq(4, 1, 9, false, true)});
    const RooflineBreakdown b = m.breakdown(p);
    CHECK(b.prefill_attention * 1e12 ==
          Approx(attention_flops(100, 0) + attention_flops(30, 70)).epsilon(kTight));
    CHECK(b.decode_attention * 1e12 ==
          Approx(attention_flops(1, 500) + attention_flops(1, 9)).epsilon(kTight));
  }
}

TEST_CASE("Decode attention streams the KV cache: bytes / bandwidth", "[roofline]") {
  // Peak so high that every operator is memory-bound.
  RooflineModel m(tiny_model(), round_gpu(1e30, 1e11), ideal());
  // q = 1, c = 999: K and V of 1000 tokens read, 2 x Hkv x dh = 64 elements
  // each; the new token's K,V written (64); Q read and O written (2 x 64).
  // (64,000 + 64 + 128) x 2 B x 2 layers = 256,768 B.
  const RooflineBreakdown b = m.breakdown(decode_batch(1, 999));
  CHECK(b.decode_attention == Approx(256768 / 1e11).epsilon(kTight));
  // Twice the context: the cache read dominates and nearly doubles the time.
  const RooflineBreakdown b2 = m.breakdown(decode_batch(1, 1999));
  CHECK(b2.decode_attention / b.decode_attention == Approx(2.0).epsilon(0.01));
}

TEST_CASE("The LM head runs only for sampling sequences", "[roofline]") {
  RooflineModel m(tiny_model(), round_gpu(), ideal());
  // A prefill chunk that is not the prompt's last: no token sampled.
  const RooflineBreakdown no = m.breakdown(plan_of({seq(0, 512, 0, true, false)}));
  CHECK(no.lm_head == 0);
  // One sampling row: GEMM [1, 64] x [64, 1000] reads 64,000 weights + 64 in
  // + final norm 64 (2 B each) and writes 1000 fp32 logits: 132,256 B, 1.32e-6
  // s (its 128,000 FLOP take 1.28e-7 s); the sampler reads the logits, 4000 B.
  const RooflineBreakdown one = m.breakdown(plan_of({seq(0, 512, 0, true, true)}));
  CHECK(one.lm_head == Approx((132256 + 4000) / 1e11).epsilon(kTight));
  // Three sampling decodes and a non-sampling chunk: S = 3.
  // 2 x (64,000 + 2 x 3 x 64) + 4 x 3000 = 140,768 B; sampler 12,000 B.
  const IterationPlan p = plan_of({seq(1, 1, 10, false, true), seq(2, 1, 20, false, true),
                                   seq(3, 1, 30, false, true), seq(4, 200, 0, true, false)});
  REQUIRE(p.num_sampling_sequences == 3);
  CHECK(m.breakdown(p).lm_head == Approx((140768 + 12000) / 1e11).epsilon(kTight));
  // The same plan with nobody sampling: no LM head at all.
  const IterationPlan q = plan_of({seq(1, 1, 10, false, false), seq(4, 200, 0, true, false)});
  CHECK(m.breakdown(q).lm_head == 0);
}

TEST_CASE("Batch-1 decode total by hand", "[roofline]") {
  RooflineModel m(tiny_model(), round_gpu(), ideal());
  const RooflineBreakdown b = m.breakdown(decode_batch(1, 99));
  // GEMMs 150,784 B (above).
  // Attention: (100 x 64 + 64 + 128) x 2 B x 2 layers = 26,368 B; its 25,600
  // FLOP x 2 layers are 10x faster.
  CHECK(b.decode_attention == Approx(26368 / 1e11).epsilon(kTight));
  // Elementwise per token per layer: norms 4 x 64 + rotary 2 x (64 + 32) +
  // residuals 6 x 64 + SwiGLU 3 x 128 = 1216 elements; x 2 layers + embedding
  // gather 2 x 64 = 2560 elements x 2 B = 5120 B.
  CHECK(b.elementwise == Approx(5120 / 1e11).epsilon(kTight));
  // LM head 136,256 B (above); no overhead.
  CHECK(b.overhead == 0);
  const double expected = (150784 + 26368 + 5120 + 136256) / 1e11;  // 3.18528e-6 s
  CHECK(b.total() == Approx(expected).epsilon(kTight));
  CHECK(m.seconds(decode_batch(1, 99)) == Approx(expected).epsilon(kTight));
}

TEST_CASE("The iteration overhead is added once per iteration", "[roofline]") {
  RooflineModel with(tiny_model(), round_gpu(), ideal(1e-3));
  RooflineModel without(tiny_model(), round_gpu(), ideal(0));
  for (int n : {1, 2, 16, 64}) {
    INFO(n << " sequences");
    const IterationPlan p = decode_batch(n, 100);
    CHECK(duration(with, p) - duration(without, p) == Approx(1e-3).epsilon(1e-9));
    CHECK(with.breakdown(p).overhead == 1e-3);
  }
  const IterationPlan mixed = plan_of({seq(1, 300, 0, true, true), seq(2, 1, 40, false, true),
                                       seq(3, 1, 41, false, true)});
  CHECK(duration(with, mixed) - duration(without, mixed) == Approx(1e-3).epsilon(1e-9));
}

TEST_CASE("The sequence overhead is added once per sampling sequence", "[roofline]") {
  RooflineOptions per_sequence = ideal(1e-3);
  per_sequence.sequence_overhead_s = 5e-4;
  RooflineModel with(tiny_model(), round_gpu(), per_sequence);
  RooflineModel without(tiny_model(), round_gpu(), ideal(1e-3));
  for (int n : {1, 2, 16, 64}) {
    INFO(n << " sequences");
    const IterationPlan p = decode_batch(n, 100);
    CHECK(duration(with, p) - duration(without, p) == Approx(n * 5e-4).epsilon(1e-9));
    CHECK(with.breakdown(p).overhead == Approx(1e-3 + n * 5e-4).epsilon(1e-12));
  }
  // A prefill chunk that samples nothing pays no sequence overhead.
  const IterationPlan mixed = plan_of({seq(1, 300, 0, true, false), seq(2, 1, 40, false, true),
                                       seq(3, 1, 41, false, true)});
  CHECK(duration(with, mixed) - duration(without, mixed) == Approx(2 * 5e-4).epsilon(1e-9));
  // A speculative verification samples k + 1 rows of one sequence: once.
  ScheduledSequence verify = seq(5, 4, 40, false, true);
  verify.num_sample_rows = 4;
  const IterationPlan speculative = plan_of({verify});
  REQUIRE(speculative.num_sample_rows == 4);
  CHECK(with.breakdown(speculative).overhead == Approx(1e-3 + 5e-4).epsilon(1e-12));
  CHECK(with.describe()["sequence_overhead_s"] == 5e-4);
  CHECK_FALSE(without.describe().contains("sequence_overhead_s"));  // unmodelled: the description is unchanged
}

TEST_CASE("Efficiencies scale the roofline", "[roofline]") {
  const IterationPlan decode = decode_batch(1, 99);
  const IterationPlan prefill = plan_of({seq(0, 4096, 0, true, true)});
  RooflineModel full(tiny_model(), round_gpu(), ideal());

  SECTION("half compute efficiency doubles compute-bound work, not memory-bound work") {
    RooflineModel half(tiny_model(), round_gpu(), with_efficiency(0.5, 1.0));
    CHECK(gemm_time(half.breakdown(prefill)) ==
          Approx(2 * gemm_time(full.breakdown(prefill))).epsilon(kTight));
    CHECK(gemm_time(half.breakdown(decode)) ==
          Approx(gemm_time(full.breakdown(decode))).epsilon(kTight));
  }
  SECTION("half memory efficiency doubles memory-bound work, not compute-bound work") {
    RooflineModel half(tiny_model(), round_gpu(), with_efficiency(1.0, 0.5));
    CHECK(gemm_time(half.breakdown(decode)) ==
          Approx(2 * gemm_time(full.breakdown(decode))).epsilon(kTight));
    CHECK(gemm_time(half.breakdown(prefill)) ==
          Approx(gemm_time(full.breakdown(prefill))).epsilon(kTight));
  }
  SECTION("both at 0.5: every operator and the total take twice as long") {
    RooflineModel half(tiny_model(), round_gpu(), with_efficiency(0.5, 0.5));
    for (const IterationPlan* p : {&decode, &prefill}) {
      CHECK(duration(half, *p) == Approx(2 * duration(full, *p)).epsilon(kTight));
    }
  }
}

TEST_CASE("Duration grows with tokens and with context length", "[roofline]") {
  RooflineModel m(tiny_model(), round_gpu(), RooflineOptions{});
  SECTION("prefill tokens") {
    double previous = 0;
    for (int32_t t = 1; t <= 16384; t *= 2) {
      INFO(t << " tokens");
      const double d = duration(m, plan_of({seq(0, t, 0, true, true)}));
      CHECK(d >= previous);
      previous = d;
    }
    CHECK(duration(m, plan_of({seq(0, 16384, 0, true, true)})) >
          10 * duration(m, plan_of({seq(0, 16, 0, true, true)})));
  }
  SECTION("decode context") {
    double previous = 0;
    for (int32_t c = 0; c <= 1 << 20; c = c ? c * 2 : 1) {
      INFO(c << " cached");
      const double d = duration(m, decode_batch(1, c));
      CHECK(d >= previous);
      previous = d;
    }
    CHECK(duration(m, decode_batch(1, 1 << 20)) > 2 * duration(m, decode_batch(1, 0)));
  }
  SECTION("decode batch size") {
    double previous = 0;
    for (int n = 1; n <= 256; n *= 2) {
      const double d = duration(m, decode_batch(n, 1000));
      CHECK(d >= previous);
      previous = d;
    }
  }
}

TEST_CASE("Llama-3.1-8B on H200: decode reads the weights, prefill saturates compute",
          "[roofline]") {
  const RooflineOptions defaults;
  RooflineModel m(resolve_model("llama-3.1-8b"), resolve_hardware("h200"), defaults);
  const double bw = 4.8e12 * defaults.memory_efficiency;
  const double peak = 989.4e12 * defaults.compute_efficiency;
  // Linear layers per layer: q 4096^2 + k,v 2 x 4096 x 1024 + o 4096^2 +
  // MLP 3 x 4096 x 14336 = 218,103,808; x 32 = 6,979,321,856 parameters.
  const double linear = 6979321856.0;
  const RooflineBreakdown d = m.breakdown(decode_batch(1, 1000));
  CHECK(gemm_time(d) == Approx(2 * linear / bw).epsilon(0.001));  // ~3.42 ms
  // LM head 128256 x 4096 bf16 = 1.05 GB.
  CHECK(d.lm_head == Approx(128256.0 * 4096 * 2 / bw).epsilon(0.01));
  const RooflineBreakdown p = m.breakdown(plan_of({seq(0, 8192, 0, true, true)}));
  CHECK(gemm_time(p) == Approx(2 * linear * 8192 / peak).epsilon(1e-6));  // ~165 ms
}

TEST_CASE("RooflineOptions validation", "[roofline]") {
  RooflineOptions o;
  CHECK_NOTHROW(o.validate());
  o.compute_efficiency = 0;
  CHECK_THROWS_AS(o.validate(), InputError);
  o = RooflineOptions{};
  o.memory_efficiency = 1.5;
  CHECK_THROWS_AS(o.validate(), InputError);
  o = RooflineOptions{};
  o.iteration_overhead_s = -1e-6;
  CHECK_THROWS_AS(o.validate(), InputError);
  o = RooflineOptions{};
  o.sequence_overhead_s = -1e-6;
  CHECK_THROWS_AS(o.validate(), InputError);
  o = RooflineOptions{};
  o.compute_efficiency = 2;
  CHECK_THROWS_AS(RooflineModel(tiny_model(), round_gpu(), o), InputError);
}

TEST_CASE("KV capacity: floor((memory x utilization - weights) / block bytes)", "[kv_capacity]") {
  SECTION("tiny model, round numbers") {
    // Parameters: embedding + LM head 2 x 1000 x 64 = 128,000; layers
    // 2 x (36,864 + norms 128) = 73,984; final norm 64: 202,048 -> 404,096 B.
    // KV per token 2 x 2 x 2 x 16 x 2 = 256 B; 16-token blocks 4096 B.
    // (1e9 x 0.5 - 404,096) / 4096 = 121,971.66 -> 121,971.
    const ModelSpec m = tiny_model();
    REQUIRE(m.parameter_count() == 202048);
    REQUIRE(m.kv_bytes_per_token() == 256);
    CHECK(kv_capacity_blocks(m, round_gpu(), 0.5, 16) == 121971);
    // Block size 1: (5e8 - 404,096) / 256 = 1,951,546.5 -> 1,951,546.
    CHECK(kv_capacity_blocks(m, round_gpu(), 0.5, 1) == 1951546);
  }
  SECTION("Llama-3.1-8B on H200 and H100") {
    // 141e9 x 0.9 - 8,030,261,248 x 2 = 110,839,477,504 B; / (16 x 131,072)
    // = 52,852.4 -> 52,852.
    const ModelSpec m = resolve_model("llama-3.1-8b");
    CHECK(kv_capacity_blocks(m, resolve_hardware("h200"), 0.9, 16) == 52852);
    // 80e9 x 0.9 - 16,060,522,496 = 55,939,477,504 B -> 26,674.02 -> 26,674.
    CHECK(kv_capacity_blocks(m, resolve_hardware("h100-sxm"), 0.9, 16) == 26674);
  }
  SECTION("Llama-3.1-70B does not fit on an H100") {
    const ModelSpec m = resolve_model("llama-3.1-70b");
    for (double util : {0.9, 1.0}) {
      try {
        kv_capacity_blocks(m, resolve_hardware("h100-sxm"), util, 16);
        FAIL("141 GB of weights fit in 80 GB?");
      } catch (const InputError& e) {
        const std::string msg = e.what();
        CHECK_THAT(msg, Catch::Contains("llama-3.1-70b"));
        CHECK_THAT(msg, Catch::Contains("h100-sxm"));
      }
    }
    // Nor on an H200 (141 GB x 0.9 = 126.9 GB < 141.1 GB of weights: the
    // 70,553,706,496 published parameters in bf16), but on a B200:
    // (180e9 x 0.9 - 141,107,412,992) / (16 x 327,680) = 3,984.9 -> 3,984.
    CHECK_THROWS_AS(kv_capacity_blocks(m, resolve_hardware("h200"), 0.9, 16), InputError);
    CHECK(kv_capacity_blocks(m, resolve_hardware("b200"), 0.9, 16) == 3984);
  }
  SECTION("bad arguments") {
    const ModelSpec m = tiny_model();
    CHECK_THROWS_AS(kv_capacity_blocks(m, round_gpu(), 0.0, 16), InputError);
    CHECK_THROWS_AS(kv_capacity_blocks(m, round_gpu(), 1.5, 16), InputError);
    CHECK_THROWS_AS(kv_capacity_blocks(m, round_gpu(), 0.5, 0), InputError);
  }
}

TEST_CASE("A prefix-cache hit: GEMMs cost the q new tokens, attention q queries over c + q keys", "[roofline][prefix]") {
  RooflineModel m(tiny_model(), round_gpu(), ideal());
  // 16 new tokens after 4000 cached (a hit) against the same 16 tokens with
  // nothing cached and against the whole 4016-token prompt.
  const RooflineBreakdown hit = m.breakdown(plan_of({seq(0, 16, 4000, true, true)}));
  const RooflineBreakdown fresh = m.breakdown(plan_of({seq(0, 16, 0, true, true)}));
  const RooflineBreakdown whole = m.breakdown(plan_of({seq(0, 4016, 0, true, true)}));
  for (auto part : {&RooflineBreakdown::qkv_proj, &RooflineBreakdown::o_proj, &RooflineBreakdown::gate_up_proj,
                    &RooflineBreakdown::down_proj, &RooflineBreakdown::elementwise, &RooflineBreakdown::lm_head})
    CHECK(hit.*part == fresh.*part);
  // Attention: 16 x 4000 + 16 x 17 / 2 query-key pairs, and the K and V of
  // all 4016 tokens read, by hand (op_time is the larger of the two times).
  const double H = 4, dh = 16, L = 2, Hkv = 2, b = 2;
  const double flops = 4 * H * dh * (16.0 * 4000 + 16.0 * 17 / 2) * L;
  const double bytes = b * ((4016.0) * 2 * Hkv * dh + 16.0 * 2 * Hkv * dh + 2 * 16.0 * H * dh) * L;
  CHECK(hit.prefill_attention == Approx(std::max(flops / 1e12, bytes / 1e11)).epsilon(kTight));
  CHECK(hit.total() < whole.total() / 50);
}
