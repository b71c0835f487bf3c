// `capacity`'s search (engine/capacity.h) on a case whose answer is known,
// its monotonicity and refusals; pipeline parallelism's virtual engines
// (engine/pipeline_engines.h); the Pareto search's independence of jobs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

#include "engine/capacity_search.h"
#include "engine/capacity.h"
#include "engine/pipeline_engines.h"
#include "sim/errors.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

// Constant arrivals of identical requests served one at a time: until the
// gap between arrivals 1 / r falls below one request's service time s
// nobody queues, and past it every request waits longer than the last.
SimulationSetup one_at_a_time(int64_t n) {
  SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Chunked, 1.0, n, "fixed:1000", "fixed:50", 7);
  setup.workload.arrival = ArrivalProcess::Constant;
  setup.scheduler.max_num_seqs = 1;
  return setup;
}

SimulationOutput alone(const SimulationSetup& base) {
  SimulationSetup setup = base;
  setup.workload.num_requests = 1;
  return simulate(setup);
}

CapacityOptions options(double attainment, int seeds = 1) {
  CapacityOptions o;
  o.attainment = attainment;
  o.seeds = seeds;
  o.tolerance = 0.002;
  return o;
}

}  // namespace

TEST_CASE("Capacity finds where queueing starts: one request's service time", "[capacity]") {
  SimulationSetup setup = one_at_a_time(40);
  const SimulationOutput single = alone(setup);
  const double service_s = single.summary.e2e_s.max;   // one request, alone
  const double ttft_alone = single.summary.ttft_s.max;
  // TTFT may exceed its unqueued value by 0.1% only; every request must meet it.
  setup.slo.ttft_s = ttft_alone * 1.001;
  const CostModels costs = setup_cost_models(setup);
  const CapacityResult r = find_capacity(setup, costs, options(1.0));
  // Past 1 / s the k-th request waits k (s - 1/r): the 40th misses by far
  // more than 0.1% of TTFT once r exceeds 1 / s by a part in 10^4.
  CHECK(r.max_request_rate == Approx(1.0 / service_s).epsilon(0.004));
  CHECK(r.max_request_rate <= 1.0 / service_s * 1.0005);
  CHECK(r.limiting_slo == "ttft");
  CHECK(r.bound_by == "compute");
  CHECK(r.warnings.empty());  // 40 requests arrive over 40 service times
  // Five arrive over five: the answer is a burst's, and capacity says so.
  SimulationSetup few = setup;
  few.workload.num_requests = 5;
  const CapacityResult burst = find_capacity(few, costs, options(1.0));
  REQUIRE(burst.warnings.size() == 1);
  CHECK_THAT(burst.warnings[0], Catch::Contains("raise --num-requests"));
  // Constant arrivals and fixed lengths: every seed is the same workload.
  const CapacityResult three = find_capacity(setup, costs, options(1.0, 3));
  CHECK(three.min_rate == three.max_rate);
  CHECK(three.max_request_rate == r.max_request_rate);
}

TEST_CASE("Capacity grows with a looser SLO and a lower attainment target", "[capacity]") {
  SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Chunked, 10, 300, "lognormal:512:1.0:16:4096",
                                               "lognormal:128:1.0:1:1024", 11);
  const CostModels costs = setup_cost_models(setup);
  double last = 0;
  for (double tpot_ms : {12.0, 20.0, 40.0}) {
    setup.slo.tpot_s = tpot_ms * 1e-3;
    const double rate = find_capacity(setup, costs, options(0.95, 2)).max_request_rate;
    CHECK(rate >= last);
    last = rate;
  }
  setup.slo.tpot_s = 20e-3;
  CHECK(find_capacity(setup, costs, options(0.80, 2)).max_request_rate >=
        find_capacity(setup, costs, options(0.99, 2)).max_request_rate);
  // Threads change nothing.
  CapacityOptions serial = options(0.95, 3), parallel = options(0.95, 3);
  parallel.jobs = 3;
  const CapacityResult a = find_capacity(setup, costs, serial), b = find_capacity(setup, costs, parallel);
  CHECK(capacity_to_json(a, serial).dump() == capacity_to_json(b, parallel).dump());
}

