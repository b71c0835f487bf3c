// Tensor and pipeline parallelism: the shapes one rank computes, the memory
// one GPU holds, the communication an iteration adds, and that one GPU is
// exactly what it was before (hand arithmetic where a number is asserted).
#include <catch2/catch.hpp>

#include <cmath>

#include "sim/cost/communication_model.h"
#include "sim/cost/cost_models.h"
#include "sim/cost/parallel_cost_model.h"
#include "sim/cost/roofline_model.h"
#include "sim/errors.h"
#include "sim/interconnect.h"
#include "sim/kv_capacity.h"
#include "sim/parallel_config.h"
#include "support/test_support.h"

using namespace servesim;

TEST_CASE("Rank shapes split heads, KV heads, MLP width and vocabulary", "[parallel]") {
  const ModelSpec m = resolve_model("llama-3.1-70b");  // H 64, Hkv 8, I 28672, V 128256, L 80
  const RankShape r8 = rank_shape(m, {8, 1});
  CHECK(r8.heads == 8);
  CHECK(r8.kv_heads == 1);
  CHECK_FALSE(r8.kv_heads_replicated);
  CHECK(r8.intermediate == 3584);
  CHECK(r8.vocab == 16032);
  CHECK(r8.layers_per_stage == 80);
  // 16 ranks, 8 KV heads: each KV head replicated on two ranks.
  const RankShape r16 = rank_shape(m, {16, 2});
  CHECK(r16.heads == 4);
  CHECK(r16.kv_heads == 1);
  CHECK(r16.kv_heads_replicated);
  CHECK(r16.layers_per_stage == 40);
  // The vocabulary rounds up: 128256 / 3 is not whole.
  CHECK(rank_shape(resolve_model("llama-3.2-3b"), {3, 1}).vocab == 42752);
}

TEST_CASE("Bad layouts are refused naming the flag and the numbers", "[parallel]") {
  const ModelSpec m = resolve_model("llama-3.1-8b");
  CHECK_THROWS_WITH((ParallelConfig{3, 1}.validate_for(m)),
                    Catch::Contains("--tensor-parallel-size 3") && Catch::Contains("32 attention heads"));
  CHECK_THROWS_WITH((ParallelConfig{1, 5}.validate_for(m)),
                    Catch::Contains("--pipeline-parallel-size 5") && Catch::Contains("32 layers"));
  CHECK_THROWS_WITH((ParallelConfig{0, 1}.validate_for(m)), Catch::Contains("1 .. 64"));
  // qwen2.5-7b: 28 heads, 4 KV heads; TP 7 divides the heads but neither divides nor is divided by 4.
  CHECK_THROWS_WITH((ParallelConfig{7, 1}.validate_for(resolve_model("qwen2.5-7b"))), Catch::Contains("KV heads"));
  CHECK_NOTHROW((ParallelConfig{8, 4}.validate_for(m)));
}

TEST_CASE("Memory per GPU: weights and KV of one rank and stage", "[parallel]") {
  const ModelSpec m8 = resolve_model("llama-3.1-8b");
  // TP 1: exactly the model's own figures.
  CHECK(weight_bytes_per_gpu(m8, {}) == m8.weight_bytes());
  CHECK(kv_bytes_per_token_per_gpu(m8, {}) == m8.kv_bytes_per_token());
  // TP 2, by hand: heads 16, KV heads 4, I 7168, V 64128; per layer
  // 4096 x 24 x 128 + 16 x 128 x 4096 + 3 x 4096 x 7168 + 2 x 4096 = 109,060,096
  // parameters; + embedding and LM head 2 x 64128 x 4096 + final norm 4096;
  // x 2 bytes.
  CHECK(weight_bytes_per_gpu(m8, {2, 1}) == 8030527488.0);
  CHECK(kv_bytes_per_token_per_gpu(m8, {2, 1}) == 32 * 2 * 4 * 128 * 2);
  // 70B at TP 4 x PP 2: 40 layers of the shard plus the larger end (the last
  // stage's final norm and LM head), and 40 layers of 2 KV heads.
  const ModelSpec m70 = resolve_model("llama-3.1-70b");
  CHECK(weight_bytes_per_gpu(m70, {4, 2}) == 17639424000.0);
  CHECK(kv_bytes_per_token_per_gpu(m70, {4, 2}) == 40960.0);
  // More GPUs, less each: the per-GPU weights shrink by about the world size.
  CHECK(weight_bytes_per_gpu(m70, {8, 1}) == Approx(m70.weight_bytes() / 8).epsilon(0.01));
}

TEST_CASE("70B in bf16 is refused on one H100 naming the TP that fits, and fits at TP 2 and 4", "[parallel]") {
  const ModelSpec m = resolve_model("llama-3.1-70b");
  const HardwareSpec h100 = resolve_hardware("h100-sxm");
  CHECK_THROWS_WITH(kv_capacity_blocks(m, h100, 0.9, 16),
                    Catch::Contains("141.1 GB") && Catch::Contains("--tensor-parallel-size 2 would leave room"));
  const int64_t tp2 = kv_capacity_blocks(m, h100, 0.9, 16, nullptr, {2, 1});
  const int64_t tp4 = kv_capacity_blocks(m, h100, 0.9, 16, nullptr, {4, 1});
  CHECK(tp2 >= 1);
  // (72 GB - weights / 4) / (16 tokens x 80 layers x 2 KV heads x 128 x 2 x 2 B).
  CHECK(double(tp4) == std::floor((72e9 - weight_bytes_per_gpu(m, {4, 1})) / (16.0 * 81920)));
  CHECK(tp4 > 10 * tp2);
  // One GPU: the same blocks as without a layout.
  const ModelSpec m8 = resolve_model("llama-3.1-8b");
  CHECK(kv_capacity_blocks(m8, h100, 0.9, 16, nullptr, {}) == kv_capacity_blocks(m8, h100, 0.9, 16));
}

