// The whole-model refresh and the interleaved probes
// (validate/host_drift/whole_model_refresh.h): the refresh's shapes within a
// run's limits, what it times, the factors it sets from known timings (a
// fake executor taking a known multiple of the profile's prediction),
// samples taken in the profile's other placement, the drift over the run,
// the refusal of a shape it has no sample of; the probes between served
// iterations and the levels they set.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "calib/calibration_common.h"
#include "validate/host_drift/whole_model_refresh.h"
#include "validate/host_drift/placement_ratios.h"
#include "sim/cost/profile_model.h"
#include "support/synthetic_profile.h"
#include "sim/errors.h"
#include "sim/executor.h"

using namespace servesim;
using namespace servesim::test::synthetic;
using servesim::test::input_error_of;

namespace {

// The synthetic profile with in-situ curves that are not 1.
DeviceProfile profile_with_factors() {
  DeviceProfile p = synthetic_profile(tiny_model());
  p.gemm_factor.x = {32, 128};
  p.gemm_factor.factor = {1.1, 0.9};
  p.decode_step_factor.x = {1, 4};
  p.decode_step_factor.factor = {0.95, 1.05};
  return p;
}

RefreshSettings small_settings() {
  RefreshSettings s;
  s.prefill_tokens = {32, 128};
  s.decode_batches = {1, 4};
  s.cached = 63;
  s.block_size = 16;
  return s;
}

// Takes what `model` predicts for each plan, times `decode_scale` for
// decode steps and `prefill_scale` for prefills, times `placement_ratio`'s
// ratio when `far` (the tables' placement is near).
class KnownTimes final : public Executor {
 public:
  explicit KnownTimes(const ProfileModel& model) : model_(model) {}
  std::string name() const override { return "known times"; }
  void execute(const IterationPlan& plan, IterationResult& result) override {
    const double scale = plan.num_prefill_tokens > 0 ? prefill_scale : decode_scale;
    const double ratio = ratios ? ratios->ratio(plan, far ? Placement::Far : Placement::Near) : 1.0;
    result.duration_s = model_.breakdown(plan).total() * scale * ratio;
    ++executions;
    for (const ScheduledSequence& seq : plan.sequences) {
      request_ids.push_back(seq.request_id);
      for (int32_t b : seq.block_table) lowest_block = std::min(lowest_block, b);
    }
  }
  void on_request_finished(int64_t request_id) override { finished.push_back(request_id); }
  double decode_scale = 1, prefill_scale = 1;
  bool far = false;
  std::vector<int64_t> finished;
  std::vector<int64_t> request_ids;  // of every sequence executed
  int32_t lowest_block = std::numeric_limits<int32_t>::max();
  const PlacementRatios* ratios = nullptr;
  int executions = 0;

 private:
  const ProfileModel& model_;
};

// A refresher's placement reader that never measures (Unknown).
std::function<double()> executor_latency_free() { return {}; }

// One-way core-to-core latencies: near and far (calib/placement.h).
constexpr double kNearNs = 50, kFarNs = 200;

}  // namespace

