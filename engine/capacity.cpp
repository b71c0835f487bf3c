#include "engine/capacity.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/parallel_for.h"
#include "sim/errors.h"

namespace servesim {
namespace {

constexpr double kLowestRate = 1e-4;   // req/s: below it no SLO is attainable
constexpr double kHighestRate = 1e7;   // req/s: above it nothing limits the rate
constexpr double kKvFullUtilization = 0.95;
constexpr double kSteadyStateSpans = 10;  // arrivals should span this many median E2Es

CapacityProbe probe(const SimulationSetup& base, const CostModels& costs, double rate, uint64_t seed) {
  SimulationSetup setup = base;
  setup.workload.rate = rate;
  setup.workload.seed = seed;
  setup.keep_iterations = false;
  SimulationOutput out = simulate_workload(setup, make_workload(setup.workload), costs, LoopOptions{});
  CapacityProbe p;
  p.rate = rate;
  p.summary = out.summary;
  p.submitted = out.summary.submitted;
  p.rejected = out.summary.rejected;
  p.preemptions = out.summary.preemptions;
  p.peak_kv_utilization = out.summary.peak_kv_utilization;
  p.attainment = p.submitted > 0 ? double(out.summary.slo_met) / double(p.submitted) : 0.0;
  const SloTargets& slo = setup.slo;
  for (const RequestRecord& r : out.records.requests) {
    if (!r.completed()) continue;
    if (slo.ttft_s && r.first_token_s - r.arrival_s > *slo.ttft_s) ++p.ttft_misses;
    const double tpot = request_tpot_s(r);
    if (slo.tpot_s && tpot >= 0 && tpot > *slo.tpot_s) ++p.tpot_misses;
    if (slo.e2e_s && r.finish_s - r.arrival_s > *slo.e2e_s) ++p.e2e_misses;
  }
  return p;
}

// The SLO most requests miss at `p` (the first of equals, in the order
// ttft, tpot, e2e); "rejected" only when rejections outnumber every SLO's
// misses; "none" when nothing missed.
std::string worst_slo(const CapacityProbe& p) {
  std::pair<int64_t, std::string> worst{0, "none"};
  for (const auto& [misses, name] : {std::pair<int64_t, std::string>{p.ttft_misses, "ttft"},
                                     {p.tpot_misses, "tpot"}, {p.e2e_misses, "e2e"}})
    if (misses > worst.first) worst = {misses, name};
  if (p.rejected > worst.first) worst = {p.rejected, "rejected"};
  return worst.second;
}

SeedCapacity search_seed(const SimulationSetup& setup, const CostModels& costs, const CapacityOptions& o,
                         uint64_t seed) {
  SeedCapacity s;
  s.seed = seed;
  auto run = [&](double rate) {
    ++s.probes;
    return probe(setup, costs, rate, seed);
  };
  CapacityProbe lo, hi;
  CapacityProbe first = run(setup.workload.rate);
  // A rejection is the request's own (too long for the model length, the KV
  // cache or the token budget), the same at every rate: too many, and no
  // rate can pass.
  const double admitted = first.submitted > 0 ? double(first.submitted - first.rejected) / double(first.submitted) : 0;
  if (admitted < o.attainment) {
    std::string reasons;
    for (const auto& [reason, count] : first.summary.rejections)
      reasons += fmt::format("{}{} {}", reasons.empty() ? "" : "; ", count, reason);
    throw InputError(fmt::format(
        "{} of {} requests are rejected at any rate (seed {}: {}), so at most {:.1f}% can meet the SLOs and "
        "{:.1f}% are needed: raise the limit they hit or shorten the workload's requests",
        first.rejected, first.submitted, seed, reasons, admitted * 100, o.attainment * 100));
  }
  if (first.attainment >= o.attainment) {
    lo = first;
    for (;;) {
      if (lo.rate * 2 > kHighestRate)
        throw InputError(fmt::format("the SLOs are met at every rate up to {:g} req/s (seed {}): nothing limits "
                                     "this deployment; check the SLO targets",
                                     kHighestRate, seed));
      CapacityProbe next = run(lo.rate * 2);
      if (next.attainment < o.attainment) {
        hi = next;
        break;
      }
      lo = next;
    }
  } else {
    hi = first;
    for (;;) {
      if (hi.rate / 2 < kLowestRate)
        throw InputError(fmt::format(
            "the SLOs are not met even at {:g} req/s (seed {}): {:.1f}% of requests meet them, {:.1f}% are "
            "needed, most misses are {}; the targets are below what the slowest requests take even alone",
            hi.rate, seed, hi.attainment * 100, o.attainment * 100, worst_slo(hi)));
      CapacityProbe next = run(hi.rate / 2);
      if (next.attainment >= o.attainment) {
        lo = next;
        break;
      }
      hi = next;
    }
  }
  while ((hi.rate - lo.rate) / lo.rate > o.tolerance) {
    const double rate = 0.5 * (lo.rate + hi.rate);
    if (rate <= lo.rate || rate >= hi.rate) break;  // the bracket is as narrow as doubles go
    CapacityProbe mid = run(rate);
    (mid.attainment >= o.attainment ? lo : hi) = std::move(mid);
  }
  s.max_rate = lo.rate;
  s.at_max = std::move(lo);
  s.above = std::move(hi);
  return s;
}

}  // namespace

void CapacityOptions::validate() const {
  if (!(attainment > 0 && attainment <= 1))
    throw InputError(fmt::format("--slo-attainment must be in (0, 1] (got {})", attainment));
  if (!(tolerance >= 1e-6 && tolerance < 1))
    throw InputError(fmt::format("--tolerance must be in [1e-6, 1) (got {})", tolerance));
  if (seeds < 1 || seeds > 100) throw InputError(fmt::format("--seeds must be in 1 .. 100 (got {})", seeds));
  if (jobs < 1 || jobs > 1024) throw InputError(fmt::format("--jobs must be in 1 .. 1024 (got {})", jobs));
}

void check_capacity_setup(const SimulationSetup& setup) {
  if (!setup.slo.any())
    throw InputError("capacity needs at least one SLO: --slo-ttft, --slo-tpot or --slo-e2e");
  const ArrivalProcess a = setup.workload.arrival;
  if (a != ArrivalProcess::Poisson && a != ArrivalProcess::Gamma && a != ArrivalProcess::Constant)
    throw InputError(fmt::format("capacity searches the arrival rate: --arrival {} has none; use poisson, gamma "
                                 "or constant (and --lengths-from-trace for a trace's lengths)",
                                 to_string(a)));
  if (!(setup.workload.rate > 0) || !std::isfinite(setup.workload.rate))
    throw InputError(fmt::format("--rate must be > 0 (got {}): the search starts there", setup.workload.rate));
}

CapacityResult find_capacity(const SimulationSetup& setup, const CostModels& costs, const CapacityOptions& o) {
  o.validate();
  check_capacity_setup(setup);

  CapacityResult result;
  result.seeds.resize(size_t(o.seeds));
  // Seeds are independent; each result lands at its index.
  parallel_for(
      o.seeds, o.jobs,
      [&](int i) { result.seeds[size_t(i)] = search_seed(setup, costs, o, setup.workload.seed + uint64_t(i)); },
      o.progress);
  std::vector<size_t> order(result.seeds.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return result.seeds[x].max_rate < result.seeds[y].max_rate; });
  // The median seed (the lower middle one of an even count): a rate some seed reached.
  result.median_seed = order[(order.size() - 1) / 2];
  result.max_request_rate = result.seeds[result.median_seed].max_rate;
  result.min_rate = result.seeds[order.front()].max_rate;
  result.max_rate = result.seeds[order.back()].max_rate;

