// Padded decode steps (sim/cost/decode_padding.h): the CUDA decoder's bucket
// rule, its JSON and refusals, and the ProfileModel costing a plain decode
// step at its bucket (one-token rows at context 1 added, g read there) while
// every other iteration, and a profile without the rule, cost as before.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/decode_padding.h"
#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "sim/errors.h"
#include "sim/iteration_plan.h"
#include "support/synthetic_profile.h"

using namespace servesim;
using namespace servesim::test::synthetic;

namespace {

ScheduledSequence decode(int64_t id, int32_t cached) { return seq(id, 1, cached, false, true); }

// n sequences decoding one token each, contexts 100 + i.
IterationPlan decode_step(int64_t n) {
  IterationPlan plan;
  for (int64_t i = 0; i < n; ++i) plan.add(decode(i, 100 + int32_t(i)));
  return plan;
}

}  // namespace

TEST_CASE("decode padding: the CUDA graphs' buckets are 1, 2, 4, then multiples of 8 up to the largest batch") {
  const DecodePadding cuda = DecodePadding::cuda_graphs(512);
  CHECK(cuda.enabled());
  const std::vector<std::pair<int64_t, int64_t>> expected = {{1, 1},   {2, 2},   {3, 4},   {4, 4},   {5, 8},
                                                             {8, 8},   {9, 16},  {32, 32}, {33, 40}, {40, 40},
                                                             {41, 48}, {505, 512}, {512, 512}, {513, 513}};
  for (const auto& [n, bucket] : expected) {
    INFO("n = " << n);
    CHECK(cuda.bucket(n) == bucket);
  }
  const DecodePadding none;
  CHECK_FALSE(none.enabled());
  for (int64_t n : {1, 3, 33, 1000}) CHECK(none.bucket(n) == n);
}

TEST_CASE("decode padding: the rule survives a profile's JSON, and a malformed one is refused by name") {
  DeviceProfile p = synthetic_profile(tiny_model());
  p.decode_padding = DecodePadding::cuda_graphs(256);
  const DeviceProfile back = DeviceProfile::from_json(p.to_json(), "p.json");
  CHECK(back.decode_padding.sizes == std::vector<int64_t>{1, 2, 4});
  CHECK(back.decode_padding.multiple == 8);
  CHECK(back.decode_padding.max_batch == 256);

  // A profile without it (the CPU's, or one written before it): no padding.
  nlohmann::json j = p.to_json();
  j.erase("decode_padding");
  CHECK_FALSE(DeviceProfile::from_json(j, "p.json").decode_padding.enabled());
  CHECK_FALSE(synthetic_profile(tiny_model()).to_json().contains("decode_padding"));

  for (const nlohmann::json& bad : {nlohmann::json{{"sizes", {1, 2, 4}}, {"multiple", 0}, {"max_batch", 256}},
                                    nlohmann::json{{"sizes", {2, 1}}, {"multiple", 8}, {"max_batch", 256}},
                                    nlohmann::json{{"sizes", {1, 2, 4}}, {"multiple", 8}, {"max_batch", -1}},
                                    nlohmann::json{{"sizes", "1, 2, 4"}, {"multiple", 8}, {"max_batch", 256}},
                                    nlohmann::json{{"sizes", {1}}, {"multiple", 8.5}, {"max_batch", 256}},
                                    nlohmann::json{{"multiple", 8}, {"max_batch", 256}}, nlohmann::json(8)}) {
    INFO(bad.dump());
    j = p.to_json();
    j["decode_padding"] = bad;
    try {
      DeviceProfile::from_json(j, "p.json");
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK_THAT(e.what(), Catch::Contains("p.json: decode_padding"));
    }
  }
}

TEST_CASE("decode padding: a plain decode step costs as its bucket with one-token rows at context 1") {
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m);
  p.decode_step_factor.x = {1, 32, 40};
  p.decode_step_factor.factor = {0.8, 0.9, 1.0};
  const ProfileModel unpadded(p, m);
  p.decode_padding = DecodePadding::cuda_graphs(512);
  const ProfileModel padded(p, m);

  // 33 sequences run as 40: GEMMs, elementwise, LM head and sampling on 40
  // rows, attention over 40 rows with 7 of them at context 1, g at 40.
  const ProfileBreakdown b33 = padded.breakdown(decode_step(33));
  IterationPlan as_run = decode_step(33);
  for (int64_t i = 0; i < 7; ++i) as_run.add(decode(100 + i, 0));
  const ProfileBreakdown run = unpadded.breakdown(as_run);
  CHECK(b33.gemm == Approx(run.gemm));
  CHECK(b33.elementwise == Approx(run.elementwise));
  CHECK(b33.lm_head == Approx(run.lm_head));
  CHECK(b33.decode_attention == Approx(run.decode_attention));
  CHECK(b33.total() == Approx(run.total()));
  CHECK(unpadded.decode_step_factor(40) == Approx(1.0));
  // Costlier than the same 33 sequences unpadded (g(33) < 1 there, and fewer rows).
  CHECK(b33.total() > unpadded.breakdown(decode_step(33)).total());
  // A batch at its bucket costs the same either way.
  CHECK(padded.breakdown(decode_step(32)).total() == Approx(unpadded.breakdown(decode_step(32)).total()));
  CHECK(padded.breakdown(decode_step(40)).total() == Approx(unpadded.breakdown(decode_step(40)).total()));
  // Every batch of a bucket costs nearly alike: 33 and 40 differ only in
  // the attention of the 7 rows that are real in one and padding in the other.
  CHECK(padded.breakdown(decode_step(33)).gemm == Approx(padded.breakdown(decode_step(40)).gemm));

  // Not a plain decode step, or above the largest padded batch: as before.
  IterationPlan mixed = decode_step(33);
  ScheduledSequence prefill = decode(200, 0);
  prefill.num_query_tokens = 32;
  prefill.is_prefill = true;
  mixed.add(prefill);
  CHECK(padded.breakdown(mixed).total() == Approx(unpadded.breakdown(mixed).total()));
  p.decode_padding.max_batch = 32;
  const ProfileModel capped(p, m);
  CHECK(capped.breakdown(decode_step(33)).total() == Approx(unpadded.breakdown(decode_step(33)).total()));
}
