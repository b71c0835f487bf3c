// Prefill chunks in one attention launch (DeviceProfile::
// prefill_attention_one_launch, sim/cost/profile_model.h): the flag's JSON
// and its refusal, and the ProfileModel paying the launch's fixed cost once
// for the chunks of two or more tokens, while one chunk, one-token chunks
// and a profile without the flag cost as before.
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
  ScheduledSequence s;
  s.request_id = id;
  s.num_query_tokens = query;
  s.num_cached_tokens = cached;
  s.is_prefill = true;
  s.samples = true;
  return s;
}

ScheduledSequence decode(int64_t id, int32_t cached) {
  ScheduledSequence s = prefill_chunk(id, 1, cached);
  s.is_prefill = false;
  return s;
}

double smallest(const Grid2D& g) {
  double m = g.seconds.front().front();
  for (const auto& row : g.seconds)
    for (double s : row) m = std::min(m, s);
  return m;
}

}  // namespace

TEST_CASE("prefill in one launch: the flag survives a profile's JSON, and a malformed one is refused") {
  DeviceProfile p = synthetic_profile(tiny_model());
  CHECK_FALSE(p.to_json().contains("prefill_attention_one_launch"));  // absent: false
  p.prefill_attention_one_launch = true;
  const nlohmann::json j = p.to_json();
  CHECK(j["prefill_attention_one_launch"] == true);
  CHECK(DeviceProfile::from_json(j, "p.json").prefill_attention_one_launch);
  nlohmann::json bad = j;
  bad["prefill_attention_one_launch"] = "yes";
  CHECK_THROWS_AS(DeviceProfile::from_json(bad, "p.json"), InputError);
  CHECK_THROWS_WITH(DeviceProfile::from_json(bad, "p.json"),
                    Catch::Contains("p.json") && Catch::Contains("prefill_attention_one_launch"));
}

TEST_CASE("prefill in one launch: S chunks pay the launch once, at least the largest chunk") {
  const ModelSpec m = tiny_model();
  DeviceProfile per_chunk = synthetic_profile(m);
  DeviceProfile one_launch = per_chunk;
  one_launch.prefill_attention_one_launch = true;
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
  CHECK(after.describe()["prefill_attention_one_launch"]["launch_s"] == Approx(F));
  CHECK(before.describe()["prefill_attention_one_launch"].is_null());

  SECTION("one chunk costs as before") {
    IterationPlan one;
    one.add(prefill_chunk(0, 100, 0));
    CHECK(after.breakdown(one).total() == before.breakdown(one).total());
  }
  SECTION("a one-token chunk runs with the decode rows: it shares nothing") {
    IterationPlan mixed;
    mixed.add(decode(5, 300));
    mixed.add(prefill_chunk(0, 100, 0));
    mixed.add(prefill_chunk(1, 1, 40));
    const double one_token = before.prefill_attention_seconds(1, 40);
    CHECK(after.breakdown(mixed).prefill_attention == Approx(L * (a + one_token)).epsilon(1e-12));
    CHECK(after.breakdown(mixed).decode_attention == before.breakdown(mixed).decode_attention);
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