TEST_CASE("Capacity refuses what it cannot search", "[capacity]") {
  SimulationSetup setup = one_at_a_time(20);
  const CostModels costs = setup_cost_models(setup);
  CHECK_THROWS_WITH(find_capacity(setup, costs, options(0.99)), Catch::Contains("at least one SLO"));
  setup.slo.ttft_s = 1e-6;  // below one prefill
  CHECK_THROWS_WITH(find_capacity(setup, costs, options(0.99)),
                    Catch::Contains("not met even at") && Catch::Contains("ttft"));
  setup.slo.ttft_s = 1.0;
  CHECK_THROWS_WITH(find_capacity(setup, costs, options(0)), Catch::Contains("--slo-attainment must be in (0, 1]"));
  CHECK_THROWS_WITH(find_capacity(setup, costs, options(1.5)), Catch::Contains("--slo-attainment"));
  CapacityOptions fine = options(0.99);
  fine.tolerance = 1e-9;
  CHECK_THROWS_WITH(find_capacity(setup, costs, fine), Catch::Contains("--tolerance must be in [1e-6, 1)"));
  setup.workload.arrival = ArrivalProcess::Closed;
  setup.workload.concurrency = 4;
  CHECK_THROWS_WITH(find_capacity(setup, costs, options(0.99)), Catch::Contains("--arrival closed has none"));
}

TEST_CASE("Virtual engines: requests dealt round-robin, sessions kept together, clients split", "[parallel]") {
  Workload w;
  for (int64_t i = 0; i < 7; ++i) w.requests.push_back(test::request(i, double(i), 10, 5));
  w.requests[4].follows = 1;  // a later turn of request 1's session
  w.requests[6].follows = 4;
  const std::vector<EngineShare> shares = split_for_engines(w, 2);
  REQUIRE(shares.size() == 2);
  // Independent requests 0, 1, 2, 3, 5 go 0, 1, 0, 1, 0; 4 and 6 follow 1.
  CHECK(shares[0].original_ids == std::vector<int64_t>{0, 2, 5});
  CHECK(shares[1].original_ids == std::vector<int64_t>{1, 3, 4, 6});
  CHECK(shares[1].workload.requests[2].follows == 0);  // 4 follows 1, local id 0
  CHECK(shares[1].workload.requests[3].follows == 2);  // 6 follows 4, local id 2
  for (const EngineShare& s : shares)
    for (size_t j = 0; j < s.workload.requests.size(); ++j) CHECK(s.workload.requests[j].id == int64_t(j));
  Workload closed = w;
  for (Request& r : closed.requests) r.follows = -1;
  closed.closed_loop = true;
  closed.concurrency = 5;
  const std::vector<EngineShare> c = split_for_engines(closed, 2);
  CHECK(c[0].workload.concurrency == 3);
  CHECK(c[1].workload.concurrency == 2);
  CHECK(split_for_engines(closed, 8).size() == 5);  // an engine per client at most
  SchedulerConfig config;
  config.num_gpu_blocks = 1001;
  config.max_num_seqs = 5;
  CHECK(engine_config(config, 2, 0).num_gpu_blocks == 500);
  CHECK(engine_config(config, 2, 0).max_num_seqs == 3);
  CHECK(engine_config(config, 2, 1).max_num_seqs == 2);
}

