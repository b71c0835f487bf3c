// The replay clock (calib/replay_clock.h): a real timeline with every
// iteration re-costed, and real instants mapped onto it.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "validate/replay_timeline.h"

using namespace servesim;

TEST_CASE("replay clock: iterations keep their order and the real gaps between them") {
  // Real: [0, 1), gap 0.5, [1.5, 2), idle 3, [5, 7).
  const std::vector<double> starts = {0.0, 1.5, 5.0}, real = {1.0, 0.5, 2.0}, replayed = {2.0, 0.25, 1.0};
  const ReplayTimeline clock(starts, real, replayed);
  CHECK(clock.start(0) == 0.0);
  CHECK(clock.end(0) == 2.0);
  CHECK(clock.start(1) == 2.5);
  CHECK(clock.end(1) == 2.75);
  CHECK(clock.start(2) == 5.75);
  CHECK(clock.end(2) == 6.75);

  SECTION("instants inside an iteration move in proportion to its replayed cost") {
    CHECK(clock.at(0.5) == Approx(1.0));
    CHECK(clock.at(1.75) == Approx(2.625));
    CHECK(clock.at(6.0) == Approx(6.25));
  }
  SECTION("instants in a gap move with the iteration before it, at the real rate") {
    CHECK(clock.at(1.25) == Approx(2.25));
    CHECK(clock.at(4.0) == Approx(4.75));
  }
  SECTION("the ends of iterations map onto the replayed ends, and starts onto starts") {
    for (size_t k = 0; k < starts.size(); ++k) {
      CHECK(clock.at(starts[k]) == Approx(clock.start(k)));
      CHECK(clock.at(starts[k] + real[k]) == Approx(clock.end(k)));
    }
  }
  SECTION("before the first iteration the clocks agree; after the last, the lag stays") {
    CHECK(clock.at(-3.0) == -3.0);
    CHECK(clock.at(9.0) == Approx(8.75));  // 2 s after the real end 7, replayed end 6.75
  }
  SECTION("the map never goes backwards") {
    double prev = clock.at(-1.0);
    for (double t = -1.0; t < 10.0; t += 0.01) {
      const double now = clock.at(t);
      CHECK(now >= prev);
      prev = now;
    }
  }
}

TEST_CASE("replay clock: with the real durations it is the identity") {
  const std::vector<double> starts = {0.1, 0.4, 0.45, 2.0}, real = {0.3, 0.05, 0.5, 0.2};
  const ReplayTimeline clock(starts, real, real);
  for (double t = 0.0; t < 3.0; t += 0.037) CHECK(clock.at(t) == Approx(t).margin(1e-12));
}

TEST_CASE("replay clock: a zero-length iteration and an overlapping record are accepted") {
  // A record whose start falls a rounding error before the previous end
  // counts as no gap.
  const std::vector<double> starts = {0.0, 1.0, 0.9999999}, real = {1.0, 0.0, 1.0}, replayed = {0.5, 0.1, 1.0};
  const std::vector<double> sorted = {0.0, 1.0, 1.0};
  const ReplayTimeline clock(sorted, real, replayed);
  CHECK(clock.start(1) == 0.5);
  CHECK(clock.end(1) == Approx(0.6));
  CHECK(clock.start(2) == Approx(0.6));
  CHECK(clock.at(1.5) == Approx(1.1));
  CHECK_THROWS_AS(ReplayTimeline(starts, real, replayed), std::invalid_argument);  // starts go backwards
}

TEST_CASE("replay clock: refuses mismatched lengths and bad durations") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> two = {0.0, 1.0}, one = {1.0};
  CHECK_THROWS_AS(ReplayTimeline(two, two, one), std::invalid_argument);
  CHECK_THROWS_AS(ReplayTimeline(two, one, two), std::invalid_argument);
  CHECK_THROWS_AS(ReplayTimeline(two, std::vector<double>{1.0, -0.1}, two), std::invalid_argument);
  CHECK_THROWS_AS(ReplayTimeline(two, two, std::vector<double>{nan, 1.0}), std::invalid_argument);
  CHECK_THROWS_AS(ReplayTimeline(std::vector<double>{0.0, nan}, two, two), std::invalid_argument);
  const ReplayTimeline empty({}, {}, {});
  CHECK(empty.at(4.0) == 4.0);
}
