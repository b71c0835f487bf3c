// Validation: the recording observer, the replay re-timing, the error
// measures and report.json, and a tiny validation end to end (quick
// calibration, real run, both predictions), with and without host drift.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "calib/calibrate.h"
#include "engine/serving_loop.h"
#include "sim/clock.h"
#include "sim/cost/profile_model.h"
#include "sim/errors.h"
#include "sim/scheduler.h"
#include "sim/workload.h"
#include "support/test_support.h"
#include "validate/host_drift/host_drift.h"
#include "validate/quick_calibration.h"
#include "validate/replay.h"
#include "validate/report.h"
#include "validate/validation.h"

using namespace servesim;

namespace {

// A deterministic stand-in for a real executor: the duration grows with the
// batch's tokens and context, and (optionally) some decodes report EOS.
class FakeExecutor final : public Executor {
 public:
  explicit FakeExecutor(bool eos = false) : eos_(eos) {}
  std::string name() const override { return "fake"; }
  void execute(const IterationPlan& plan, IterationResult& result) override {
    double cached = 0;
    for (const ScheduledSequence& s : plan.sequences) cached += s.num_cached_tokens;
    result.duration_s = 1e-3 + 2e-5 * plan.num_tokens() + 3e-7 * cached + 1e-4 * plan.num_sampling_sequences;
    if (!eos_) return;
    result.finished.assign(plan.sequences.size(), 0);
    for (size_t k = 0; k < plan.sequences.size(); ++k) {
      const ScheduledSequence& s = plan.sequences[k];
      result.finished[k] = s.samples && !s.is_prefill && s.request_id % 4 == 1 && s.num_cached_tokens % 5 == 0;
    }
  }

 private:
  bool eos_;
};

struct Recorded {
  RunRecords records;
  std::vector<RecordedIteration> iterations;
};

Recorded record_virtual_run(const SchedulerConfig& config, const Workload& workload, bool eos) {
  Recorded out;
  Scheduler scheduler(config);
  FakeExecutor fake(eos);
  IterationRecorder recorder(out.iterations);
  VirtualClock clock;
  LoopOptions loop;
  loop.observers = {&recorder};
  out.records = run_serving_loop(scheduler, fake, clock, workload, loop);
  return out;
}

std::vector<double> measured_durations(const std::vector<RecordedIteration>& its) {
  std::vector<double> d;
  for (const RecordedIteration& it : its) d.push_back(it.measured_s);
  return d;
}

SchedulerConfig config_for(SchedulerPolicy policy, int64_t blocks, int32_t max_seqs = 8) {
  SchedulerConfig c;
  c.policy = policy;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = policy == SchedulerPolicy::Chunked ? 64 : 512;
  c.block_size = 4;
  c.num_gpu_blocks = blocks;
  c.max_model_len = 512;
  return c;
}

Workload synthetic(ArrivalProcess arrival, double rate, int64_t n, uint64_t seed, int64_t concurrency = 0) {
  WorkloadSpec w;
  w.arrival = arrival;
  w.rate = rate;
  w.concurrency = concurrency;
  w.num_requests = n;
  w.prompt_len = "uniform:4:90";
  w.output_len = "uniform:1:30";
  w.seed = seed;
  return make_workload(w);
}

void require_same_requests(const RunRecords& a, const RunRecords& b) {
  REQUIRE(a.requests.size() == b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const RequestRecord& x = a.requests[i];
    const RequestRecord& y = b.requests[i];
    INFO("request " << i);
    CHECK(x.arrival_s == y.arrival_s);
    CHECK(x.first_scheduled_s == y.first_scheduled_s);
    CHECK(x.first_token_s == y.first_token_s);
    CHECK(x.last_token_s == y.last_token_s);
    CHECK(x.finish_s == y.finish_s);
    CHECK(x.tokens_emitted == y.tokens_emitted);
    CHECK(x.emissions == y.emissions);
    CHECK(x.rejection == y.rejection);
  }
  CHECK(a.end_s == b.end_s);
}

void require_same_distribution(const Distribution& a, const Distribution& b) {
  CHECK(a.count == b.count);
  CHECK(a.mean == b.mean);
  CHECK(a.p50 == b.p50);
  CHECK(a.p90 == b.p90);
  CHECK(a.p99 == b.p99);
}

RecordedSequence seq(int64_t id, int32_t query, int32_t cached, bool prefill, bool samples) {
  RecordedSequence s;
  s.request_id = id;
  s.num_query_tokens = query;
  s.num_cached_tokens = cached;
  s.is_prefill = prefill;
  s.samples = samples;
  return s;
}

RecordedIteration iteration(std::vector<RecordedSequence> seqs, double measured) {
  RecordedIteration it;
  it.measured_s = measured;
  for (const RecordedSequence& s : seqs) {
    (s.is_prefill ? it.prefill_tokens : it.decode_tokens) += s.num_query_tokens;
    (s.is_prefill ? it.prefill_sequences : it.decode_sequences) += 1;
  }
  it.sequences = std::move(seqs);
  return it;
}

RequestRecord request(int64_t id, double arrival, int32_t prompt, int32_t output) {
  RequestRecord r;
  r.id = id;
  r.arrival_s = arrival;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.finish_s = 1;  // completed in the "measured" run
  return r;
}

}  // namespace