TEST_CASE("Communication: 2L + 1 all-reduces of T d b bytes, the logits' gather, stage transfers", "[parallel]") {
  const ModelSpec m = resolve_model("llama-3.1-8b");
  const Interconnect nv = resolve_interconnect("nvlink4");
  const IterationPlan batch = test::decode_plan(8, 500);
  const CommunicationBreakdown c = CommunicationModel(m, {4, 1}, nv).breakdown(batch);
  // 8 tokens x 4096 x 2 B = 64 KiB each, 65 of them; 8 rows of 128256 bf16 logits.
  CHECK(c.all_reduce == Approx(65 * nv.all_reduce_seconds(4, 65536)).epsilon(1e-12));
  CHECK(nv.all_reduce_implementation(4, 65536) == "custom");
  CHECK(c.logits_gather == Approx(nv.all_gather_seconds(4, 8.0 * 128256 * 2)).epsilon(1e-12));
  CHECK(c.stage_transfer == 0);
  // By hand on NVLink 4: the custom all-reduce's 5 us floor + 64 KiB x 2(3)/4 / 350 GB/s.
  CHECK(nv.all_reduce_seconds(4, 65536) == Approx(5e-6 + 65536 * 1.5 / 350e9).epsilon(1e-9));
  // A 4096-token prefill's 32 MiB messages go through NCCL.
  CHECK(nv.all_reduce_implementation(4, 4096.0 * 4096 * 2) == "nccl");
  // PP: (PP - 1) sends of hidden states and residual, no all-reduce.
  const CommunicationBreakdown p = CommunicationModel(m, {1, 4}, nv).breakdown(test::prefill_plan(1000));
  CHECK(p.all_reduce == 0);
  CHECK(p.stage_transfer == Approx(3 * nv.send_seconds(2.0 * 1000 * 4096 * 2)).epsilon(1e-12));
  // TP 1 x PP 1 communicates nothing.
  CHECK(CommunicationModel(m, {}, nv).seconds(batch) == 0);
  // A preset is one node: TP 16 would cross nodes.
  CHECK_THROWS_WITH(CommunicationModel(m, {16, 1}, nv),
                    Catch::Contains("--tensor-parallel-size 16") && Catch::Contains("across nodes is not modelled"));
}

TEST_CASE("A TP group costs one rank's roofline at the sharded shapes plus its communication", "[parallel]") {
  const ModelSpec m = resolve_model("llama-3.1-8b");
  const HardwareSpec h = resolve_hardware("h200");
  CostModelSettings settings;
  const CostModels one = build_cost_models(settings, m, h, nullptr);
  const CostModels tp2 = build_cost_models(settings, m, h, nullptr, {2, 1});
  CHECK(one.communication == nullptr);
  REQUIRE(tp2.communication != nullptr);
  const RooflineModel rank(m, h, settings.roofline, {2, 1});
  for (const IterationPlan& plan : {test::decode_plan(1, 100), test::decode_plan(32, 2000), test::prefill_plan(4096)}) {
    CHECK(tp2.target->seconds(plan) == Approx(rank.seconds(plan) + tp2.communication->seconds(plan)).epsilon(1e-12));
    // Each rank streams about half the weights: a decode's compute halves, less the fixed parts.
    CHECK(rank.seconds(plan) < one.target->seconds(plan));
    CHECK(rank.seconds(plan) > 0.4 * one.target->seconds(plan));
  }
  // TP 1 is the model it always was.
  const RooflineModel plain(m, h, settings.roofline);
  CHECK(one.target->seconds(test::prefill_plan(777)) == plain.seconds(test::prefill_plan(777)));
  // The sampler still reads every logit: the LM head part shrinks less than half.
  const RooflineBreakdown b1 = plain.breakdown(test::decode_plan(64, 100));
  const RooflineBreakdown b2 = rank.breakdown(test::decode_plan(64, 100));
  CHECK(b2.lm_head > 0.5 * b1.lm_head);
  CHECK(b2.qkv_proj == Approx(0.5 * b1.qkv_proj).epsilon(0.02));
}

TEST_CASE("A TP profile must match the TP degree it is used at", "[parallel]") {
  const ModelSpec m = resolve_model("llama-3.1-8b");
  CostModelSettings settings;
  settings.profile = DeviceProfile{};
  settings.profile->model = m;
  settings.profile_source = "p.json";
  CHECK_THROWS_WITH(build_cost_models(settings, m, resolve_hardware("h200"), nullptr, {2, 1}),
                    Catch::Contains("p.json timed the kernels of one rank of TP 1, not of TP 2") &&
                        Catch::Contains("--tensor-parallel-size 2"));
}
