// Cost jitter (sim/cost_jitter.h) and the band of a statistic over jittered
// simulations (sim/draw_band.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "sim/cost/cost_jitter.h"
#include "sim/cost/simulated_executor.h"
#include "sim/draw_band.h"
#include "sim/metrics.h"

#include "support/test_support.h"

using namespace servesim;
using namespace servesim::test;

TEST_CASE("Cost jitter: none, lognormal and resampled multipliers", "[jitter]") {
  Rng rng(7);
  SECTION("none and sigma 0 draw 1") {
    CHECK_FALSE(CostJitter().active());
    CHECK(CostJitter().draw(rng) == 1.0);
    CHECK_FALSE(CostJitter::lognormal(0).active());
    CHECK(CostJitter::lognormal(0).draw(rng) == 1.0);
  }
  SECTION("lognormal: median 1, log spread sigma") {
    const CostJitter j = CostJitter::lognormal(0.05);
    REQUIRE(j.active());
    std::vector<double> logs;
    for (int i = 0; i < 20000; ++i) logs.push_back(std::log(j.draw(rng)));
    std::sort(logs.begin(), logs.end());
    CHECK(std::abs(percentile_sorted(logs, 50)) < 0.002);
    // The 84th percentile of a normal is one sigma above its median.
    CHECK(percentile_sorted(logs, 84.13) == Approx(0.05).epsilon(0.05));
    CHECK(j.to_json()["sigma"].get<double>() == 0.05);
  }
  SECTION("resampled: only the given multipliers, each of them") {
    const CostJitter j = CostJitter::resampled({0.9, 1.0, 1.3}, "a test");
    std::set<double> seen;
    for (int i = 0; i < 300; ++i) seen.insert(j.draw(rng));
    CHECK(seen == std::set<double>{0.9, 1.0, 1.3});
    const nlohmann::json d = j.to_json();
    CHECK(d["kind"] == "resampled");
    CHECK(d["count"] == 3);
    CHECK(d["median"].get<double>() == 1.0);
    CHECK(d["mean"].get<double>() == Approx(3.2 / 3));
    CHECK(d["source"] == "a test");
  }
  SECTION("the same seed draws the same multipliers") {
    const CostJitter j = CostJitter::lognormal(0.1);
    Rng a(11), b(11), c(12);
    const double x = j.draw(a);
    CHECK(j.draw(b) == x);
    CHECK(j.draw(c) != x);
  }
  SECTION("bad values are refused, naming them") {
    CHECK(input_error_of([] { CostJitter::lognormal(-0.1); }).find("-0.1") != std::string::npos);
    CHECK(input_error_of([] { CostJitter::lognormal(1.5); }).find("1.5") != std::string::npos);
    CHECK(input_error_of([] { CostJitter::lognormal(std::nan("")); }).find("sigma") != std::string::npos);
    CHECK(input_error_of([] { CostJitter::resampled({1.0}, "x"); }).find("at least 2") != std::string::npos);
    CHECK(input_error_of([] { CostJitter::resampled({1.0, 0.0}, "x"); }).find("positive") != std::string::npos);
  }
}

TEST_CASE("Cost jitter: written as JSON and read back, from a flag's number or file", "[jitter]") {
  Rng rng(3);
  const CostJitter lognormal = CostJitter::from_json(CostJitter::lognormal(0.04).to_json(), "x");
  CHECK(lognormal.to_json()["sigma"].get<double>() == 0.04);
  // A resampled jitter travels as its 101 quantiles.
  std::vector<double> multipliers;
  for (int i = 0; i < 500; ++i) multipliers.push_back(0.9 + 0.0004 * i);  // 0.9 .. 1.0996
  const nlohmann::json written = CostJitter::resampled(multipliers, "a run").to_json();
  REQUIRE(written["quantiles"].size() == 101);
  CHECK(written["quantiles"][0].get<double>() == 0.9);
  CHECK(written["quantiles"][100].get<double>() == Approx(1.0996));
  const CostJitter read = CostJitter::from_json(written, "report.json");
  CHECK(read.to_json()["median"].get<double>() == Approx(written["median"].get<double>()).epsilon(0.001));
  for (int i = 0; i < 100; ++i) {
    const double m = read.draw(rng);
    CHECK(m >= 0.9);
    CHECK(m <= 1.0997);
  }
  CHECK(CostJitter::from_flag("0.03", "--cost-jitter").to_json()["sigma"].get<double>() == 0.03);
  CHECK(input_error_of([] { CostJitter::from_flag("2", "--cost-jitter"); }).find("--cost-jitter 2") !=
        std::string::npos);
  CHECK(input_error_of([] { CostJitter::from_flag("/no/such/file.json", "--cost-jitter"); })
            .find("/no/such/file.json") != std::string::npos);
  const TempFile report("jitter_report", nlohmann::json{{"predict_draws", {{"jitter", written}}}}.dump(), ".json");
  CHECK(CostJitter::from_flag(report.path(), "--cost-jitter").to_json()["kind"] == "resampled");
  const TempFile other("jitter_other", R"({"kind": "gaussian"})", ".json");
  CHECK(input_error_of([&] { CostJitter::from_flag(other.path(), "--cost-jitter"); }).find("not a cost jitter") !=
        std::string::npos);
}

