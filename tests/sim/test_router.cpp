// Replicas behind a router (engine/router.h, run_cluster_loop): the routing
// rules on hand-made cases, one replica exactly as before, and R replicas
// at R times the rate serving like one replica at 1x.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "engine/router.h"
#include "engine/simulation.h"
#include "sim/errors.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

// A request with a prompt of `prefix` shared tokens of group `group`
// followed by `tail` tokens of its own.
Request with_prefix(int64_t id, double arrival_s, uint64_t group, int32_t prefix, int32_t tail, int32_t output) {
  Request r = test::request(id, arrival_s, prefix + tail, output);
  r.tokens.prompt_spans = {{token_source(TokenSourceKind::SharedPrefix, group), 0, prefix},
                           {token_source(TokenSourceKind::RequestTail, uint64_t(id)), 0, tail}};
  r.tokens.output_source = token_source(TokenSourceKind::Output, uint64_t(id));
  return r;
}

SimulationOutput serve(const Workload& w, int32_t replicas, RouterSettings router) {
  SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Chunked, 1, 1, "fixed:10", "fixed:10", 0);
  const SchedulerConfig config = resolve_scheduler_config(setup);
  const CostModels costs = setup_cost_models(setup);
  return simulate_replicas(config, replicas, router, w, costs, nullptr, {}, {});
}

RouterSettings policy(RouterPolicy p) {
  RouterSettings r;
  r.policy = p;
  return r;
}

}  // namespace

TEST_CASE("Round-robin deals arrivals in order, least-requests takes the least loaded with ties to the lowest", "[router]") {
  Workload w;
  for (int64_t i = 0; i < 7; ++i) w.requests.push_back(test::request(i, 0.001 * double(i), 100, 50));
  const SimulationOutput rr = serve(w, 3, policy(RouterPolicy::RoundRobin));
  for (int64_t i = 0; i < 7; ++i) CHECK(rr.records.requests[size_t(i)].replica == int32_t(i % 3));
  REQUIRE(rr.records.replicas.size() == 3);
  // Seven requests a millisecond apart, each still running when the next
  // comes: 0, 1, 2 to the idle replicas, then the ties again from replica 0.
  const SimulationOutput lr = serve(w, 3, policy(RouterPolicy::LeastRequests));
  for (int64_t i = 0; i < 7; ++i) CHECK(lr.records.requests[size_t(i)].replica == int32_t(i % 3));
  // One long request keeps replica 0 busy: every later, short one avoids it.
  Workload skew;
  skew.requests.push_back(test::request(0, 0.0, 100, 2000));
  for (int64_t i = 1; i < 6; ++i) skew.requests.push_back(test::request(i, 0.5 * double(i), 100, 5));
  const SimulationOutput s = serve(skew, 2, policy(RouterPolicy::LeastRequests));
  for (int64_t i = 1; i < 6; ++i) CHECK(s.records.requests[size_t(i)].replica == 1);
  const SimulationOutput kv = serve(skew, 2, policy(RouterPolicy::LeastKv));
  for (int64_t i = 1; i < 6; ++i) CHECK(kv.records.requests[size_t(i)].replica == 1);
  // Random: seeded, so the same seed routes the same way.
  RouterSettings random = policy(RouterPolicy::Random);
  random.seed = 9;
  const SimulationOutput r1 = serve(w, 3, random), r2 = serve(w, 3, random);
  for (int64_t i = 0; i < 7; ++i) CHECK(r1.records.requests[size_t(i)].replica == r2.records.requests[size_t(i)].replica);
}

TEST_CASE("Prefix affinity follows the cached prefix, and falls back to the least loaded under imbalance", "[router]") {
  // A (prefix P) runs long on replica 0; B (no shared prefix) goes to the
  // idle replica 1 and ends; C (prefix P) arrives while A still runs.
  Workload w;
  w.requests.push_back(with_prefix(0, 0.0, 1, 1024, 16, 3000));
  w.requests.push_back(with_prefix(1, 0.01, 2, 1024, 16, 3));
  w.requests.push_back(with_prefix(2, 1.0, 1, 1024, 16, 3));
  const SimulationOutput affinity = serve(w, 2, policy(RouterPolicy::PrefixAffinity));
  CHECK(affinity.records.requests[0].replica == 0);
  CHECK(affinity.records.requests[1].replica == 1);
  CHECK(affinity.records.requests[2].replica == 0);  // where P is cached, though replica 1 is idle
  CHECK(affinity.records.requests[2].cached_tokens == 1024);
  const SimulationOutput least = serve(w, 2, policy(RouterPolicy::LeastRequests));
  CHECK(least.records.requests[2].replica == 1);
  CHECK(least.records.requests[2].cached_tokens == 0);
  // Any imbalance at all counts as overload here: C goes to the idle replica.
  RouterSettings strict = policy(RouterPolicy::PrefixAffinity);
  strict.balance_abs_threshold = 0;
  strict.balance_rel_threshold = 1.0;
  CHECK(serve(w, 2, strict).records.requests[2].replica == 1);
  CHECK_THROWS_WITH(parse_router_policy("sticky"), Catch::Contains("--router 'sticky'"));
}

