// The executor's attention launches (DeviceProfile::attention_launches,
// sim/cost/profile_model.h): the rule's JSON and its refusal, and under
// two_launches (the CUDA decoder's) the ProfileModel putting every sequence
// of two or more new tokens -- prefill chunks and speculative
// verifications -- in one prefill launch that pays its fixed cost once, and
// every one-token sequence in the decode batch, while one chunk and a
// per_chunk profile cost as before.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "sim/errors.h"
#include "sim/iteration_plan.h"
#include "support/synthetic_profile.h"

using namespace servesim;
using namespace servesim::test::synthetic;

namespace {

ScheduledSequence prefill_chunk(int64_t id, int32_t query, int32_t cached) {
  return seq(id, query, cached, true, true);
}

ScheduledSequence decode(int64_t id, int32_t cached) { return seq(id, 1, cached, false, true); }

double smallest(const Grid2D& g) {
  double m = g.seconds.front().front();
  for (const auto& row : g.seconds)
    for (double s : row) m = std::min(m, s);
  return m;
}

}  // namespace

using Launches = DeviceProfile::AttentionLaunches;

TEST_CASE("attention launches: the rule survives a profile's JSON, and a malformed one is refused") {
  DeviceProfile p = synthetic_profile(tiny_model());
  CHECK_FALSE(p.to_json().contains("attention_launches"));  // absent: per_chunk
  p.attention_launches = Launches::TwoLaunches;
  nlohmann::json j = p.to_json();
  CHECK(j["attention_launches"] == "two_launches");
  CHECK(DeviceProfile::from_json(j, "p.json").attention_launches == Launches::TwoLaunches);
  j["attention_launches"] = "per_chunk";
  CHECK(DeviceProfile::from_json(j, "p.json").attention_launches == Launches::PerChunk);
  for (const nlohmann::json& bad : {nlohmann::json("one"), nlohmann::json(true), nlohmann::json(2)}) {
    j["attention_launches"] = bad;
    CHECK_THROWS_AS(DeviceProfile::from_json(j, "p.json"), InputError);
    CHECK_THROWS_WITH(DeviceProfile::from_json(j, "p.json"),
                      Catch::Contains("p.json") && Catch::Contains("attention_launches"));
  }
}

TEST_CASE("attention launches: S chunks in one launch pay it once, at least the largest chunk") {
  const ModelSpec m = tiny_model();
  DeviceProfile per_chunk = synthetic_profile(m);
  DeviceProfile one_launch = per_chunk;
  one_launch.attention_launches = Launches::TwoLaunches;
  const ProfileModel before(per_chunk, m), after(one_launch, m);
  const double L = double(m.num_hidden_layers);
  const double F = smallest(per_chunk.prefill_attention);
  REQUIRE(F > 0);
  const double a = before.prefill_attention_seconds(100, 0), b = before.prefill_attention_seconds(60, 200),
               c = before.prefill_attention_seconds(7, 30);

  IterationPlan three;
  three.add(prefill_chunk(0, 100, 0));
  three.add(prefill_chunk(1, 60, 200));
  three.add(prefill_chunk(2, 7, 30));
  CHECK(before.breakdown(three).prefill_attention == Approx(L * (a + b + c)).epsilon(1e-12));
  CHECK(after.breakdown(three).prefill_attention == Approx(L * (a + b + c - 2 * F)).epsilon(1e-12));
  // Everything else about the iteration is unchanged.
  CHECK(after.breakdown(three).gemm == before.breakdown(three).gemm);
  CHECK(after.breakdown(three).lm_head == before.breakdown(three).lm_head);
  CHECK(after.describe()["attention_launches"]["rule"] == "two_launches");
  CHECK(after.describe()["attention_launches"]["prefill_launch_s"] == Approx(F));
  CHECK(before.describe()["attention_launches"]["rule"] == "per_chunk");

  SECTION("one chunk costs as before") {
    IterationPlan one;
    one.add(prefill_chunk(0, 100, 0));
    CHECK(after.breakdown(one).total() == before.breakdown(one).total());
  }
  SECTION("a one-token chunk runs in the decode launch, with the decode rows") {
    IterationPlan mixed;
    mixed.add(decode(5, 300));
    mixed.add(prefill_chunk(0, 100, 0));
    mixed.add(prefill_chunk(1, 1, 40));
    CHECK(after.breakdown(mixed).prefill_attention == Approx(L * a).epsilon(1e-12));
    // Two one-token rows: 301 and 41 keys.
    CHECK(after.breakdown(mixed).decode_attention ==
          Approx(L * before.decode_attention_seconds(2, 301 + 41)).epsilon(1e-12));
    // per_chunk costs it from the prefill table, alone.
    CHECK(before.breakdown(mixed).prefill_attention ==
          Approx(L * (a + before.prefill_attention_seconds(1, 40))).epsilon(1e-12));
  }
  SECTION("a speculative verification runs in the prefill launch") {
    IterationPlan verify;
    ScheduledSequence v = decode(7, 250);
    v.num_query_tokens = 4;  // k = 3 drafts and the last accepted token
    verify.add(v);
    verify.add(prefill_chunk(0, 100, 0));
    const double verification = before.prefill_attention_seconds(4, 250);
    CHECK(after.breakdown(verify).prefill_attention == Approx(L * (a + verification - F)).epsilon(1e-12));
    CHECK(after.breakdown(verify).decode_attention == 0);
    // per_chunk: the verification's 4 rows in the decode batch.
    CHECK(before.breakdown(verify).decode_attention ==
          Approx(L * before.decode_attention_seconds(4, 4 * 250 + 10)).epsilon(1e-12));
  }
  SECTION("never below the largest chunk") {
    // Tiny chunks, each close to the launch's cost itself.
    IterationPlan tiny;
    for (int64_t i = 0; i < 8; ++i) tiny.add(prefill_chunk(i, 2, 0));
    const double chunk = before.prefill_attention_seconds(2, 0);
    CHECK(after.breakdown(tiny).prefill_attention >= L * chunk * (1 - 1e-12));
    CHECK(after.breakdown(tiny).prefill_attention < before.breakdown(tiny).prefill_attention);
  }
}