TEST_CASE("PP: one request's latency is every stage plus the transfers, and a load keeps PP batches in flight",
          "[parallel]") {
  SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Chunked, 1, 1, "fixed:1000", "fixed:20", 3);
  setup.parallel = {1, 2};
  const SimulationOutput pp = simulate(setup);
  setup.parallel = {};
  const SimulationOutput one = simulate(setup);
  // One prefill of 1000 tokens, 19 decodes of 1; every stage computes what one
  // GPU did, plus one transfer of hidden states and residual (2 T d b) each.
  const Interconnect nv = interconnect_for_hardware("h200");
  const double d = 4096, b = 2;  // llama-3.1-8b in bf16
  const double transfers = nv.send_seconds(2 * 1000 * d * b) + 19 * nv.send_seconds(2 * d * b);
  CHECK(pp.summary.e2e_s.max == Approx(one.summary.e2e_s.max + transfers).epsilon(1e-9));
  REQUIRE(pp.communication);
  CHECK(pp.communication->communication_s == Approx(transfers).epsilon(1e-9));
  // Under a load two engines serve about twice what one engine's latency allows.
  setup = test::roofline_setup(SchedulerPolicy::Chunked, 1000, 200, "fixed:256", "fixed:64", 3);
  setup.scheduler.max_num_seqs = 8;
  setup.parallel = {1, 2};
  const double pp_throughput = simulate(setup).summary.output_tokens_per_s;
  setup.scheduler.max_num_seqs = 4;  // one engine's share
  setup.parallel = {};
  const double one_engine = simulate(setup).summary.output_tokens_per_s;
  CHECK(pp_throughput == Approx(2 * one_engine).epsilon(0.1));
}

TEST_CASE("A capacity search's points come back the same whatever the jobs", "[capacity]") {
  SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Chunked, 10, 200, "lognormal:512:1.0:16:4096",
                                               "lognormal:128:1.0:1:1024", 5);
  setup.slo.ttft_s = 0.5;
  setup.slo.tpot_s = 0.03;
  SearchAxes axes;
  axes.tensor_parallel_size = {1, 2};
  axes.quantization = {"none", "fp8"};
  axes.max_num_seqs = {256};
  axes.max_num_batched_tokens = {2048};
  CapacityOptions o = options(0.99, 2);
  o.tolerance = 0.02;
  std::ostringstream serial, parallel, merged;
  o.jobs = 1;
  const nlohmann::json a = search_capacity(setup, axes, o, {});
  write_search_csv(serial, a);
  o.jobs = 3;
  write_search_csv(parallel, search_capacity(setup, axes, o, {}));
  CHECK(serial.str() == parallel.str());
  // Two shards (even and odd grid indices), joined and their fronts marked
  // over both, make the same rows.
  nlohmann::json rows = search_capacity(setup, axes, o, {}, [](size_t i) { return i % 2 == 0; });
  for (const nlohmann::json& r : search_capacity(setup, axes, o, {}, [](size_t i) { return i % 2 == 1; }))
    rows.push_back(r);
  std::sort(rows.begin(), rows.end(), [](const nlohmann::json& x, const nlohmann::json& y) {
    return x["index"].get<size_t>() < y["index"].get<size_t>();
  });
  mark_pareto(rows);
  CHECK(rows == a);
  REQUIRE(a.size() == 4);
  auto per_gpu = [&](size_t i) { return a[i]["rate_per_gpu"].get<double>(); };
  auto tokens_per_gpu = [&](size_t i) { return a[i]["output_tokens_per_s_per_gpu"].get<double>(); };
  // fp8 serves more than bf16 on one GPU (its decode streams half the weights).
  CHECK(per_gpu(1) > per_gpu(0));
  CHECK(per_gpu(2) * 2 == Approx(a[2]["max_request_rate"].get<double>()).epsilon(1e-12));
  int on_front = 0;
  for (const nlohmann::json& r : a) on_front += r["pareto_tpot"].get<bool>() ? 1 : 0;
  CHECK(on_front >= 1);
  // TP 2 in bf16 serves less per GPU than fp8 at TP 2 at no better TPOT: not on the front.
  CHECK(tokens_per_gpu(2) < tokens_per_gpu(3));
  if (a[2]["capacity"]["at_capacity"]["tpot_s"]["p50"] >= a[3]["capacity"]["at_capacity"]["tpot_s"]["p50"])
    CHECK_FALSE(a[2]["pareto_tpot"].get<bool>());
}
