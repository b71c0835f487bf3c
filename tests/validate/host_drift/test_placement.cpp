// The threads' placement (validate/host_drift/placement.h): the
// core-to-core latency measurement, its classification and counts, the drift
// probes' record of it, and the host-drift watch's per-iteration record.
#include <catch2/catch.hpp>

#include <omp.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "calib/calibrate.h"
#include "engine/serving_loop.h"
#include "sim/errors.h"
#include "support/synthetic_profile.h"
#include "support/test_support.h"
#include "validate/host_drift/drift_probes.h"
#include "validate/host_drift/host_drift.h"
#include "validate/host_drift/placement.h"

using namespace servesim;

namespace {

DriftProbe probe_at(double decode_s, double before_ns, double after_ns) {
  DriftProbe p;
  p.decode_iteration_s = decode_s;
  p.gemm_flops_per_s = 1e11;
  p.layers = 2;
  p.context = 16;
  p.gemm_n = 64;
  p.core_latency_before_ns = before_ns;
  p.core_latency_after_ns = after_ns;
  return p;
}

class CountingExecutor final : public Executor {
 public:
  std::string name() const override { return "counting"; }
  void execute(const IterationPlan&, IterationResult& result) override { result.duration_s = 1e-3; }
};

}  // namespace

TEST_CASE("placement: core-to-core latency is measured between two threads, not with one", "[serial]") {
  CHECK(std::isnan(core_to_core_latency_ns(1)));
  if (omp_get_num_procs() < 2) return;  // two threads on one CPU time out: nothing to assert
  // A cache line crosses between cores in tens to hundreds of ns. A hop
  // slower than a millisecond gives up (NaN): on a machine busy with other
  // tests (ctest -j) one of the two threads may wait for a time slice, so
  // some tries may be NaN, but not all. A NaN try waits 10 ms, so the tries
  // span longer than another process's time slice on the other core.
  int measured = 0;
  for (int i = 0; i < 200 && measured < 50; ++i) {
    const double ns = core_to_core_latency_ns(2);
    if (std::isnan(ns)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    ++measured;
    INFO(ns);
    CHECK(ns > 1);
    CHECK(ns < 1e6);
  }
  CHECK(measured > 0);
}

TEST_CASE("placement: latencies classify as near, far or unknown") {
  CHECK(placement_of(40.0) == Placement::Near);
  CHECK(placement_of(kFarCoreLatencyNs + 1) == Placement::Far);
  CHECK(placement_of(std::nan("")) == Placement::Unknown);
  CHECK(placement_of(40.0, 60.0) == Placement::Near);
  CHECK(placement_of(200.0, 190.0) == Placement::Far);
  CHECK(placement_of(40.0, 200.0) == Placement::Unknown);  // moved during the probe
  CHECK(std::string(to_string(Placement::Far)) == "far");

  PlacementCounts c;
  for (Placement p : {Placement::Near, Placement::Near, Placement::Far, Placement::Unknown}) c.add(p);
  CHECK(c.total() == 4);
  CHECK(c.dominant() == Placement::Near);
  CHECK(c.share(Placement::Near) == 0.5);
  CHECK(c.share(Placement::Far) == 0.25);
  c.add(Placement::Far);
  CHECK(c.dominant() == Placement::Unknown);  // a tie
  CHECK(PlacementCounts().share(Placement::Near) == 0);
}

TEST_CASE("placement: the anchor probes keep their placement and the anchor is the dominant placement's median") {
  // Three probes near (about 9-10 ms), two far (6 ms), one moved mid-probe.
  const std::vector<DriftProbe> probes = {probe_at(0.0095, 45, 50), probe_at(0.0061, 200, 195),
                                           probe_at(0.0090, 40, 42),  probe_at(0.0062, 210, 190),
                                           probe_at(0.0100, 55, 48),  probe_at(0.0070, 50, 200)};
  const PlacementCounts c = placement_counts(probes);
  CHECK(c.near == 3);
  CHECK(c.far == 2);
  CHECK(c.unknown == 1);
  const std::vector<DriftProbe> kept = probes_in_dominant_placement(probes);
  REQUIRE(kept.size() == 3);
  CHECK(median_probe(kept).decode_iteration_s == 0.0095);
  // A tie keeps every probe.
  CHECK(probes_in_dominant_placement({probe_at(0.009, 40, 40), probe_at(0.006, 200, 200)}).size() == 2);

  // The latencies round-trip through JSON; a probe without them (an older
  // profile) reads as unknown; a malformed one is refused.
  const DriftProbe back = DriftProbe::from_json(probes[1].to_json(), "p.json");
  CHECK(back.core_latency_before_ns == 200);
  CHECK(back.placement() == Placement::Far);
  nlohmann::json older = probes[1].to_json();
  older.erase("core_latency_ns");
  CHECK(DriftProbe::from_json(older, "p.json").placement() == Placement::Unknown);
  nlohmann::json bad = probes[1].to_json();
  bad["core_latency_ns"]["before"] = "fast";
  CHECK_THROWS_AS(DriftProbe::from_json(bad, "p.json"), InputError);
}

TEST_CASE("placement: the host-drift watch records the threads before each iteration, outside its time",
          "[serial]") {
  CountingExecutor inner;
  const ModelSpec m = test::synthetic::tiny_model();
  const DeviceProfile profile = test::synthetic::synthetic_profile(m);
  Workload w;
  w.requests = {test::request(0, 0.0, 8, 30)};
  const SchedulerConfig config = test::scheduler_config(SchedulerPolicy::Chunked, 4, 64, 16, 100, 256, 0.0);
  auto watched_run = [&](HostDriftMode mode, int threads) {
    EngineSetup setup;
    setup.model = m;
    setup.threads = threads;
    HostDriftOptions options;
    options.mode = mode;
    auto watch = std::make_unique<HostDriftWatch>(options, setup, config, profile, nullptr,
                                                  std::function<void(const std::string&)>{});
    EngineRunOptions run;
    watch->attach(run);
    Scheduler scheduler(config);
    VirtualClock clock;
    LoopOptions loop;
    loop.observers = run.observers;
    const RunRecords records = run_serving_loop(scheduler, inner, clock, w, loop);
    for (const IterationRecord& it : records.iterations) CHECK(it.duration_s == 1e-3);  // outside the iteration
    return std::make_pair(std::move(watch), records.num_iterations);
  };
  const auto [off, off_iterations] = watched_run(HostDriftMode::Off, 2);
  CHECK(off->core_latency_ns().empty());  // off: nothing watched
  CHECK(off->report() == nlohmann::json{{"mode", "off"}});
  const auto [one, one_iterations] = watched_run(HostDriftMode::Report, 1);
  REQUIRE(int64_t(one->core_latency_ns().size()) == one_iterations);
  for (double ns : one->core_latency_ns()) CHECK(std::isnan(ns));  // one thread: nothing to measure against
  if (omp_get_num_procs() < 2) return;
  // Some may be NaN on a busy machine, not all: a process on the other core
  // can spoil every one of a run's few probes, so up to three runs.
  int measured = 0;
  for (int attempt = 0; attempt < 3 && measured == 0; ++attempt) {
    const auto [two, two_iterations] = watched_run(HostDriftMode::Report, 2);
    REQUIRE(int64_t(two->core_latency_ns().size()) == two_iterations);
    for (double ns : two->core_latency_ns()) measured += std::isfinite(ns);
  }
  CHECK(measured > 0);
}

TEST_CASE("placement: a two-thread calibration records each probe's placement and each placement's median",
          "[serial]") {
  if (omp_get_num_procs() < 2) return;
  CalibrationOptions o;
  o.model = test::small_model("test-placement-tiny", 64, 160, 2, 4, 2, 16, 500, 512, "float32");
  o.quick = true;
  o.threads = 2;
  o.max_batched_tokens = 64;
  o.max_num_seqs = 8;
  o.stream_array_bytes = 8 << 20;
  o.gemm_ceiling_size = 128;
  o.min_time_s = 0.001;
  const DeviceProfile p = calibrate(o, {}, host_drift_calibration_hooks(o, -1, {}));
  const nlohmann::json& a = p.metadata.at("anchor_probes");
  const auto placements = a.at("placement").get<std::vector<std::string>>();
  REQUIRE(placements.size() == a.at("decode_iteration_s").size());
  const auto decode = a.at("decode_iteration_s").get<std::vector<double>>();
  for (const char* name : {"near", "far"}) {
    INFO(name);
    std::vector<double> in_placement;
    for (size_t i = 0; i < placements.size(); ++i)
      if (placements[i] == name) in_placement.push_back(decode[i]);
    CHECK(a.at("placement_counts").at(name).get<size_t>() == in_placement.size());
    const bool has_median = a.contains("by_placement") && a["by_placement"].contains(name);
    CHECK(has_median == (in_placement.size() >= 2));
    if (has_median) {
      std::vector<DriftProbe> probes;
      for (double d : in_placement) {
        DriftProbe x;
        x.decode_iteration_s = d;
        x.gemm_flops_per_s = 1;
        probes.push_back(x);
      }
      CHECK(a["by_placement"][name].at("decode_iteration_s").get<double>() ==
            Approx(median_probe(probes).decode_iteration_s));
    }
  }
  // Quick mode times no placement ratios unless asked.
  CHECK(p.placement_ratios.is_null());
  CHECK(p.metadata.at("settings").at("placement_seconds") == 0.0);
  // The profile's drift probe is their median in the dominant placement.
  const std::optional<DriftProbe> probe = calibration_drift_probe(p, "p");
  REQUIRE(probe.has_value());
  CHECK(probe->decode_iteration_s > 0);
  CHECK(probe->layers == 2);
}

TEST_CASE("drift probes round-trip through the profile file, a malformed one is refused by name") {
  const ModelSpec m = test::synthetic::tiny_model();
  DeviceProfile p = test::synthetic::synthetic_profile(m);
  CHECK_FALSE(calibration_drift_probe(p, "test").has_value());  // none unless calibrate --host-drift
  DriftProbe a = probe_at(7e-3, 50, 60);
  a.gemm_flops_per_s = 3e11;
  p.anchor = a.to_json();
  const DeviceProfile back = DeviceProfile::from_json(p.to_json(), "test");
  const std::optional<DriftProbe> read = calibration_drift_probe(back, "test");
  REQUIRE(read.has_value());
  CHECK(read->decode_iteration_s == a.decode_iteration_s);
  CHECK(read->gemm_flops_per_s == a.gemm_flops_per_s);
  CHECK(read->layers == 2);
  CHECK(read->placement() == Placement::Near);
  p.anchor["decode_iteration_s"] = -1;
  CHECK_THROWS_WITH(calibration_drift_probe(p, "p.json"), Catch::Contains("p.json") && Catch::Contains("anchor"));

  DriftProbe b = a, c = a;
  b.decode_iteration_s = 11e-3;
  b.gemm_flops_per_s = 2e11;
  c.decode_iteration_s = 6e-3;
  c.gemm_flops_per_s = 3.5e11;
  const DriftProbe med = median_probe({a, b, c});
  CHECK(med.decode_iteration_s == 7e-3);
  CHECK(med.gemm_flops_per_s == 3e11);
}

