#include <catch2/catch.hpp>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/errors.h"
#include "sim/workload.h"

using servesim::ArrivalProcess;
using servesim::InputError;
using servesim::make_workload;
using servesim::Request;
using servesim::TraceFormat;
using servesim::TraceOptions;
using servesim::Workload;
using servesim::WorkloadSpec;

namespace {

const std::string kSmallAzure = std::string(SERVESIM_TEST_DATA_DIR) + "/trace_azure_small.csv";
const std::string kConvTrace =
    std::string(SERVESIM_SOURCE_DIR) + "/data/traces/azure_conv_2023.csv";

WorkloadSpec spec_of(ArrivalProcess arrival, int64_t n = 1000, double rate = 10.0) {
  WorkloadSpec s;
  s.arrival = arrival;
  s.num_requests = n;
  s.rate = rate;
  s.seed = 1234;
  return s;
}

bool same_requests(const std::vector<Request>& a, const std::vector<Request>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].arrival_s != b[i].arrival_s ||
        a[i].prompt_tokens != b[i].prompt_tokens || a[i].output_tokens != b[i].output_tokens) {
      return false;
    }
  }
  return true;
}

std::vector<std::pair<int32_t, int32_t>> lengths_of(const Workload& w) {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (const auto& r : w.requests) out.emplace_back(r.prompt_tokens, r.output_tokens);
  return out;
}

// Gaps between successive arrivals, counting the first from 0.
std::vector<double> gaps_of(const Workload& w) {
  std::vector<double> gaps;
  double prev = 0.0;
  for (const auto& r : w.requests) {
    gaps.push_back(r.arrival_s - prev);
    prev = r.arrival_s;
  }
  return gaps;
}

std::pair<double, double> mean_and_cv(const std::vector<double>& xs) {
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= static_cast<double>(xs.size());
  double var = 0;
  for (double x : xs) var += (x - mean) * (x - mean);
  var /= static_cast<double>(xs.size());
  return {mean, std::sqrt(var) / mean};
}

void check_well_formed(const Workload& w) {
  REQUIRE_FALSE(w.requests.empty());
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const Request& r = w.requests[i];
    REQUIRE(r.id == static_cast<int64_t>(i));
    REQUIRE(r.prompt_tokens >= 1);
    REQUIRE(r.output_tokens >= 1);
    REQUIRE(std::isfinite(r.arrival_s));
    if (i > 0) REQUIRE(r.arrival_s >= w.requests[i - 1].arrival_s);
  }
}

}  // namespace

TEST_CASE("Arrival process names round-trip", "[workload]") {
  for (auto p : {ArrivalProcess::Poisson, ArrivalProcess::Gamma, ArrivalProcess::Constant,
                 ArrivalProcess::Closed, ArrivalProcess::Trace}) {
    CHECK(servesim::parse_arrival_process(servesim::to_string(p)) == p);
  }
  CHECK_THROWS_AS(servesim::parse_arrival_process("uniform"), InputError);
  CHECK_THROWS_WITH(servesim::parse_arrival_process("uniform"),
                    Catch::Contains("'uniform'") && Catch::Contains("poisson"));
}

TEST_CASE("The same seed gives the same workload, another seed another", "[workload]") {
  for (auto p : {ArrivalProcess::Poisson, ArrivalProcess::Gamma, ArrivalProcess::Constant,
                 ArrivalProcess::Closed}) {
    INFO(servesim::to_string(p));
    auto s = spec_of(p);
    s.cv = 2.0;
    s.concurrency = 4;
    const Workload a = make_workload(s);
    const Workload b = make_workload(s);
    check_well_formed(a);
    CHECK(a.requests.size() == 1000);
    CHECK(same_requests(a.requests, b.requests));
    s.seed = 1235;
    CHECK_FALSE(same_requests(a.requests, make_workload(s).requests));
  }
}