TEST_CASE("Cost jitter: the noise around a run's rolling level", "[jitter]") {
  // Costs predicted at 1 ms; the device ran at a level of 2x, then 3x from
  // iteration 200, with a repeating noise pattern whose median is 1.
  const std::vector<double> pattern = {1.0, 1.0, 1.05, 1.0, 0.95};
  std::vector<double> measured, predicted;
  for (int i = 0; i < 400; ++i) {
    predicted.push_back(1e-3);
    measured.push_back(1e-3 * (i < 200 ? 2.0 : 3.0) * pattern[size_t(i) % pattern.size()]);
  }
  const std::vector<double> noise = noise_around_rolling_level(measured, predicted, 51);
  REQUIRE(noise.size() == 400);
  // Away from the level's step (more than half a window) the noise is the
  // pattern: the level and the model's 2x-3x bias are gone.
  for (int i = 0; i < 400; ++i) {
    if (std::abs(i - 200) <= 25) continue;
    INFO(i);
    CHECK(noise[size_t(i)] == Approx(pattern[size_t(i) % pattern.size()]));
  }
  SECTION("iterations without a valid time or cost are left out") {
    measured[3] = 0;
    predicted[7] = std::nan("");
    CHECK(noise_around_rolling_level(measured, predicted, 51).size() == 398);
  }
  SECTION("mismatched lengths and an even window are refused") {
    predicted.pop_back();
    CHECK(input_error_of([&] { noise_around_rolling_level(measured, predicted, 51); }).find("399") !=
          std::string::npos);
    predicted.push_back(1e-3);
    CHECK(input_error_of([&] { noise_around_rolling_level(measured, predicted, 50); }).find("50") !=
          std::string::npos);
  }
}

// A simulation of `w` costed by `cost`, each iteration times `multiplier` (or none).
RunRecords simulated(const SchedulerConfig& config, const CostModel& cost, CostMultiplier* multiplier,
                     const Workload& w) {
  VirtualClock clock;
  SimulatedExecutor executor(cost, clock);
  if (multiplier) executor.multiply_by(*multiplier);
  Scheduler scheduler(config);
  return run_serving_loop(scheduler, executor, clock, w);
}

TEST_CASE("Cost jitter: a jitter multiplier scales each duration by its own draw", "[jitter]") {
  const FixedCost inner(1e-3, 0);
  const CostJitter jitter = CostJitter::resampled({0.5, 2.0}, "test");
  JitterMultiplier a(jitter, 5), b(jitter, 5);
  const Workload w = poisson_workload(20, 50, "uniform:8:32", "uniform:4:16", 1);
  const SchedulerConfig config = scheduler_config(SchedulerPolicy::Continuous, 8, 512, 16, 1000, 4096, 0.0);
  const RunRecords ra = simulated(config, inner, &a, w), rb = simulated(config, inner, &b, w);
  REQUIRE(ra.iterations.size() > 20);
  std::set<double> durations;
  for (const IterationRecord& it : ra.iterations) durations.insert(std::round(it.duration_s * 1e6) / 1e6);
  CHECK(durations == std::set<double>{0.5e-3, 2.0e-3});  // both multipliers drawn, nothing else
  // The same seed runs the same simulation.
  REQUIRE(rb.iterations.size() == ra.iterations.size());
  for (size_t i = 0; i < ra.iterations.size(); ++i) CHECK(rb.iterations[i].duration_s == ra.iterations[i].duration_s);
  // Without jitter the durations are the inner model's.
  const CostJitter none;
  JitterMultiplier plain(none, 5);
  for (const IterationRecord& it : simulated(config, inner, &plain, w).iterations) CHECK(it.duration_s == 1e-3);
  for (const IterationRecord& it : simulated(config, inner, nullptr, w).iterations) CHECK(it.duration_s == 1e-3);
}

TEST_CASE("Draw band: each statistic's 10th percentile, median and 90th percentile over draws", "[jitter]") {
  std::vector<Distribution> draws;
  for (int i = 10; i >= 0; --i) {  // 11 draws, in no sorted order of their fields
    Distribution d;
    d.count = 5;
    d.mean = 1.0 + i;
    d.p50 = 10.0 * i;
    d.p90 = 100.0 - i;
    d.p99 = 200.0;
    draws.push_back(d);
  }
  const DrawBand band = band_over_draws(draws);
  CHECK(band.draws == 11);
  CHECK(band.median.mean == 6.0);
  CHECK(band.median.p50 == 50.0);
  CHECK(band.median.p90 == 95.0);
  CHECK(band.p10.p50 == 10.0);  // percentile 10 of 0, 10, ..., 100
  CHECK(band.p90.p50 == 90.0);
  CHECK(band.p10.p90 == 91.0);
  CHECK(band.p90.p90 == 99.0);
  CHECK(band.median.p99 == 200.0);
  CHECK(band.median.count == 5);
  const nlohmann::json j = band_json(band);
  CHECK(j["draws"] == 11);
  CHECK(j["p10"]["p50"].get<double>() == 10.0);
  CHECK(j["p90"]["p90"].get<double>() == 99.0);
  CHECK(input_error_of([] { band_over_draws({}); }).find("no draws") != std::string::npos);
}