  const CapacityProbe& above = result.seeds[result.median_seed].above;
  result.limiting_slo = worst_slo(above);
  // Rejections are not counted here: the scheduler rejects only requests it
  // could never serve (too long), at any rate.
  const bool kv_bound = above.preemptions > 0 || above.peak_kv_utilization > kKvFullUtilization;
  result.bound_by = kv_bound ? "kv_capacity" : "compute";
  result.explanation = fmt::format(
      "at {:.4g} req/s {:.2f}% meet the SLOs ({} TTFT, {} TPOT, {} E2E misses, {} rejected of {}); the KV "
      "cache peaks at {:.1f}% with {} preemptions, so {} bounds the rate",
      above.rate, above.attainment * 100, above.ttft_misses, above.tpot_misses, above.e2e_misses, above.rejected,
      above.submitted, above.peak_kv_utilization * 100, above.preemptions,
      kv_bound ? "KV capacity" : "compute (the queue, not memory)");
  // A fixed number of requests arrives over N / rate seconds: at a high rate
  // that is a burst, not a steady state.
  const CapacityProbe& at = result.seeds[result.median_seed].at_max;
  const double span_s = double(at.submitted) / at.rate;
  if (span_s < kSteadyStateSpans * at.summary.e2e_s.p50)
    result.warnings.push_back(fmt::format(
        "at {:.4g} req/s the {} requests arrive over {:.3g} s, under {:g} times a request's median E2E ({:.3g} "
        "s): the answer measures a burst more than a steady state; raise --num-requests",
        at.rate, at.submitted, span_s, kSteadyStateSpans, at.summary.e2e_s.p50));
  return result;
}