TEST_CASE("validate: replay with the measured durations reproduces a virtual-clock run exactly") {
  struct Scenario {
    const char* name;
    SchedulerConfig config;
    Workload workload;
    bool eos;
  };
  const std::vector<Scenario> scenarios = {
      // Sparse arrivals: idle gaps between bursts.
      {"chunked, poisson, idle gaps", config_for(SchedulerPolicy::Chunked, 400), synthetic(ArrivalProcess::Poisson, 20, 30, 1), false},
      {"chunked, heavy load", config_for(SchedulerPolicy::Chunked, 400), synthetic(ArrivalProcess::Poisson, 2000, 40, 2), false},
      // A small KV cache: preemptions and recomputation.
      {"continuous, preemption", config_for(SchedulerPolicy::Continuous, 40), synthetic(ArrivalProcess::Poisson, 5000, 30, 3), false},
      {"static", config_for(SchedulerPolicy::Static, 400, 4), synthetic(ArrivalProcess::Gamma, 300, 25, 4), false},
      {"closed loop", config_for(SchedulerPolicy::Chunked, 400), synthetic(ArrivalProcess::Closed, 0, 30, 5, 3), false},
      {"closed loop, preemption, EOS", config_for(SchedulerPolicy::Chunked, 40),
       synthetic(ArrivalProcess::Closed, 0, 30, 6, 6), true},
  };
  for (const Scenario& s : scenarios) {
    INFO(s.name);
    Recorded run = record_virtual_run(s.config, s.workload, s.eos);
    REQUIRE(run.iterations.size() == run.records.iterations.size());
    REQUIRE(run.iterations.size() > 10);
    const std::vector<double> durations = measured_durations(run.iterations);
    RunRecords replay = replay_timing(run.records, run.iterations, durations);
    require_same_requests(run.records, replay);
    for (size_t k = 0; k < replay.iterations.size(); ++k) {
      CHECK(replay.iterations[k].start_s == run.records.iterations[k].start_s);
      CHECK(replay.iterations[k].duration_s == run.records.iterations[k].duration_s);
    }
    const RunSummary a = summarize_run(run.records, {});
    const RunSummary b = summarize_run(replay, {});
    require_same_distribution(a.ttft_s, b.ttft_s);
    require_same_distribution(a.tpot_s, b.tpot_s);
    require_same_distribution(a.e2e_s, b.e2e_s);
    require_same_distribution(a.itl_s, b.itl_s);
    require_same_distribution(a.queueing_s, b.queueing_s);
    CHECK(a.completed == b.completed);
    CHECK(a.duration_s == b.duration_s);
  }
}

TEST_CASE("validate: the scenarios exercise preemption, EOS and idle gaps") {
  // Guards the test above against scenarios that stop covering what they name.
  Recorded pre = record_virtual_run(config_for(SchedulerPolicy::Continuous, 40),
                                    synthetic(ArrivalProcess::Poisson, 5000, 30, 3), false);
  CHECK(pre.records.preemptions > 0);
  Recorded eos = record_virtual_run(config_for(SchedulerPolicy::Chunked, 40),
                                    synthetic(ArrivalProcess::Closed, 0, 30, 6, 6), true);
  int64_t short_of_output = 0;
  for (const RequestRecord& r : eos.records.requests)
    short_of_output += r.completed() && r.tokens_emitted < r.output_tokens;
  CHECK(short_of_output > 0);
  Recorded idle = record_virtual_run(config_for(SchedulerPolicy::Chunked, 400),
                                     synthetic(ArrivalProcess::Poisson, 20, 30, 1), false);
  int64_t gaps = 0;
  for (size_t k = 1; k < idle.records.iterations.size(); ++k) {
    const IterationRecord& prev = idle.records.iterations[k - 1];
    gaps += idle.records.iterations[k].start_s > prev.start_s + prev.duration_s;
  }
  CHECK(gaps > 0);
}