TEST_CASE("Poisson arrivals have mean gap 1/rate and CV 1", "[workload]") {
  const int64_t n = 100'000;
  const double rate = 5.0;
  const Workload w = make_workload(spec_of(ArrivalProcess::Poisson, n, rate));
  check_well_formed(w);
  CHECK_FALSE(w.closed_loop);
  CHECK(w.requests.front().arrival_s > 0.0);  // the first arrives after one gap
  const auto [mean, cv] = mean_and_cv(gaps_of(w));
  CHECK(mean == Approx(1 / rate).margin(5 * (1 / rate) / std::sqrt(n)));
  CHECK(cv == Approx(1.0).margin(0.02));
  // Little's-law style check on the horizon: N arrivals take about N/rate.
  CHECK(w.requests.back().arrival_s == Approx(n / rate).epsilon(0.02));
}

TEST_CASE("Constant arrivals are exactly 1/rate apart from 0", "[workload]") {
  const double rate = 7.0;
  const Workload w = make_workload(spec_of(ArrivalProcess::Constant, 1000, rate));
  check_well_formed(w);
  CHECK(w.requests.front().arrival_s == 0.0);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    REQUIRE(w.requests[i].arrival_s == static_cast<double>(i) / rate);
    if (i > 0) {
      REQUIRE(w.requests[i].arrival_s - w.requests[i - 1].arrival_s ==
              Approx(1 / rate).epsilon(1e-12));
    }
  }
}

TEST_CASE("Gamma arrivals have mean gap 1/rate and the requested CV", "[workload]") {
  const int64_t n = 200'000;
  const double rate = 20.0;
  for (double cv : {0.25, 1.0, 2.0, 4.0}) {
    INFO("cv " << cv);
    auto s = spec_of(ArrivalProcess::Gamma, n, rate);
    s.cv = cv;
    const Workload w = make_workload(s);
    check_well_formed(w);
    const auto [mean, got_cv] = mean_and_cv(gaps_of(w));
    CHECK(mean == Approx(1 / rate).margin(5 * cv * (1 / rate) / std::sqrt(n)));
    CHECK(got_cv == Approx(cv).epsilon(0.04));
  }
}

TEST_CASE("Lengths come from their own streams", "[workload]") {
  auto s = spec_of(ArrivalProcess::Poisson, 2000, 5.0);
  const Workload base = make_workload(s);

  SECTION("changing the rate keeps the lengths and moves the arrivals") {
    s.rate = 50.0;
    const Workload faster = make_workload(s);
    CHECK(lengths_of(faster) == lengths_of(base));
    CHECK(faster.requests.back().arrival_s < base.requests.back().arrival_s);
  }
  SECTION("changing the arrival process keeps the lengths") {
    for (auto p : {ArrivalProcess::Gamma, ArrivalProcess::Constant, ArrivalProcess::Closed}) {
      s.arrival = p;
      s.concurrency = 8;
      s.cv = 3.0;
      CHECK(lengths_of(make_workload(s)) == lengths_of(base));
    }
  }
  SECTION("changing the output spec keeps the prompts and the arrivals") {
    s.output_len = "uniform:1:10";
    const Workload other = make_workload(s);
    for (size_t i = 0; i < other.requests.size(); ++i) {
      REQUIRE(other.requests[i].prompt_tokens == base.requests[i].prompt_tokens);
      REQUIRE(other.requests[i].arrival_s == base.requests[i].arrival_s);
      REQUIRE(other.requests[i].output_tokens <= 10);
    }
  }
  SECTION("prompt and output lengths are not the same draws") {
    s.prompt_len = "uniform:1:1000";
    s.output_len = "uniform:1:1000";
    const Workload w = make_workload(s);
    int equal = 0;
    for (const auto& r : w.requests) equal += r.prompt_tokens == r.output_tokens;
    CHECK(equal < 20);  // about 2 expected by chance
  }
}