namespace {

nlohmann::json probe_json(const CapacityProbe& p) {
  const RunSummary& s = p.summary;
  return {{"rate", p.rate},
          {"attainment", p.attainment},
          {"submitted", p.submitted},
          {"rejected", p.rejected},
          {"duration_s", p.summary.duration_s},
          {"misses", {{"ttft", p.ttft_misses}, {"tpot", p.tpot_misses}, {"e2e", p.e2e_misses}}},
          {"preemptions", p.preemptions},
          {"peak_kv_utilization", p.peak_kv_utilization},
          {"output_tokens_per_s", s.output_tokens_per_s},
          {"ttft_s", {{"p50", s.ttft_s.p50}, {"p90", s.ttft_s.p90}, {"p99", s.ttft_s.p99}}},
          {"tpot_s", {{"p50", s.tpot_s.p50}, {"p90", s.tpot_s.p90}, {"p99", s.tpot_s.p99}}},
          {"e2e_s", {{"p50", s.e2e_s.p50}, {"p90", s.e2e_s.p90}, {"p99", s.e2e_s.p99}}}};
}

}  // namespace

nlohmann::json capacity_to_json(const CapacityResult& r, const CapacityOptions& o) {
  nlohmann::json seeds = nlohmann::json::array();
  for (const SeedCapacity& s : r.seeds)
    seeds.push_back({{"seed", s.seed},
                     {"max_request_rate", s.max_rate},
                     {"probes", s.probes},
                     {"at_max", probe_json(s.at_max)},
                     {"first_failing", probe_json(s.above)}});
  return {{"max_request_rate", r.max_request_rate},
          {"spread", {{"min", r.min_rate}, {"max", r.max_rate}}},
          {"attainment_target", o.attainment},
          {"tolerance", o.tolerance},
          {"seeds", seeds},
          {"median_seed", r.seeds[r.median_seed].seed},
          {"at_capacity", probe_json(r.seeds[r.median_seed].at_max)},
          {"limit", {{"slo", r.limiting_slo}, {"bound_by", r.bound_by}, {"explanation", r.explanation}}},
          {"warnings", r.warnings},
          {"meaning", "max_request_rate: the median over seeds of the highest rate (within tolerance) whose "
                      "fraction of requests meeting every SLO is at least attainment_target"}};
}

}  // namespace servesim