// The real run's iteration records (real starts and durations) for
// hand-built replays.
void record_real_iterations(RunRecords& measured, const std::vector<RecordedIteration>& its,
                            const std::vector<double>& starts) {
  for (size_t k = 0; k < its.size(); ++k) {
    IterationRecord rec;
    rec.index = int64_t(k);
    rec.start_s = starts[k];
    rec.duration_s = its[k].measured_s;
    measured.iterations.push_back(rec);
  }
}

TEST_CASE("validate: replay keeps the real gaps and times each request from its arrival on the replay clock") {
  // Real run: request 0 (arrival 0) prefilled at 0 and decoded at 0.5;
  // the engine idles until request 1 arrives at 5 and is prefilled.
  RunRecords measured;
  measured.requests = {request(0, 0.0, 4, 2), request(1, 5.0, 4, 1)};
  const std::vector<RecordedIteration> its = {
      iteration({seq(0, 4, 0, true, true)}, 0.5),
      iteration({seq(0, 1, 4, false, true)}, 0.5),
      iteration({seq(1, 4, 0, true, true)}, 0.5),
  };
  record_real_iterations(measured, its, {0.0, 0.5, 5.0});
  SECTION("iterations costed at twice their time") {
    const std::vector<double> d = {1, 1, 1};
    RunRecords r = replay_timing(measured, its, d);
    CHECK(r.requests[0].first_scheduled_s == 0);
    CHECK(r.requests[0].first_token_s == 1);
    CHECK(r.requests[0].finish_s == 2);
    CHECK(request_tpot_s(r.requests[0]) == 1);
    // The real idle gap (1.0 .. 5.0) keeps its length: iteration 2 starts at 2 + 4.
    CHECK(r.iterations[2].start_s == 6);
    CHECK(r.requests[1].arrival_s == 6);  // real 5.0 is 4 s into the gap after the real end 1.0: replayed end 2 + 4
    CHECK(r.requests[1].first_token_s == 7);
    CHECK(r.requests[1].tokens_emitted == 1);
    const RunSummary s = summarize_run(r, {});
    CHECK(s.ttft_s.mean == Approx(1.0));  // each request: its own prefill's replayed cost
    CHECK(s.e2e_s.mean == Approx(1.5));
    CHECK(s.tpot_s.count == 1);
    CHECK(s.tpot_s.mean == Approx(1.0));
  }
  SECTION("a request's TTFT does not carry the cost of work that ended before it arrived") {
    const std::vector<double> cheap = {0.5, 0.5, 0.75}, dear = {3.0, 3.0, 0.75};
    const RunRecords a = replay_timing(measured, its, cheap), b = replay_timing(measured, its, dear);
    CHECK(a.requests[1].first_token_s - a.requests[1].arrival_s == Approx(0.75));
    CHECK(b.requests[1].first_token_s - b.requests[1].arrival_s == Approx(0.75));
    CHECK(b.requests[1].arrival_s - a.requests[1].arrival_s == Approx(5.0));  // the lag is the clock's
  }
  SECTION("the durations vector must match the iterations") {
    const std::vector<double> d = {1, 1};
    CHECK_THROWS(replay_timing(measured, its, d));
  }
  SECTION("the real iteration records are needed") {
    RunRecords without = measured;
    without.iterations.clear();
    const std::vector<double> d = {1, 1, 1};
    CHECK_THROWS(replay_timing(without, its, d));
  }
}

TEST_CASE("validate: replay charges a request that arrives mid-iteration the rest of that iteration, re-costed") {
  // Request 1 arrives at 0.25, halfway through iteration 0 (0 .. 0.5), waits
  // for it, and is prefilled in iteration 1 (0.5 .. 1.0): real TTFT 0.75.
  RunRecords measured;
  measured.requests = {request(0, 0.0, 4, 1), request(1, 0.25, 4, 1)};
  const std::vector<RecordedIteration> its = {
      iteration({seq(0, 4, 0, true, true)}, 0.5),
      iteration({seq(1, 4, 0, true, true)}, 0.5),
  };
  record_real_iterations(measured, its, {0.0, 0.5});
  const std::vector<double> d = {1.0, 2.0};  // iteration 0 at twice its time, 1 at four times
  const RunRecords r = replay_timing(measured, its, d);
  CHECK(r.requests[1].arrival_s == Approx(0.5));  // half of iteration 0, replayed
  CHECK(r.requests[1].first_token_s == Approx(3.0));
  // Rest of iteration 0 (0.25 -> 0.5) plus iteration 1 (0.5 -> 2.0).
  CHECK(r.requests[1].first_token_s - r.requests[1].arrival_s == Approx(0.5 + 2.0));
}