TEST_CASE("whole-model refresh: the profile's shapes within the run's limits, the defaults without them") {
  DeviceProfile p = synthetic_profile(tiny_model());
  p.gemm_factor.x = {32, 128, 512};
  p.gemm_factor.factor = {1, 1, 1};
  p.decode_step_factor.x = {1, 2, 4, 8, 16, 32};
  p.decode_step_factor.factor = {1, 1, 1, 1, 1, 1};
  RefreshSettings s = refresh_settings_for(p, 8, 256, 4096);
  CHECK(s.prefill_tokens == std::vector<int64_t>{32, 128});
  CHECK(s.decode_batches == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(s.cached == 127);
  CHECK(s.block_size == p.block_size);
  CHECK(refresh_blocks(s) ==
        calibration::DecodeSteps::blocks(8, 127, s.warm_up + s.timed, s.block_size));

  // A profile from before the curves: the full calibration's shapes.
  const DeviceProfile bare = synthetic_profile(tiny_model());
  s = refresh_settings_for(bare, 256, 8192, 8192);
  CHECK(s.prefill_tokens == std::vector<int64_t>{32, 128, 512});
  CHECK(s.decode_batches == std::vector<int64_t>{1, 2, 4, 8, 16, 32});

  // A short model: the contexts (up to 3 cached / 2 + the steps) fit it.
  s = refresh_settings_for(bare, 256, 8192, 100);
  CHECK(s.prefill_tokens == std::vector<int64_t>{32});
  CHECK(s.cached == (100 - 1 - s.warm_up - s.timed) * 2 / 3);
  CHECK(3 * s.cached / 2 + s.warm_up + s.timed + 1 <= 100);

  // A small KV cache: only the shapes whose blocks fit, in its block size.
  s = refresh_settings_for(bare, 256, 8192, 8192);
  const int64_t blocks = calibration::DecodeSteps::blocks(4, s.cached, s.warm_up + s.timed, 32);
  const RefreshSettings fit = fit_to_kv_cache(s, blocks, 32);
  CHECK(fit.block_size == 32);
  CHECK(fit.decode_batches == std::vector<int64_t>{1, 2, 4});
  // A prefill needs its blocks and its lead decode steps' after them.
  const int64_t lead = calibration::DecodeSteps::blocks(1, s.cached, calibration::kPrefillLeadSteps, 32);
  REQUIRE(128 / 32 + lead <= blocks);
  REQUIRE(512 / 32 + lead > blocks);
  CHECK(fit.prefill_tokens == std::vector<int64_t>{32, 128});
  CHECK(refresh_blocks(fit) <= blocks);
  CHECK(fit_to_kv_cache(s, 1 + lead, 32).prefill_tokens == std::vector<int64_t>{32});
  CHECK(fit_to_kv_cache(s, lead, 32).prefill_tokens.empty());
}

TEST_CASE("whole-model refresh: times every shape each round and sets f and g from what it measured") {
  const DeviceProfile p = profile_with_factors();
  const ProfileModel model(p, p.model);
  KnownTimes executor(model);
  executor.decode_scale = 1.2;  // decode steps 20% slower than the profile says, prefills as it says
  const RefreshSettings s = small_settings();
  WholeModelRefresher refresher(s, [] { return kNearNs; });
  refresher.measure(executor, true);
  refresher.measure(executor, false);

  // Per round: 3 executions of each prefill (2 timed), each after its lead decode steps, and warm-up +
  // timed steps per batch size.
  CHECK(executor.executions ==
        2 * s.rounds * (3 * 2 * (1 + calibration::kPrefillLeadSteps) + (s.warm_up + s.timed) * 2));
  const std::vector<RefreshSample>& samples = refresher.samples();
  REQUIRE(samples.size() == size_t(2 * s.rounds * (2 * 2 + s.timed * 2)));
  int before = 0;
  for (const RefreshSample& x : samples) {
    CHECK(x.placement == Placement::Near);
    CHECK(x.seconds > 0);
    before += x.before ? 1 : 0;
  }
  CHECK(before == int(samples.size()) / 2);
  // Every request it ran was finished: the served decoder keeps no state of them.
  CHECK(std::count(executor.finished.begin(), executor.finished.end(), 1) == 2 * s.rounds * (3 * 2 + 2));
  CHECK(std::count(executor.finished.begin(), executor.finished.end(), 4) == 2 * s.rounds);

  const RefreshResult r = refresh_whole_model_factors(p, s, samples);
  REQUIRE(r.profile.gemm_factor.x == p.gemm_factor.x);
  for (size_t i = 0; i < p.gemm_factor.x.size(); ++i)
    CHECK(r.profile.gemm_factor.factor[i] == Approx(p.gemm_factor.factor[i]).epsilon(1e-9));
  REQUIRE(r.profile.decode_step_factor.x == p.decode_step_factor.x);
  for (size_t i = 0; i < p.decode_step_factor.x.size(); ++i)
    CHECK(r.profile.decode_step_factor.factor[i] == Approx(1.2 * p.decode_step_factor.factor[i]).epsilon(1e-9));
  // Only the factors change: the refreshed profile predicts a served decode step 1.2x.
  const ProfileModel refreshed(r.profile, p.model);
  calibration::DecodeSteps steps(4, 200, 1, 16);
  CHECK(refreshed.breakdown(steps.plan()).total() == Approx(1.2 * model.breakdown(steps.plan()).total()));
  CHECK(r.profile.iteration_overhead_s == p.iteration_overhead_s);

  CHECK(r.report["refreshed"].get<bool>());
  CHECK(r.report["samples"]["before"]["near"].get<int64_t>() == before);
  CHECK(r.report["calibration"]["decode_in_situ"]["factor"][0].get<double>() == 0.95);
  CHECK(r.report["run"]["decode_in_situ"]["factor"][0].get<double>() == Approx(1.2 * 0.95));
  CHECK(r.report["drift"]["decode"].get<double>() == Approx(1.0));
  CHECK(r.report["drift"]["largest"].get<double>() == Approx(0.0).margin(1e-9));
}

namespace {

// Near is the tables' placement; far runs 1-sequence decode steps 0.75x
// as long, 4 sequences 1.0x, prefills 1.02x (32 tokens) and 1.04x (128).
PlacementRatios near_far_ratios() {
  PlacementRatios r;
  r.reference = Placement::Near;
  r.other = Placement::Far;
  r.decode_batch = {1, 4};
  r.decode_ratio = {0.75, 1.0};
  r.prefill_tokens = {32, 128};
  r.prefill_ratio = {1.02, 1.04};
  r.context = 256;
  return r;
}

}  // namespace

TEST_CASE("whole-model refresh: timed in the other placement only, the factors describe it, the ratios turned round") {
  DeviceProfile p = profile_with_factors();
  const PlacementRatios ratios = near_far_ratios();
  p.placement_ratios = ratios.to_json();
  const ProfileModel model(p, p.model);
  KnownTimes executor(model);
  executor.ratios = &ratios;
  executor.far = true;  // every iteration runs far, as the ratios say it does
  const RefreshSettings s = small_settings();
  WholeModelRefresher refresher(s, [] { return kFarNs; });
  refresher.measure(executor, true);
  refresher.measure(executor, false);
  for (const RefreshSample& x : refresher.samples()) CHECK(x.placement == Placement::Far);

  const RefreshResult r = refresh_whole_model_factors(p, s, refresher.samples());
  CHECK(r.tables_placement == Placement::Far);
  const std::optional<PlacementRatios> turned = placement_ratios_of(r.profile, "refreshed");
  REQUIRE(turned);
  CHECK(turned->reference == Placement::Far);
  CHECK(turned->other == Placement::Near);
  CHECK(turned->decode_ratio.front() == Approx(1 / 0.75));
  // The refreshed tables predict the far timings; its ratios the near ones.
  const ProfileModel refreshed(r.profile, p.model);
  for (int64_t b : s.decode_batches) {
    calibration::DecodeSteps steps(b, 63, 1, 16);
    const double near = model.breakdown(steps.plan()).total();
    CHECK(refreshed.breakdown(steps.plan()).total() == Approx(near * ratios.ratio(steps.plan(), Placement::Far)));
  }
  for (int64_t t : s.prefill_tokens) {
    const calibration::OneSequencePlan prefill(1, t, 0, true, 16);
    const double near = model.breakdown(prefill.plan()).total();
    CHECK(refreshed.breakdown(prefill.plan()).total() ==
          Approx(near * ratios.ratio(prefill.plan(), Placement::Far)));
  }
  CHECK(r.report["tables_placement"] == "far");
  CHECK(r.report["samples"]["after"]["far"].get<int64_t>() == int64_t(refresher.samples().size() / 2));
}

TEST_CASE("whole-model refresh: timed in both placements, the ratios are measured afresh from the two") {
  DeviceProfile p = profile_with_factors();
  p.placement_ratios = nullptr;  // the calibration saw one placement
  const ProfileModel model(p, p.model);
  PlacementRatios truth = near_far_ratios();
  KnownTimes executor(model);
  executor.ratios = &truth;
  const RefreshSettings s = small_settings();
  bool far = false;
  WholeModelRefresher refresher(s, [&] { return far ? kFarNs : kNearNs; });
  refresher.measure(executor, true);  // near before the run
  far = executor.far = true;
  refresher.measure(executor, false);  // far after it

  const RefreshResult r = refresh_whole_model_factors(p, s, refresher.samples());
  CHECK(r.tables_placement == Placement::Near);  // no ratios, no anchor probes: near
  for (size_t i = 0; i < p.decode_step_factor.x.size(); ++i)
    CHECK(r.profile.decode_step_factor.factor[i] == Approx(p.decode_step_factor.factor[i]).epsilon(1e-9));
  const std::optional<PlacementRatios> fresh = placement_ratios_of(r.profile, "refreshed");
  REQUIRE(fresh);
  CHECK(fresh->reference == Placement::Near);
  CHECK(fresh->decode_ratio[0] == Approx(0.75));
  CHECK(fresh->decode_ratio[1] == Approx(1.0));
  CHECK(fresh->prefill_ratio[0] == Approx(1.02));
  CHECK(fresh->prefill_ratio[1] == Approx(1.04));
  // No shape was timed in one placement both before and after: no drift.
  CHECK(r.report["drift"]["largest"].is_null());
}

TEST_CASE("whole-model refresh: the drift is after over before, and the factors take the median of both") {
  const DeviceProfile p = profile_with_factors();
  const ProfileModel model(p, p.model);
  KnownTimes executor(model);
  const RefreshSettings s = small_settings();
  WholeModelRefresher refresher(s, [] { return kNearNs; });
  refresher.measure(executor, true);
  executor.decode_scale = 1.1;  // decode steps slowed down during the run, prefills did not
  refresher.measure(executor, false);

  const RefreshResult r = refresh_whole_model_factors(p, s, refresher.samples());
  CHECK(r.report["drift"]["decode"].get<double>() == Approx(1.1));
  CHECK(r.report["drift"]["prefill"].get<double>() == Approx(1.0));
  CHECK(r.report["drift"]["largest"].get<double>() == Approx(0.1));
  // As many samples at 1.0 as at 1.1: the median ratio is halfway.
  for (size_t i = 0; i < p.decode_step_factor.x.size(); ++i)
    CHECK(r.profile.decode_step_factor.factor[i] == Approx(1.05 * p.decode_step_factor.factor[i]));
}

TEST_CASE("whole-model refresh: a shape without a sample is refused by name, bad settings are refused") {
  const DeviceProfile p = profile_with_factors();
  const RefreshSettings s = small_settings();
  const std::string message = input_error_of([&] { refresh_whole_model_factors(p, s, {}); });
  CHECK(message.find("32-token prefill") != std::string::npos);
  std::vector<RefreshSample> prefills_only = {{true, 32, 1, 0, 1e-3, Placement::Near},
                                             {true, 128, 1, 0, 2e-3, Placement::Near}};
  CHECK(input_error_of([&] { refresh_whole_model_factors(p, s, prefills_only); }).find("decode step of 1 sequence") !=
        std::string::npos);

  const ProfileModel model(p, p.model);
  KnownTimes executor(model);
  RefreshSettings bad = s;
  bad.timed = 0;
  CHECK_THROWS_AS(WholeModelRefresher(bad, {}), std::invalid_argument);
}

TEST_CASE("interleaved probes: a decode probe's level is smoothed over its neighbours and interpolated in time") {
  const DeviceProfile p = profile_with_factors();
  const ProfileModel model(p, p.model);
  KnownTimes executor(model);
  const RefreshSettings s = small_settings();
  WholeModelRefresher refresher(s, executor_latency_free());
  const int steps = WholeModelRefresher::kProbeWarmUp + WholeModelRefresher::kProbeTimed;
  CHECK(refresher.probe_between(executor, 1.0, 1));
  CHECK(executor.executions == steps);
  executor.decode_scale = 1.2;  // the machine slows down
  CHECK(refresher.probe_between(executor, 2.0, 1));
  CHECK(refresher.probe_between(executor, 3.0, 1));
  REQUIRE(refresher.probes().size() == 3);
  CHECK(refresher.probes()[0].time_s == 1.0);

  // Raw levels 1.0, 1.2, 1.2 -> neighbours' medians 1.1, 1.2, 1.2, taken as measured.
  const DriftLevels levels = drift_levels(p, s, refresher.probes());
  CHECK(levels.prefill.empty());
  REQUIRE(levels.decode.size() == 3);
  CHECK(levels.decode[0].measured_over_predicted == Approx(1.0));
  CHECK(levels.decode[1].measured_over_predicted == Approx(1.2));
  CHECK(levels.decode[0].smoothed == Approx(1.1));
  CHECK(levels.decode[0].level == Approx(1.1));
  CHECK(levels.decode[2].level == Approx(1.2));
  CHECK(levels.at(false, 0.0) == Approx(1.1));  // before the first: the first's
  CHECK(levels.at(false, 1.5) == Approx(1.15));
  CHECK(levels.at(false, 9.0) == Approx(1.2));
  CHECK(levels.at(true, 1.5) == 1.0);  // no prefill probes: prefills unscaled
  CHECK(DriftLevels{}.at(false, 5.0) == 1.0);
}

TEST_CASE("interleaved probes: probes between iterations at an interval, of the served batch, on their own blocks") {
  const DeviceProfile p = profile_with_factors();
  const ProfileModel model(p, p.model);
  KnownTimes executor(model);
  RefreshSettings s = small_settings();
  REQUIRE(s.decode_batches == std::vector<int64_t>{1, 4});
  s.probe_first_block = 1000;  // past the scheduler's blocks
  WholeModelRefresher refresher(s, executor_latency_free());
  CHECK(refresher.probe_between(executor, 0.01, 0));  // the first at once; no decode served: 1 sequence
  CHECK(executor.lowest_block == 1000);
  REQUIRE_FALSE(executor.request_ids.empty());
  for (int64_t id : executor.request_ids) CHECK(id == WholeModelRefresher::kProbeRequestId);
  CHECK(executor.finished == std::vector<int64_t>{WholeModelRefresher::kProbeRequestId});
  CHECK_FALSE(refresher.probe_between(executor, 0.01 + s.between_probe_interval_s / 2, 5));  // too soon
  executor.decode_scale = 1.1;
  CHECK(refresher.probe_between(executor, 0.01 + s.between_probe_interval_s, 5));  // 5 served: 4
  REQUIRE(refresher.probes().size() == 2);
  CHECK(refresher.probes()[0].sequences == 1);
  CHECK(refresher.probes()[1].sequences == 4);
  CHECK(executor.request_ids.back() == WholeModelRefresher::kProbeRequestId + 3);
  CHECK(interleave_probe_blocks(s) == calibration::DecodeSteps::blocks(4, s.cached,
                                                                 WholeModelRefresher::kProbeWarmUp +
                                                                     WholeModelRefresher::kProbeTimed,
                                                                 s.block_size));
  // Each probe over the prediction of its own shape: 1.0 and 1.1, whatever the batch.
  const std::vector<DriftLevel> levels = drift_levels(p, s, refresher.probes()).decode;
  REQUIRE(levels.size() == 2);
  CHECK(levels[0].measured_over_predicted == Approx(1.0));
  CHECK(levels[1].measured_over_predicted == Approx(1.1));
}

TEST_CASE("interleaved probes: a prefill probe every prefill interval, its own level smoothed over its kind") {
  const DeviceProfile p = profile_with_factors();
  const ProfileModel model(p, p.model);
  KnownTimes executor(model);
  RefreshSettings s = small_settings();
  s.prefill_probe_tokens = 32;
  s.between_prefill_probe_interval_s = 0.5;
  s.probe_first_block = 1000;
  WholeModelRefresher refresher(s, executor_latency_free());
  // The first timing is a prefill (none before it), after its lead decode
  // steps, on the probes' blocks and ids; decode probes follow until the
  // prefill interval has passed again.
  CHECK(refresher.probe_between(executor, 0.0, 4));
  CHECK(executor.lowest_block == 1000);
  const int64_t id = WholeModelRefresher::kProbeRequestId;
  CHECK(executor.request_ids == std::vector<int64_t>{id + 1, id + 1, id});  // kPrefillLeadSteps = 2, then the prefill
  REQUIRE(refresher.probes().size() == 1);
  CHECK(refresher.probes()[0].prefill_tokens == 32);
  CHECK(refresher.probe_between(executor, 0.1, 4));
  CHECK(refresher.probes().back().prefill_tokens == 0);  // a decode probe
  CHECK_FALSE(refresher.probe_between(executor, 0.15, 4));
  CHECK(refresher.probe_between(executor, 0.2, 4));
  CHECK(refresher.probes().back().prefill_tokens == 0);
  // Prefills at 0.5 s intervals, run slower from the third on, one of them 2x.
  const std::vector<double> prefill_scales = {1.0, 1.2, 1.2, 2.0, 1.2};
  for (size_t k = 0; k < prefill_scales.size(); ++k) {
    executor.prefill_scale = prefill_scales[k];
    CHECK(refresher.probe_between(executor, 0.5 * double(k + 1), 4));
    CHECK(refresher.probes().back().prefill_tokens == 32);
  }
  CHECK(interleave_probe_blocks(s) >= calibration::prefill_blocks_with_lead(32, s.block_size,
                                                                      calibration::kPrefillLeadSteps, s.cached));
  const DriftLevels levels = drift_levels(p, s, refresher.probes());
  REQUIRE(levels.decode.size() == 2);
  REQUIRE(levels.prefill.size() == 6);
  CHECK(levels.prefill[0].measured_over_predicted == Approx(1.0));  // the first, at scale 1
  CHECK(levels.prefill[4].measured_over_predicted == Approx(2.0));
  // Not smoothed (kPrefillNeighbours = 0): each prefill sets the level at
  // its time, linear in between.
  CHECK(kPrefillNeighbours == 0);
  CHECK(levels.prefill[4].smoothed == Approx(2.0));
  CHECK(levels.at(true, 2.0) == Approx(2.0));
  CHECK(levels.at(true, 2.25) == Approx(1.6));
  CHECK(levels.at(true, 2.5) == Approx(1.2));
  for (const DriftLevel& l : levels.decode) CHECK(l.level == Approx(1.0));
  CHECK(levels.at(false, 2.5) == Approx(1.0));
  // No prefill length: decode probes only.
  s.prefill_probe_tokens = 0;
  WholeModelRefresher decode_only(s, executor_latency_free());
  CHECK(decode_only.probe_between(executor, 0.0, 4));
  CHECK(decode_only.probes()[0].prefill_tokens == 0);
}

TEST_CASE("time_prefills: each prefill after its lead decode steps, on the blocks after the prefill's") {
  const DeviceProfile p = profile_with_factors();
  const ProfileModel model(p, p.model);
  KnownTimes executor(model);
  const std::vector<double> seconds = calibration::time_prefills(executor, 32, 16, 1, 2, 2, 63);
  CHECK(seconds.size() == 2);
  const calibration::OneSequencePlan prefill(1, 32, 0, true, 16);
  for (double s : seconds) CHECK(s == Approx(model.breakdown(prefill.plan()).total()));
  CHECK(executor.request_ids == std::vector<int64_t>{2, 2, 1, 2, 2, 1, 2, 2, 1});
  CHECK(std::count(executor.finished.begin(), executor.finished.end(), 1) == 3);
  CHECK(std::count(executor.finished.begin(), executor.finished.end(), 2) == 3);
  // 2 blocks of the prefill, then the lead's: 63 cached + 2 steps + 1 in blocks of 16.
  CHECK(calibration::prefill_blocks_with_lead(32, 16, 2, 63) == 2 + 5);
  CHECK(calibration::prefill_blocks_with_lead(32, 16, 0, 63) == 2);
  // Without a lead: prefills only.
  KnownTimes plain(model);
  CHECK(calibration::time_prefills(plain, 32, 16, 1, 2, 0, 63).size() == 2);
  CHECK(plain.request_ids == std::vector<int64_t>{1, 1, 1});
}
