// The calibration's Google Benchmark plumbing: medians, raw JSON, and the
// random interleaving of repetitions.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/microbench_runner.h"

using namespace servesim;

TEST_CASE("microbench runner: every repetition timed, repetitions interleaved, raw JSON kept", "[calib]") {
  std::ostringstream json;
  MicrobenchSettings settings;
  settings.repetitions = 6;
  settings.min_time_s = 0.005;
  settings.warmup_s = 0;
  std::vector<int> order;  // which benchmark each timed repetition belonged to, in time order
  {
    MicrobenchSession session(json, settings);
    for (int b = 0; b < 3; ++b)
      session.add("bench/" + std::to_string(b), [&order, b](benchmark::State& state) {
        order.push_back(b);
        volatile double x = 0;
        for (auto _ : state)
          for (int i = 0; i < (100 << (3 * b)); ++i) x = x + 1.0;  // 100, 800, 6400 additions
      });
    const std::vector<MicrobenchResult> r = session.run();
    REQUIRE(r.size() == 3);
    for (const MicrobenchResult& m : r) {
      CHECK(m.repetitions_s.size() == 6);
      CHECK(m.median_s > 0);
    }
    // 64 times the work: slower. (With 3 times, a shared VM that stalled
    // the first benchmark's repetitions once had it 5x slower than the third.)
    CHECK(r[2].median_s > 1.5 * r[0].median_s);
    CHECK_THROWS(session.add("bench/0", [](benchmark::State& state) { for (auto _ : state) {} }));
    session.finish();
  }
  // Interleaved: in run order the benchmark changes more often than the two
  // times of running them one after another. (Google Benchmark may call a
  // body more than once per repetition while it sizes the iteration count,
  // which only adds repeats of the same number.) Grouped order by chance:
  // 3! (6!)^3 / 18! ~ 3e-7.
  int changes = 0;
  for (size_t i = 1; i < order.size(); ++i) changes += order[i] != order[i - 1];
  CHECK(changes > 2);
  const auto doc = nlohmann::json::parse(json.str());
  CHECK(doc["benchmarks"].size() >= 18);  // every repetition (and GB's aggregates, if any)
}