TEST_CASE("validate: closed-loop replay releases a request at its predecessor's replayed finish") {
  // One client: request 1 was released when request 0 finished with real
  // iteration 1 (0.5 .. 1.0), 0.1 s later (host time), and prefilled at 1.5.
  RunRecords measured;
  measured.requests = {request(0, 0.0, 4, 2), request(1, 1.1, 4, 1)};
  const std::vector<RecordedIteration> its = {
      iteration({seq(0, 4, 0, true, true)}, 0.5),
      iteration({seq(0, 1, 4, false, true)}, 0.5),
      iteration({seq(1, 4, 0, true, true)}, 1.0),
  };
  record_real_iterations(measured, its, {0.0, 0.5, 1.5});
  const std::vector<double> d = {0.25, 0.25, 0.5};
  const RunRecords r = replay_timing(measured, its, d);
  CHECK(r.requests[0].arrival_s == 0.0);
  CHECK(r.requests[0].finish_s == Approx(0.5));
  CHECK(r.requests[1].arrival_s == Approx(0.6));  // replayed finish of request 0 + the real 0.1
  CHECK(r.iterations[2].start_s == Approx(1.0));  // + the real gap of 0.5 after iteration 1
  CHECK(r.requests[1].first_token_s - r.requests[1].arrival_s == Approx(0.9));
}

TEST_CASE("validate: rebuilt plans carry the recorded sequences and block tables of the right length") {
  const RecordedIteration it = iteration({seq(3, 5, 0, true, false), seq(7, 1, 9, false, true)}, 1.0);
  IterationPlan plan;
  std::vector<int32_t> storage;
  rebuild_plan(it, 12, 4, plan, storage);
  CHECK(plan.index == 12);
  REQUIRE(plan.sequences.size() == 2);
  CHECK(plan.sequences[0].request_id == 3);
  CHECK(plan.sequences[0].block_table.size() == 2);  // 5 tokens in blocks of 4
  CHECK(plan.sequences[1].block_table.size() == 3);  // 10 tokens
  CHECK(plan.num_prefill_tokens == 5);
  CHECK(plan.num_decode_tokens == 1);
  CHECK(plan.num_sampling_sequences == 1);
  CHECK(it.kind() == IterationKind::Mixed);
  CHECK(iteration_kind(0, 3) == IterationKind::Decode);
  CHECK(iteration_kind(2, 0) == IterationKind::Prefill);
}

TEST_CASE("validate: iteration MAPE per class on hand-made numbers") {
  const std::vector<double> measured = {1.0, 2.0, 4.0, 1.0, 0.5};
  const std::vector<double> predicted = {1.1, 1.8, 5.0, 1.0, 0.4};
  const std::vector<IterationKind> kinds = {IterationKind::Decode, IterationKind::Prefill, IterationKind::Mixed,
                                            IterationKind::Decode, IterationKind::Decode};
  const IterationErrors e = iteration_errors(measured, predicted, kinds);
  // |errors|: 0.1, 0.1, 0.25, 0, 0.2
  CHECK(e.all.count == 5);
  CHECK(e.all.mape == Approx(0.65 / 5));
  CHECK(e.decode.count == 3);
  CHECK(e.decode.mape == Approx(0.3 / 3));
  CHECK(e.decode.bias == Approx((0.1 + 0 - 0.2) / 3));
  CHECK(e.prefill.mape == Approx(0.1));
  CHECK(e.prefill.bias == Approx(-0.1));
  CHECK(e.mixed.mape == Approx(0.25));
  CHECK(e.mixed.count == 1);

  const std::vector<IterationKind> decodes(5, IterationKind::Decode);
  const IterationErrors d = iteration_errors(measured, predicted, decodes);
  CHECK(d.prefill.count == 0);
  CHECK(std::isnan(d.prefill.mape));
  CHECK(std::isnan(d.mixed.mape));
  const std::vector<double> shorter = {1.0};
  CHECK_THROWS(iteration_errors(shorter, predicted, kinds));
}