TEST_CASE("Lengths follow the given distributions", "[workload]") {
  auto s = spec_of(ArrivalProcess::Poisson, 50'000);
  s.prompt_len = "128";
  s.output_len = "lognormal:256:1.0:1:2048";
  const Workload w = make_workload(s);
  double out_sum = 0;
  for (const auto& r : w.requests) {
    REQUIRE(r.prompt_tokens == 128);
    REQUIRE(r.output_tokens >= 1);
    REQUIRE(r.output_tokens <= 2048);
    out_sum += r.output_tokens;
  }
  // Clipping at 2048 (~2% of the mass, far above the mean) lowers the mean a little.
  const double mean = out_sum / 50'000;
  CHECK(mean > 220);
  CHECK(mean < 260);
}

TEST_CASE("Closed loop: arrivals left to the runner", "[workload]") {
  auto s = spec_of(ArrivalProcess::Closed, 500);
  s.concurrency = 16;
  s.rate = -1;  // the rate is not used in a closed loop
  const Workload w = make_workload(s);
  check_well_formed(w);
  CHECK(w.closed_loop);
  CHECK(w.concurrency == 16);
  CHECK(w.requests.size() == 500);
  for (const auto& r : w.requests) REQUIRE(r.arrival_s == 0.0);
}

TEST_CASE("Trace arrival replays the trace", "[workload]") {
  WorkloadSpec s;
  s.arrival = ArrivalProcess::Trace;
  s.trace.path = kSmallAzure;
  s.trace.rate_scale = 2.0;
  const Workload w = make_workload(s);
  CHECK_FALSE(w.closed_loop);
  const auto expected = servesim::read_trace(s.trace);
  CHECK(same_requests(w.requests, expected));
  REQUIRE(w.requests.size() == 5);
  CHECK(w.requests.back().arrival_s == Approx(1.25));
  CHECK(w.requests.back().prompt_tokens == 300);
}

TEST_CASE("Lengths resampled jointly from a trace", "[workload]") {
  auto s = spec_of(ArrivalProcess::Poisson, 50'000);
  TraceOptions t;
  t.path = kSmallAzure;
  s.lengths_from_trace = t;
  const Workload w = make_workload(s);
  check_well_formed(w);
  // The small trace's pairs are (100,10), (200,20), (250,25), (300,30), (400,40).
  std::map<std::pair<int32_t, int32_t>, int> counts;
  for (const auto& r : w.requests) ++counts[{r.prompt_tokens, r.output_tokens}];
  REQUIRE(counts.size() == 5);
  for (const auto& [pair, count] : counts) {
    INFO("pair " << pair.first << "," << pair.second);
    CHECK(pair.second * 10 == pair.first);  // drawn jointly, never mixed
    // Binomial(50000, 1/5): mean 10000, sd ~ 89.
    CHECK(std::abs(count - 10'000) < 5 * 90);
  }
  CHECK(same_requests(make_workload(s).requests, w.requests));
  s.seed = 99;
  CHECK(lengths_of(make_workload(s)) != lengths_of(w));
  s.seed = 1234;
  s.rate = 1.0;
  CHECK(lengths_of(make_workload(s)) == lengths_of(w));
}

TEST_CASE("Lengths resampled from the real conversation trace", "[workload]") {
  auto s = spec_of(ArrivalProcess::Gamma, 20'000);
  TraceOptions t;
  t.path = kConvTrace;
  s.lengths_from_trace = t;
  const Workload w = make_workload(s);
  const auto trace = servesim::read_trace(t);
  std::set<std::pair<int32_t, int32_t>> pairs;
  double trace_mean = 0, mean = 0;
  for (const auto& r : trace) {
    pairs.emplace(r.prompt_tokens, r.output_tokens);
    trace_mean += r.prompt_tokens;
  }
  trace_mean /= static_cast<double>(trace.size());
  for (const auto& r : w.requests) {
    REQUIRE(pairs.count({r.prompt_tokens, r.output_tokens}) == 1);
    mean += r.prompt_tokens;
  }
  mean /= static_cast<double>(w.requests.size());
  CHECK(mean == Approx(trace_mean).epsilon(0.05));
}

TEST_CASE("Every bad workload value throws InputError naming the flag", "[workload]") {
  using Catch::Contains;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // Every open-loop synthetic process refuses each of `rates` for `n`
  // requests, with a message that contains `what`.
  auto check_rates_refused = [](int64_t n, std::initializer_list<double> rates,
                                const std::string& what) {
    for (auto p : {ArrivalProcess::Poisson, ArrivalProcess::Gamma, ArrivalProcess::Constant}) {
      for (double rate : rates) {
        auto s = spec_of(p, n, rate);
        INFO(servesim::to_string(p) << " rate " << rate);
        CHECK_THROWS_AS(make_workload(s), InputError);
        CHECK_THROWS_WITH(make_workload(s), Contains(what));
      }
    }
  };

  check_rates_refused(10, {0.0, -1.0, nan, inf, -inf}, "--rate must be > 0");
  CHECK_THROWS_WITH(make_workload(spec_of(ArrivalProcess::Poisson, 10, -1)),
                    Contains("(got -1)"));

  for (double cv : {0.0, -1.0, nan, inf, 1e-9, 1e9}) {
    auto s = spec_of(ArrivalProcess::Gamma);
    s.cv = cv;
    INFO("cv " << cv);
    CHECK_THROWS_WITH(make_workload(s), Contains("--cv"));
  }

  for (int64_t c : {0, -3}) {
    auto s = spec_of(ArrivalProcess::Closed);
    s.concurrency = c;
    CHECK_THROWS_WITH(make_workload(s), Contains("--concurrency must be >= 1"));
  }

  for (int64_t n : {int64_t{0}, int64_t{-1}, int64_t{1'000'000'000'000}}) {
    for (auto p : {ArrivalProcess::Poisson, ArrivalProcess::Closed}) {
      auto s = spec_of(p, n);
      s.concurrency = 4;
      INFO("num_requests " << n);
      CHECK_THROWS_WITH(make_workload(s), Contains("--num-requests"));
    }
  }

  {
    auto s = spec_of(ArrivalProcess::Poisson);
    s.prompt_len = "uniform:5";
    CHECK_THROWS_WITH(make_workload(s), Contains("--prompt-len"));
    s = spec_of(ArrivalProcess::Poisson);
    s.output_len = "lognormal:0:1";
    CHECK_THROWS_WITH(make_workload(s), Contains("--output-len"));
  }
  {
    WorkloadSpec s;
    s.arrival = ArrivalProcess::Trace;
    CHECK_THROWS_WITH(make_workload(s), Contains("--trace"));
    s.trace.path = std::string(SERVESIM_TEST_DATA_DIR) + "/no_such_trace.csv";
    CHECK_THROWS_WITH(make_workload(s), Contains("no_such_trace.csv"));
    s.trace.path = kSmallAzure;
    s.lengths_from_trace = s.trace;
    CHECK_THROWS_AS(make_workload(s), InputError);
  }
  {
    auto s = spec_of(ArrivalProcess::Poisson);
    TraceOptions t;
    t.path = std::string(SERVESIM_TEST_DATA_DIR) + "/trace_plain_small.csv";
    t.format = TraceFormat::Azure;  // wrong format: header mismatch
    s.lengths_from_trace = t;
    CHECK_THROWS_WITH(make_workload(s), Contains("trace_plain_small.csv:1:"));
  }
  // A rate so small that the arrival times overflow is caught, not returned as inf.
  check_rates_refused(1000, {1e-307, 1e-320}, "--rate");
  // So is one whose arrivals lie where doubles no longer resolve latencies
  // (at 1e-15 req/s, ~1e16 s: every latency came out 0), for a trace too.
  check_rates_refused(20, {1e-12, 1e-15}, "raise --rate");
  CHECK_NOTHROW(make_workload(spec_of(ArrivalProcess::Constant, 20, 1e-6)));  // the last at 1.9e7 s
  {
    WorkloadSpec s;
    s.arrival = ArrivalProcess::Trace;
    s.trace.path = kSmallAzure;
    s.trace.format = TraceFormat::Azure;
    CHECK_NOTHROW(make_workload(s));
    s.trace.rate_scale = 1e-300;
    CHECK_THROWS_WITH(make_workload(s), Contains("raise --rate-scale"));
  }
}