TEST_CASE("One replica is the serving loop as before, and R replicas at R x the rate serve like one at 1x", "[router]") {
  SimulationSetup one = test::roofline_setup(SchedulerPolicy::Chunked, 3, 600, "lognormal:512:1.0:16:4096",
                                             "lognormal:128:1.0:1:1024", 21);
  const SimulationOutput a = simulate(one);
  one.num_replicas = 1;
  one.router = policy(RouterPolicy::LeastKv);  // a router of one replica routes nothing
  const SimulationOutput b = simulate(one);
  CHECK(a.summary.ttft_s.p99 == b.summary.ttft_s.p99);
  CHECK(a.summary.iterations == b.summary.iterations);
  CHECK(b.records.replicas.empty());
  SimulationSetup four = one;
  four.num_replicas = 4;
  four.router = policy(RouterPolicy::RoundRobin);
  four.workload.rate = 12;
  four.workload.num_requests = 2400;
  const SimulationOutput c = simulate(four);
  CHECK(c.records.replicas.size() == 4);
  CHECK(c.summary.tpot_s.p50 == Approx(a.summary.tpot_s.p50).epsilon(0.10));
  CHECK(c.summary.ttft_s.p50 == Approx(a.summary.ttft_s.p50).epsilon(0.15));
  CHECK(c.summary.output_tokens_per_s == Approx(4 * a.summary.output_tokens_per_s).epsilon(0.10));
}

TEST_CASE("Replicas of pipeline-parallel groups: the router picks the replica, its engines take turns", "[router]") {
  // Two replicas of two engines each (engines 0, 1 | 2, 3), idle: round-robin
  // alternates the replicas and each replica alternates its engines.
  SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Chunked, 1, 1, "fixed:10", "fixed:10", 0);
  const SchedulerConfig config = resolve_scheduler_config(setup);
  std::vector<Scheduler> engines(4, Scheduler(config));
  std::vector<const Scheduler*> views;
  for (const Scheduler& s : engines) views.push_back(&s);
  Router rr(policy(RouterPolicy::RoundRobin), 2);
  std::vector<size_t> chosen;
  for (int64_t i = 0; i < 6; ++i) chosen.push_back(rr.route(test::request(i, 0, 10, 10), views));
  CHECK(chosen == std::vector<size_t>{0, 2, 1, 3, 0, 2});
  Router lr(policy(RouterPolicy::LeastRequests), 2);
  CHECK_THROWS_AS(lr.route(test::request(0, 0, 10, 10), std::span<const Scheduler* const>(views.data(), 3)),
                  std::invalid_argument);

  // Served: R replicas of a PP 2 group at R x the rate, like one group at 1x.
  SimulationSetup one = test::roofline_setup(SchedulerPolicy::Chunked, 3, 600, "lognormal:512:1.0:16:4096",
                                             "lognormal:128:1.0:1:1024", 21);
  one.parallel = {1, 2};
  const SimulationOutput a = simulate(one);
  SimulationSetup three = one;
  three.num_replicas = 3;
  three.router = policy(RouterPolicy::LeastRequests);
  three.workload.rate = 9;
  three.workload.num_requests = 1800;
  const SimulationOutput c = simulate(three);
  REQUIRE(c.records.replicas.size() == 3);
  int64_t blocks = 0;
  for (const ReplicaRecord& r : c.records.replicas) blocks += r.num_gpu_blocks;
  CHECK(blocks == c.records.num_gpu_blocks);
  CHECK(c.records.replicas[0].num_gpu_blocks == a.records.num_gpu_blocks);  // a group's two engines
  for (const RequestRecord& r : c.records.requests) CHECK((r.replica >= 0 && r.replica < 3));
  CHECK(c.summary.tpot_s.p50 == Approx(a.summary.tpot_s.p50).epsilon(0.10));
  CHECK(c.summary.ttft_s.p50 == Approx(a.summary.ttft_s.p50).epsilon(0.15));
  CHECK(c.summary.output_tokens_per_s == Approx(3 * a.summary.output_tokens_per_s).epsilon(0.10));
}

namespace {
// Every iteration record in the order the loop reports it.
struct IterationLog final : LoopObserver {
  std::vector<IterationRecord> seen;
  void after_iteration(const IterationPlan&, const IterationResult&, const IterationRecord& r) override {
    seen.push_back(r);
  }
};
}  // namespace

TEST_CASE("Several replicas report their iterations in start order, as iterations.csv holds them", "[router]") {
  // iterations.csv streams in the loop's order (cli IterationsStream): it
  // must be the order of the kept records, which are sorted by start.
  SimulationSetup setup = test::roofline_setup(SchedulerPolicy::Chunked, 12, 800, "lognormal:512:1.0:16:4096",
                                               "lognormal:128:1.0:1:1024", 5);
  const SchedulerConfig config = resolve_scheduler_config(setup);
  const CostModels costs = setup_cost_models(setup);
  const Workload w = make_workload(setup.workload);
  for (const RouterPolicy p : {RouterPolicy::RoundRobin, RouterPolicy::LeastRequests, RouterPolicy::Random}) {
    IterationLog log;
    LoopOptions loop;
    loop.observers.push_back(&log);
    const SimulationOutput out = simulate_replicas(config, 4, policy(p), w, costs, nullptr, {}, {}, loop);
    REQUIRE(log.seen.size() == out.records.iterations.size());
    std::set<int32_t> replicas;
    for (size_t i = 0; i < log.seen.size(); ++i) {
      CHECK(log.seen[i].index == out.records.iterations[i].index);
      CHECK(log.seen[i].start_s == out.records.iterations[i].start_s);
      replicas.insert(log.seen[i].replica);
    }
    CHECK(replicas.size() == 4);
  }
}