TEST_CASE("validate: rel_error is predicted over measured minus one") {
  CHECK(rel_error(1.1, 1.0) == Approx(0.1));   // too slow: positive
  CHECK(rel_error(0.9, 1.0) == Approx(-0.1));  // too fast: negative
  CHECK(rel_error(2.0, 2.0) == 0.0);
  CHECK(rel_error(3.0, 1.5) == Approx(1.0));
  CHECK(std::isnan(rel_error(1.0, 0.0)));
  CHECK(parse_validation_mode("replay") == ValidationMode::Replay);
  CHECK(parse_validation_mode("predict") == ValidationMode::Predict);
  CHECK_THROWS_AS(parse_validation_mode("guess"), InputError);
}

namespace {

ModelSpec tiny_spec() {
  return test::small_model("test-validate", 64, 128, 2, 4, 2, 16, 256, 256, "float32");
}

void require_report_keys(const nlohmann::json& r, const char* mode) {
  CHECK(r.at("mode") == mode);
  for (const char* k : {"all", "decode", "prefill", "mixed"}) {
    INFO(k);
    CHECK(r.at("iteration_mape").contains(k));
    CHECK(r.at("iteration_mape").at("counts").contains(k));
  }
  REQUIRE(r.at("iteration_mape").at("all").is_number());
  for (const char* metric : {"ttft_s", "tpot_s", "e2e_s"}) {
    for (const char* part : {"measured", "predicted", "rel_error"}) {
      for (const char* stat : {"mean", "p50", "p90", "p99"}) {
        INFO(metric << "." << part << "." << stat);
        REQUIRE(r.at(metric).at(part).at(stat).is_number());
        CHECK(std::isfinite(r.at(metric).at(part).at(stat).get<double>()));
      }
    }
    const double m = r.at(metric).at("measured").at("p50").get<double>();
    const double p = r.at(metric).at("predicted").at("p50").get<double>();
    CHECK(r.at(metric).at("rel_error").at("p50").get<double>() == Approx(p / m - 1).margin(1e-12));
  }
  CHECK(r.contains("profile"));
  CHECK(r.contains("config"));
  CHECK(r.at("measured").contains("requests_per_s"));
  CHECK(r.at("measured").contains("duration_s"));
  CHECK(r.at("measured").contains("completed"));
}

}  // namespace

namespace {

EngineSetup tiny_setup() {
  EngineSetup setup;
  setup.model = tiny_spec();
  setup.threads = 1;
  setup.kv_cache_bytes = 4.0 * (1 << 20);
  setup.scheduler.block_size = 16;
  setup.workload.arrival = ArrivalProcess::Poisson;
  setup.workload.rate = 400;
  setup.workload.num_requests = 8;
  setup.workload.prompt_len = "uniform:8:64";
  setup.workload.output_len = "uniform:4:16";
  setup.workload.seed = 3;
  setup.decoding.prompt_seed = 3;
  setup.decoding.sampling.seed = 3;
  return setup;
}

// A quick calibration of tiny_setup()'s model with the drift probes of
// calibrate --host-drift, made once.
const DeviceProfile& tiny_profile() {
  static std::optional<DeviceProfile> p;
  if (!p) {
    const EngineSetup setup = tiny_setup();
    CalibrationOptions calibration = quick_calibration_options(setup, make_workload(setup.workload));
    // Small ceilings keep the test quick; the tables are what validation uses.
    calibration.stream_array_bytes = 16 << 20;
    calibration.gemm_ceiling_size = 256;
    p = calibrate(calibration, {}, host_drift_calibration_hooks(calibration, -1, {}));
  }
  return *p;
}

}  // namespace

