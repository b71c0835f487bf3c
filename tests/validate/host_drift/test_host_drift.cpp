// The host-drift seam: its modes and options, and the stoppable clock its
// interleaved probes run under.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "sim/cost/profile_model.h"
#include "sim/errors.h"
#include "support/synthetic_profile.h"
#include "support/test_support.h"
#include "validate/host_drift/host_drift.h"
#include "validate/host_drift/stoppable_clock.h"

using namespace servesim;

TEST_CASE("host drift: off by default, modes by name, anything else refused naming the flag") {
  CHECK(HostDriftOptions{}.mode == HostDriftMode::Off);
  for (HostDriftMode m : {HostDriftMode::Off, HostDriftMode::Report, HostDriftMode::Interleave})
    CHECK(parse_host_drift_mode(to_string(m)) == m);
  CHECK(test::input_error_of([] { parse_host_drift_mode("track"); }).find("--host-drift") != std::string::npos);
  HostDriftOptions o;
  check_host_drift_options(o);  // the defaults pass
  o.interleave_interval_s = 61;
  CHECK(test::input_error_of([&] { check_host_drift_options(o); }).find("--interleave-interval 61") !=
        std::string::npos);
  o.interleave_interval_s = 0.1;
  o.interleave_prefill_interval_s = 0;  // no prefill timings: allowed
  check_host_drift_options(o);
}

TEST_CASE("host drift: a stopped clock leaves the work's time out, and counts the stops that did something") {
  StoppableWallClock clock;
  const double before = clock.now();
  CHECK(clock.stopped_while([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return true;
  }));
  CHECK(clock.now() - before < 0.03);
  CHECK(clock.stops() == 1);
  CHECK(clock.stopped_s() >= 0.03);
  CHECK_FALSE(clock.stopped_while([] { return false; }));  // nothing done: not counted
  CHECK(clock.stops() == 1);
  // Waiting for a time on the stopped clock waits the clock's own seconds.
  const double t = clock.now() + 0.02;
  clock.wait_until(t);
  CHECK(clock.now() >= t);
}

TEST_CASE("host drift: on cuda nothing is probed or corrected, and the report says why") {
  const ModelSpec m = test::synthetic::tiny_model();
  const DeviceProfile profile = test::synthetic::synthetic_profile(m);
  const ProfileModel model(profile, m);
  EngineSetup setup;
  setup.device = "cuda:0";  // no GPU needed: nothing runs
  setup.model = m;
  const SchedulerConfig config = test::scheduler_config(SchedulerPolicy::Chunked, 4, 64, 16, 100, 256, 0.0);
  for (HostDriftMode mode : {HostDriftMode::Report, HostDriftMode::Interleave}) {
    INFO(to_string(mode));
    HostDriftOptions options;
    options.mode = mode;
    HostDriftWatch watch(options, setup, config, profile, nullptr, {});
    EngineRunOptions run;
    watch.attach(run);
    CHECK(run.extra_kv_blocks == 0);  // no probes of its own
    CHECK_FALSE(run.make_clock);      // the plain wall clock
    const RunRecords no_run;
    watch.finish(no_run, model);
    CHECK(watch.timeline() == nullptr);
    const nlohmann::json r = watch.report();
    CHECK(r["mode"] == to_string(mode));
    CHECK(r["drift_probes"]["reason"] == "cuda");
    CHECK_FALSE(r["placement"]["watched"].get<bool>());
    CHECK_FALSE(r["refresh"]["refreshed"].get<bool>());
    CHECK(watch.clock_stopped().is_null());
    if (mode == HostDriftMode::Interleave) {
      REQUIRE(watch.warnings().size() == 1);
      CHECK(watch.warnings()[0].find("cuda") != std::string::npos);
    }
  }
  // Speculative runs are costed as calibrated: interleave corrects nothing.
  setup.device = "cpu";
  SchedulerConfig speculative = config;
  speculative.num_speculative_tokens = 2;
  HostDriftOptions options;
  options.mode = HostDriftMode::Interleave;
  HostDriftWatch watch(options, setup, speculative, profile, nullptr, {});
  EngineRunOptions run;
  watch.attach(run);
  CHECK(run.extra_kv_blocks == 0);
  const RunRecords no_run;
  watch.finish(no_run, model);
  CHECK(watch.timeline() == nullptr);
  CHECK(watch.report()["refresh"]["reason"].get<std::string>().find("speculative") != std::string::npos);
}

TEST_CASE("host drift: report on a profile without drift probes says how to measure them") {
  const ModelSpec m = test::synthetic::tiny_model();
  const DeviceProfile profile = test::synthetic::synthetic_profile(m);  // calibrated without --host-drift
  EngineSetup setup;
  setup.model = m;
  const SchedulerConfig config = test::scheduler_config(SchedulerPolicy::Chunked, 4, 64, 16, 100, 256, 0.0);
  HostDriftOptions options;
  options.mode = HostDriftMode::Report;
  HostDriftWatch watch(options, setup, config, profile, nullptr, {});
  watch.before_real_run();  // nothing to measure
  watch.after_real_run();
  const RunRecords no_run;
  watch.finish(no_run, ProfileModel(profile, m));
  const nlohmann::json probes = watch.report()["drift_probes"];
  CHECK_FALSE(probes["measured"].get<bool>());
  CHECK(probes["reason"].get<std::string>().find("--host-drift") != std::string::npos);
}