namespace {

// A tiny model end to end, without host drift (the default).
void check_end_to_end(const EngineSetup& setup, const Workload& workload, const DeviceProfile& profile) {
  const CalibrationOptions calibration = quick_calibration_options(setup, workload);
  CHECK(calibration.quick);
  CHECK(calibration.model.hidden_size == 64);
  CHECK(calibration.threads == 1);
  CHECK(calibration.block_size == 16);
  CHECK(calibration.max_batched_tokens == 2048);  // the chunked scheduler's budget
  CHECK(calibration.max_context <= 80);           // the longest request: 64 + 16 tokens
  const ValidationResult v = run_validation(setup, workload, profile, "quick calibration");

  REQUIRE(v.measured.summary.completed == 8);
  REQUIRE(v.iterations.size() == size_t(v.measured.summary.iterations));
  REQUIRE(v.predicted_iteration_s.size() == v.iterations.size());
  for (size_t k = 0; k < v.iterations.size(); ++k) {
    CHECK(v.iterations[k].measured_s > 0);
    CHECK(v.predicted_iteration_s[k] > 0);
    CHECK(std::isfinite(v.predicted_iteration_s[k]));
  }
  // Each predicted cost is the profile model's for the recorded plan.
  const ProfileModel model(profile, setup.model);
  CHECK(v.predicted_iteration_s == cost_recorded(v.iterations, model, 16));
  CHECK(v.iteration.all.count == int64_t(v.iterations.size()));
  CHECK(v.iteration.decode.count + v.iteration.prefill.count + v.iteration.mixed.count == v.iteration.all.count);
  CHECK(std::isfinite(v.iteration.all.mape));
  // The run's own noise, and the MAPE floor it sets.
  REQUIRE(v.iteration_noise.size() == v.iterations.size());
  double floor_sum = 0;
  for (double n : v.iteration_noise) floor_sum += std::abs(1 / n - 1);
  CHECK(v.noise_floor == Approx(floor_sum / double(v.iteration_noise.size())));
  CHECK(validation_report_json(v, ValidationMode::Replay)["iteration_mape"]["floor"].get<double>() == v.noise_floor);
  CHECK(v.replay_summary.completed == 8);
  CHECK(v.predict_summary.completed == 8);
  // Replay keeps the real run's iterations; the tokens each request got match.
  CHECK(v.replay.iterations.size() == v.iterations.size());
  for (size_t i = 0; i < 8; ++i) {
    CHECK(v.replay.requests[i].tokens_emitted == v.measured.records.requests[i].tokens_emitted);
    CHECK(v.predict.requests[i].tokens_emitted == v.measured.records.requests[i].tokens_emitted);
  }

  // No host-drift machinery by default: nothing probed, nothing watched.
  CHECK(v.host_drift == nlohmann::json{{"mode", "off"}});
  CHECK(v.core_latency_ns.empty());
  CHECK(v.cost_model["executor"] == "profile");
  CHECK(v.cost_model["profile"] == "quick calibration");
  CHECK_FALSE(v.config.contains("clock_stopped"));

  require_report_keys(validation_report_json(v, ValidationMode::Replay), "replay");
  require_report_keys(validation_report_json(v, ValidationMode::Predict), "predict");
  CHECK(validation_report_json(v, ValidationMode::Predict)["host_drift"]["mode"] == "off");

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("servesim_test_validate_" + std::to_string(getpid()));
  fs::remove_all(dir);
  write_validation_outputs(dir.string(), v, ValidationMode::Replay);
  for (const char* f : {"report.json", "report_replay.json", "report_predict.json", "iterations.csv", "requests.csv",
                        "measured/summary.json", "measured/requests.csv", "measured/iterations.csv",
                        "predicted/summary.json", "predicted/requests.csv", "predicted/iterations.csv",
                        "replayed/summary.json"}) {
    INFO(f);
    CHECK(fs::is_regular_file(dir / f));
  }
  const std::string table = format_validation_table(v, ValidationMode::Predict, "title");
  CHECK(table.find("TTFT") != std::string::npos);
  CHECK(table.find("replay mode") != std::string::npos);
  CHECK(table.find("device state") == std::string::npos);  // nothing of host drift
  fs::remove_all(dir);

  // Predict over jittered draws: the medians over the draws are predicted,
  // inside the band the report gives, beside the one simulation without
  // jitter; the noise is the run's own unless a sigma is given.
  ValidationOptions draws;
  draws.predict_draws = 9;
  const ValidationResult dv = run_validation(setup, workload, profile, "quick calibration", {}, draws);
  REQUIRE(dv.predict_bands);
  const LatencyBands& bands = *dv.predict_bands;
  CHECK(bands.ttft_s.draws == 9);
  CHECK(dv.predict_jitter["kind"] == "resampled");
  CHECK(dv.predict_jitter["count"].get<size_t>() == dv.iterations.size());
  for (const DrawBand* band : {&bands.ttft_s, &bands.tpot_s, &bands.e2e_s}) {
    CHECK(band->p10.p50 <= band->median.p50);
    CHECK(band->median.p50 <= band->p90.p50);
    CHECK(band->p10.p90 <= band->p90.p90);
  }
  CHECK(bands.ttft_s.p10.mean < bands.ttft_s.p90.mean);  // the draws differ
  CHECK(dv.predict_summary.ttft_s.p90 == bands.ttft_s.median.p90);
  CHECK(dv.predict_summary.tpot_s.p50 == bands.tpot_s.median.p50);
  CHECK(dv.predict_single_summary.completed == 8);
  const nlohmann::json dj = validation_report_json(dv, ValidationMode::Predict);
  CHECK(dj["predict_draws"]["draws"] == 9);
  CHECK(dj["ttft_s"]["draws"]["p90"]["p90"].get<double>() == bands.ttft_s.p90.p90);
  CHECK(dj["tpot_s"]["single_simulation"]["rel_error"]["p50"].get<double>() ==
        Approx(dv.predict_single_summary.tpot_s.p50 / dv.measured.summary.tpot_s.p50 - 1));
  CHECK_FALSE(validation_report_json(dv, ValidationMode::Replay).contains("predict_draws"));
  CHECK(format_validation_table(dv, ValidationMode::Predict, "t").find("9 jittered simulations") !=
        std::string::npos);
  draws.predict_jitter_sigma = 0.03;
  const ValidationResult lv = run_validation(setup, workload, profile, "quick calibration", {}, draws);
  CHECK(lv.predict_jitter["kind"] == "lognormal");
  // Bad settings are refused before anything is served.
  ValidationOptions bad;
  bad.predict_draws = 0;
  CHECK(test::input_error_of([&] { run_validation(setup, workload, profile, "p", {}, bad); })
            .find("--predict-draws 0") != std::string::npos);
  bad.predict_draws = 1;
  bad.predict_jitter_sigma = 0.05;
  CHECK(test::input_error_of([&] { run_validation(setup, workload, profile, "p", {}, bad); })
            .find("--predict-draws N > 1") != std::string::npos);
  bad.predict_draws = 5;
  bad.host_drift.interleave_interval_s = 0;
  CHECK(test::input_error_of([&] { run_validation(setup, workload, profile, "p", {}, bad); })
            .find("--interleave-interval 0") != std::string::npos);
  bad.host_drift.interleave_interval_s = 0.5;
  bad.host_drift.interleave_prefill_interval_s = 0.001;
  CHECK(test::input_error_of([&] { run_validation(setup, workload, profile, "p", {}, bad); })
            .find("--interleave-prefill-interval 0.001") != std::string::npos);
  bad.host_drift.interleave_prefill_interval_s = 0.5;
  bad.predict_jitter_sigma = -1;
  CHECK(test::input_error_of([&] { run_validation(setup, workload, profile, "p", {}, bad); }).find("sigma") !=
        std::string::npos);

  // A profile of another model shape is refused before anything is served.
  EngineSetup other = setup;
  other.model.intermediate_size = 96;
  CHECK_THROWS_AS(run_validation(other, workload, profile, "p.json"), InputError);
}

// --host-drift report probes the device around the run and changes no prediction.
void check_host_drift_report(const EngineSetup& setup, const Workload& workload, const DeviceProfile& profile) {
  ValidationOptions options;
  options.host_drift.mode = HostDriftMode::Report;
  const ValidationResult v = run_validation(setup, workload, profile, "quick calibration", {}, options);
  REQUIRE(v.measured.summary.completed == 8);
  const nlohmann::json& h = v.host_drift;
  CHECK(h["mode"] == "report");
  REQUIRE(h["drift_probes"]["measured"].get<bool>());
  const nlohmann::json& probe = h["drift_probes"]["profiles"]["profile"];
  for (const char* moment : {"calibration", "before", "after", "run"}) {
    INFO(moment);
    CHECK(probe[moment]["decode_iteration_s"].get<double>() > 0);
    CHECK(probe[moment]["gemm_flops_per_s"].get<double>() > 0);
  }
  // One thread: no second core to measure the placement against.
  CHECK_FALSE(h["placement"]["watched"].get<bool>());
  CHECK(h["placement"]["reason"].get<std::string>().find("one thread") != std::string::npos);
  CHECK_FALSE(h["refresh"]["refreshed"].get<bool>());
  REQUIRE(v.core_latency_ns.size() == v.iterations.size());  // watched, NaN with one thread
  // The predictions are the profile's, as without host drift.
  CHECK(v.predicted_iteration_s == cost_recorded(v.iterations, ProfileModel(profile, setup.model), 16));
  CHECK(format_validation_table(v, ValidationMode::Predict, "t").find("device state (profile)") !=
        std::string::npos);
}

// --host-drift interleave re-times the profile around the run and follows it in between.
void check_host_drift_interleave(const EngineSetup& setup, const Workload& workload, const DeviceProfile& profile) {
  ValidationOptions interleave;
  interleave.host_drift.mode = HostDriftMode::Interleave;
  const ValidationResult il = run_validation(setup, workload, profile, "quick calibration", {}, interleave);
  CHECK(il.measured.summary.completed == int64_t(workload.requests.size()));
  const nlohmann::json& r = il.host_drift["refresh"];
  REQUIRE(r["refreshed"].get<bool>());
  // The factors timed again around the real run, on the profile's shapes
  // within the run's limits, and the report says how.
  CHECK(r["settings"]["decode_batches"] == nlohmann::json(profile.decode_step_factor.x));
  CHECK(r["run"]["decode_in_situ"]["x"] == nlohmann::json(profile.decode_step_factor.x));
  for (const nlohmann::json& f : r["run"]["decode_in_situ"]["factor"]) CHECK(f.get<double>() > 0);
  CHECK(r["drift"]["largest"].get<double>() >= 0);
  CHECK(r["samples"]["before"]["unknown"].get<int64_t>() > 0);  // one thread: no placement
  // Timings between served iterations, the clock stopped for them (the
  // first at the first iteration's end, a prefill: none before it).
  const nlohmann::json& probes = r["interleaved"]["probes"];
  const nlohmann::json& prefill_probes = r["interleaved"]["prefill_probes"];
  CHECK(r["interleaved"]["levelled"] == nlohmann::json::array({"decode", "prefill and mixed"}));
  REQUIRE(prefill_probes.size() >= 1);
  const nlohmann::json& stopped = il.config.at("clock_stopped");
  CHECK(stopped["times"].get<int64_t>() == int64_t(probes.size() + prefill_probes.size()));
  CHECK(stopped["seconds"].get<double>() > 0);
  for (const nlohmann::json& p : prefill_probes) {
    CHECK(p["prefill_tokens"].get<int64_t>() > 0);
    CHECK(p["level"].get<double>() == Approx(p["smoothed"].get<double>()));
  }
  for (const nlohmann::json& p : probes) {
    CHECK(p["seconds"].get<double>() > 0);
    CHECK(p["level"].get<double>() == Approx(p["smoothed"].get<double>()));
  }
  CHECK(validation_report_json(il, ValidationMode::Replay)["config"]["clock_stopped"]["times"] == stopped["times"]);
  CHECK(format_validation_table(il, ValidationMode::Predict, "t").find("whole-model factors re-timed") !=
        std::string::npos);
  // The predictions follow the timeline: not the calibrated costs, all positive.
  REQUIRE(il.predicted_iteration_s.size() == il.iterations.size());
  for (double x : il.predicted_iteration_s) CHECK(x > 0);
  CHECK(il.predicted_iteration_s != cost_recorded(il.iterations, ProfileModel(profile, setup.model), 16));
}

}  // namespace

// One test case, so that its sections share one quick calibration (with the
// drift probes of calibrate --host-drift, which a run without host drift
// ignores).
TEST_CASE("validate: a tiny model end to end with a quick calibration, without and with host drift") {
  const EngineSetup setup = tiny_setup();
  const Workload workload = make_workload(setup.workload);
  const DeviceProfile& profile = tiny_profile();
  REQUIRE_FALSE(profile.anchor.is_null());  // calibrate --host-drift measured the probes
  SECTION("off (the default)") { check_end_to_end(setup, workload, profile); }
  SECTION("--host-drift report") { check_host_drift_report(setup, workload, profile); }
  SECTION("--host-drift interleave") { check_host_drift_interleave(setup, workload, profile); }
}

TEST_CASE("validate: a quick calibration on cuda keeps the device and times at most 16384 batched tokens") {
  EngineSetup setup;
  setup.device = "cuda:0";
  setup.model = resolve_model("llama-3.1-8b");  // max_model_len 131072
  setup.scheduler.policy = SchedulerPolicy::Continuous;  // without chunking: a budget of max_model_len
  setup.workload.num_requests = 4;
  const Workload workload = make_workload(setup.workload);
  REQUIRE(engine_scheduler_config(setup).max_num_batched_tokens > kCudaMaxBatchedTokens);
  const CalibrationOptions o = quick_calibration_options(setup, workload);
  CHECK(o.device == "cuda:0");
  CHECK(o.quick);
  CHECK(o.max_batched_tokens == kCudaMaxBatchedTokens);
  const CalibrationGrids g = calibration_grids(o);  // accepted
  CHECK(g.tokens.back() == kCudaMaxBatchedTokens);
  CHECK(g.decode_batch.back() == engine_scheduler_config(setup).max_num_seqs);

  // The CPU keeps the whole budget.
  setup.device = "cpu";
  CHECK(quick_calibration_options(setup, workload).max_batched_tokens ==
        engine_scheduler_config(setup).max_num_batched_tokens);
}
