// The profile cost model on synthetic device profiles built from known
// closed forms: exact at grid points, log-log interpolation, the roofline rule
// outside the grid, the attention fits, the iteration sum, monotonicity,
// refusal of a mismatched profile, and an end-to-end simulation.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "support/synthetic_profile.h"
#include "sim/errors.h"
#include "sim/executor.h"
#include "sim/hardware_spec.h"
#include "sim/iteration_plan.h"
#include "sim/model_spec.h"
#include "engine/simulation.h"
#include "support/test_support.h"
#include "sim/workload.h"

using namespace servesim;
using servesim::test::input_error_of;

using namespace servesim::test::synthetic;

namespace {

bool rel_close(double a, double b, double tol) { return std::abs(a - b) <= tol * std::abs(b); }

}  // namespace

TEST_CASE("profile model: exact at the grid points of every table") {
  const ModelSpec m = tiny_model();
  const DeviceProfile p = synthetic_profile(m, 0.05);  // noisy attention: the fit is not exact there
  const ProfileModel model(p, m);
  for (size_t i = 0; i < p.gemm_qkv.x.size(); ++i) {
    CHECK(model.op_seconds(ProfileOp::GemmQkv, p.gemm_qkv.x[i]) == p.gemm_qkv.seconds[i]);
    CHECK(model.op_seconds(ProfileOp::GemmDown, p.gemm_down.x[i]) == p.gemm_down.seconds[i]);
    CHECK(model.op_seconds(ProfileOp::Elementwise, p.elementwise.x[i]) == p.elementwise.seconds[i]);
  }
  for (size_t i = 0; i < p.lm_head.x.size(); ++i) {
    CHECK(model.op_seconds(ProfileOp::LmHead, p.lm_head.x[i]) == p.lm_head.seconds[i]);
    CHECK(model.op_seconds(ProfileOp::Sampling, p.sampling.x[i]) == p.sampling.seconds[i]);
  }
  REQUIRE(model.prefill_fit().max_rel_residual > 1e-3);  // the noise is visible to the fit...
  for (size_t i = 0; i < p.prefill_attention.x.size(); ++i)
    for (size_t j = 0; j < p.prefill_attention.y.size(); ++j) {
      const double q = p.prefill_attention.x[i], c = p.prefill_attention.y[j] - kAttentionGridYOffset;
      // ...yet the prediction reproduces every measured point.
      CHECK(rel_close(model.prefill_attention_seconds(q, c), p.prefill_attention.seconds[i][j], 1e-12));
    }
  for (size_t i = 0; i < p.decode_attention.x.size(); ++i)
    for (size_t j = 0; j < p.decode_attention.y.size(); ++j) {
      const double b = p.decode_attention.x[i], y = p.decode_attention.y[j];
      CHECK(rel_close(model.decode_attention_seconds(b, b * y), p.decode_attention.seconds[i][j], 1e-12));
    }
}

TEST_CASE("profile model: log-log interpolation is exact for a power law between grid points") {
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m);
  auto power = [](double x) { return 3e-6 * std::pow(x, 0.7); };
  p.gemm_o.x = {1, 10, 100, 1000};
  p.gemm_o.seconds.clear();
  for (double x : p.gemm_o.x) p.gemm_o.seconds.push_back(power(x));
  const ProfileModel model(p, m);
  for (double x : {1.5, 3.0, 9.99, 50.0, 123.4, 777.0})
    CHECK(rel_close(model.op_seconds(ProfileOp::GemmO, x), power(x), 1e-12));
  // lm_head is a power law on its own grid.
  for (double s : {3.0, 5.0, 100.0, 200.0}) CHECK(rel_close(model.op_seconds(ProfileOp::LmHead, s), lm_head_s(s), 1e-12));

  // A straight line is not a power law: between 1024 and 2048 the log-log
  // segment lies below the chord of t against M but passes through its ends.
  const double mid = std::sqrt(1024.0 * 2048.0);
  const double expected = std::exp(0.5 * (std::log(gemm_s(1024)) + std::log(gemm_s(2048))));
  CHECK(rel_close(model.op_seconds(ProfileOp::GemmQkv, mid), expected, 1e-12));
}

TEST_CASE("profile model: a GEMM table timed at both edges of an algorithm bucket keeps its step") {
  // The full CUDA grid times each cuBLASLt bucket's bottom and top
  // (calib/calibration_grids.cpp): 256 and 257 sit in two buckets, run by
  // two algorithms, and the step between them stays between the integers.
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m);
  p.gemm_gate_up.x = {128, 256, 257, 320, 321, 384};
  p.gemm_gate_up.seconds = {60e-6, 98e-6, 130e-6, 140e-6, 120e-6, 150e-6};  // up at 257, down at 321
  const ProfileModel model(p, m);
  CHECK(model.op_seconds(ProfileOp::GemmGateUp, 256) == 98e-6);
  CHECK(model.op_seconds(ProfileOp::GemmGateUp, 257) == 130e-6);
  CHECK(model.op_seconds(ProfileOp::GemmGateUp, 321) == 120e-6);
  for (int t = 258; t < 320; ++t) {
    const double s = model.op_seconds(ProfileOp::GemmGateUp, t);
    CHECK(s > 130e-6);
    CHECK(s < 140e-6);
  }
  // A step down is kept too: 320 costs more than 321.
  CHECK(model.op_seconds(ProfileOp::GemmGateUp, 320) > model.op_seconds(ProfileOp::GemmGateUp, 321));
}

TEST_CASE("profile model: outside the grid the time follows the measured-ceiling roofline") {
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m);
  // Start the down projection's grid at 8 tokens to test below the grid too.
  p.gemm_down = sample(powers_of_two(8, 2048), gemm_s);
  const ProfileModel model(p, m);
  const double B = std::max(kCopy, kTriad), b = 4;  // fp32

  // Hand rooflines: GEMM [x, K] x [K, N].
  auto gemm_roof = [&](double x, double K, double N) {
    return std::max(2 * x * K * N / kFlops, b * (K * N + x * K + x * N) / B);
  };
  // qkv: K = 64, N = (4 + 2 * 2) * 16 = 128; down: K = 128, N = 64.
  for (double x : {1.0, 100.0, 5000.0, 1e5})
    CHECK(rel_close(model.roofline_seconds(ProfileOp::GemmQkv, x), gemm_roof(x, 64, 128), 1e-12));
  for (double x : {4096.0, 10000.0, 1e6}) {
    CHECK(rel_close(model.op_seconds(ProfileOp::GemmQkv, x),
                    gemm_s(2048) * gemm_roof(x, 64, 128) / gemm_roof(2048, 64, 128), 1e-12));
  }
  for (double x : {1.0, 3.0, 7.0})
    CHECK(rel_close(model.op_seconds(ProfileOp::GemmDown, x),
                    gemm_s(8) * gemm_roof(x, 128, 64) / gemm_roof(8, 128, 64), 1e-12));
  // By hand: down at 8 tokens moves 4 (8192 + 8 x 128 + 8 x 64) = 38,912 bytes
  // (1.56 us at 25 GB/s) against 131,072 FLOPs (1.31 us at 100 GFLOP/s), so
  // memory-bound; at 1 token 4 (8192 + 128 + 64) = 33,536 bytes. The weights
  // dominate, so the time drops only to 33,536 / 38,912 of the edge's.
  CHECK(rel_close(model.op_seconds(ProfileOp::GemmDown, 1), gemm_s(8) * 33536.0 / 38912.0, 1e-12));

  // lm_head [S, 64] x [64, 1000] with fp32 logits written.
  auto lm_roof = [&](double s) {
    return std::max(2 * s * 64 * 1000 / kFlops, (b * (64 * 1000 + s * 64) + 4 * s * 1000) / B);
  };
  for (double s : {512.0, 4096.0})
    CHECK(rel_close(model.op_seconds(ProfileOp::LmHead, s), lm_head_s(256) * lm_roof(s) / lm_roof(256), 1e-12));

  // Elementwise and sampling move bytes in proportion to their size: linear.
  CHECK(rel_close(model.op_seconds(ProfileOp::Elementwise, 8192), 4 * elementwise_s(2048), 1e-12));
  CHECK(rel_close(model.op_seconds(ProfileOp::Sampling, 1024), 4 * sampling_s(256), 1e-12));
  CHECK(model.op_seconds(ProfileOp::GemmQkv, 0) == 0);
}

TEST_CASE("profile model: attention fits recover known coefficients from noise-free grids") {
  const ModelSpec m = tiny_model();
  const ProfileModel model(synthetic_profile(m), m);
  const AttentionFit& pf = model.prefill_fit();
  CHECK(rel_close(pf.coefficients[0], kPa, 1e-6));
  CHECK(rel_close(pf.coefficients[1], kPb, 1e-6));
  CHECK(rel_close(pf.coefficients[2], kPc, 1e-6));
  CHECK(pf.max_rel_residual < 1e-9);
  CHECK(pf.rms_rel_residual <= pf.max_rel_residual);
  const AttentionFit& dc = model.decode_fit();
  CHECK(rel_close(dc.coefficients[0], kDa, 1e-6));
  CHECK(rel_close(dc.coefficients[1], kDb, 1e-6));
  CHECK(rel_close(dc.coefficients[2], kDc, 1e-6));
  CHECK(dc.max_rel_residual < 1e-9);

  // Off the grid, inside and outside it, the prediction is the closed form.
  for (auto [q, c] : {std::pair{3.0, 0.0}, {100.0, 50.0}, {700.0, 3000.0}, {4096.0, 100000.0}})
    CHECK(rel_close(model.prefill_attention_seconds(q, c), prefill_s(q, c), 1e-6));
  // A ragged decode batch: contexts (cached + 1) 10, 500 and 9000; the sum counts.
  CHECK(rel_close(model.decode_attention_seconds(3, 10 + 500 + 9000), decode_s(3, 9510), 1e-6));
  CHECK(rel_close(model.decode_attention_seconds(1000, 1000 * 20000.0), decode_s(1000, 2e7), 1e-6));

  // The fits and residuals are reported for summary.json.
  const nlohmann::json d = model.describe();
  CHECK(d["executor"] == "profile");
  CHECK(d["attention_fits"]["prefill"]["max_rel_residual"].get<double>() < 1e-9);
  CHECK(d["attention_fits"]["decode"]["coefficients"].size() == 3);
}

TEST_CASE("profile model: attention fit on a degenerate grid and with a zero coefficient") {
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m);
  // One query size only: pairs and kv_tokens are collinear with the intercept.
  p.prefill_attention.x = {64};
  p.prefill_attention.seconds = {p.prefill_attention.seconds[3]};
  // Decode with no fixed cost: the intercept must come out 0, not negative.
  for (size_t i = 0; i < p.decode_attention.x.size(); ++i)
    for (size_t j = 0; j < p.decode_attention.y.size(); ++j)
      p.decode_attention.seconds[i][j] -= kDa;
  const ProfileModel model(p, m);
  CHECK(model.prefill_fit().max_rel_residual < 1e-9);
  for (double v : model.prefill_fit().coefficients) CHECK(v >= 0);
  for (double y : p.prefill_attention.y) CHECK(rel_close(model.prefill_attention_seconds(64, y - 1), prefill_s(64, y - 1), 1e-9));
  CHECK(model.decode_fit().coefficients[0] == 0);
  CHECK(rel_close(model.decode_fit().coefficients[1], kDb, 1e-6));
  CHECK(rel_close(model.decode_fit().coefficients[2], kDc, 1e-6));
  // Predictions stay > 0 everywhere.
  CHECK(model.prefill_attention_seconds(1, 0) > 0);
  CHECK(model.decode_attention_seconds(1, 1) > 0);
}

TEST_CASE("profile model: an iteration is the hand sum of its tables") {
  const ModelSpec m = tiny_model();
  ProfileModel model(synthetic_profile(m), m);
  // 256 + 245 prefill tokens, 8 decodes and one speculative verification of
  // 3 tokens: T = 512 (a grid point), S = 1 + 8 + 1 = 10.
  IterationPlan plan;
  plan.add(seq(0, 256, 0, true, true));      // a whole prompt
  plan.add(seq(1, 245, 1024, true, false));  // a middle chunk: no sample
  const int32_t contexts[] = {5, 40, 99, 300, 1000, 2047, 3000, 5000};
  for (int i = 0; i < 8; ++i) plan.add(seq(2 + i, 1, contexts[i], false, true));
  plan.add(seq(10, 3, 700, false, true));
  REQUIRE(plan.num_tokens() == 512);
  REQUIRE(plan.num_sampling_sequences == 10);

  const double L = 2;
  double rows = 0, pairs = 0;
  for (int c : contexts) {
    rows += 1;
    pairs += c + 1;
  }
  rows += 3;
  pairs += 3 * 700 + 3 * 4 / 2;  // q c + q (q + 1) / 2
  const ProfileBreakdown br = model.breakdown(plan);
  CHECK(rel_close(br.gemm, L * 4 * gemm_s(512), 1e-12));
  CHECK(rel_close(br.elementwise, L * elementwise_s(512), 1e-12));
  CHECK(rel_close(br.prefill_attention, L * (prefill_s(256, 0) + prefill_s(245, 1024)), 1e-6));
  CHECK(rel_close(br.decode_attention, L * decode_s(rows, pairs), 1e-6));
  CHECK(rel_close(br.lm_head, lm_head_s(10) + sampling_s(10), 1e-12));
  CHECK(br.overhead == kOverhead);
  const double hand = L * (4 * gemm_s(512) + elementwise_s(512) + prefill_s(256, 0) + prefill_s(245, 1024) +
                           decode_s(rows, pairs)) +
                      lm_head_s(10) + sampling_s(10) + kOverhead;
  CHECK(rel_close(br.total(), hand, 1e-6));
  CHECK(model.seconds(plan) == br.total());

  // A pure prefill chunk that samples nothing has no LM head cost.
  IterationPlan chunk;
  chunk.add(seq(0, 128, 0, true, false));
  const ProfileBreakdown cb = model.breakdown(chunk);
  CHECK(cb.lm_head == 0);
  CHECK(cb.decode_attention == 0);
  CHECK(rel_close(cb.prefill_attention, L * prefill_s(128, 0), 1e-6));
}

TEST_CASE("profile model: iteration time is monotone in tokens and context") {
  const ModelSpec m = tiny_model();
  ProfileModel model(synthetic_profile(m), m);
  auto total = [&](const IterationPlan& plan) { return model.breakdown(plan).total(); };

  double last = 0;
  for (int32_t q = 1; q <= 6000; q += 37) {  // one prefill chunk, past the grid's 2048 tokens
    IterationPlan plan;
    plan.add(seq(0, q, 0, true, true));
    const double t = total(plan);
    CHECK(t >= last);
    last = t;
  }
  last = 0;
  for (int32_t c = 0; c <= 20000; c += 97) {  // a chunk after a growing cache
    IterationPlan plan;
    plan.add(seq(0, 64, c, true, true));
    const double t = total(plan);
    CHECK(t >= last);
    last = t;
  }
  last = 0;
  for (int32_t batch = 1; batch <= 400; batch += 3) {  // decode batch size, past the grid's 128
    IterationPlan plan;
    for (int32_t i = 0; i < batch; ++i) plan.add(seq(i, 1, 777, false, true));
    const double t = total(plan);
    CHECK(t >= last);
    last = t;
  }
  last = 0;
  for (int32_t c = 0; c <= 30000; c += 101) {  // decode context, past the grid's 4096
    IterationPlan plan;
    for (int32_t i = 0; i < 16; ++i) plan.add(seq(i, 1, c, false, true));
    const double t = total(plan);
    CHECK(t >= last);
    last = t;
  }
}

TEST_CASE("profile model: a profile for another model or a malformed table is refused") {
  const ModelSpec m = tiny_model();
  const DeviceProfile p = synthetic_profile(m);
  ModelSpec other = m;
  other.name = "wider";
  other.hidden_size = 128;
  other.vocab_size = 2000;
  const std::string msg = input_error_of([&] { ProfileModel(p, other, "my_profile.json"); });
  CHECK(msg.find("my_profile.json") != std::string::npos);
  CHECK(msg.find("hidden_size") != std::string::npos);
  CHECK(msg.find("vocab_size") != std::string::npos);
  CHECK(msg.find("intermediate_size") == std::string::npos);  // only the fields that differ

  DeviceProfile bad = p;
  bad.gemm_gate_up.seconds.pop_back();
  CHECK(input_error_of([&] { ProfileModel(bad, m, "x.json"); }).find("tables.gemm_gate_up") != std::string::npos);
  bad = p;
  bad.decode_attention.seconds[1][2] = 0;
  CHECK(input_error_of([&] { ProfileModel(bad, m, "x.json"); }).find("tables.decode_attention") !=
        std::string::npos);
  bad = p;
  bad.prefill_attention.y = {1, 17, 17, 1025, 4097};
  CHECK(input_error_of([&] { ProfileModel(bad, m, "x.json"); }).find("ascend") != std::string::npos);
  bad = p;
  bad.gemm_flops_per_s = 0;
  CHECK(input_error_of([&] { ProfileModel(bad, m, "x.json"); }).find("ceilings") != std::string::npos);
  bad = p;
  bad.dtype = "int4";
  CHECK(input_error_of([&] { ProfileModel(bad, m, "x.json"); }).find("dtype") != std::string::npos);
}

TEST_CASE("profile model: a profile read back from JSON predicts the same") {
  const ModelSpec m = tiny_model();
  const DeviceProfile p = synthetic_profile(m, 0.03);
  const DeviceProfile q = DeviceProfile::from_json(p.to_json(), "roundtrip.json");
  ProfileModel a(p, m), b(q, m, "roundtrip.json");
  IterationPlan plan;
  plan.add(seq(0, 300, 77, true, true));
  for (int i = 1; i < 20; ++i) plan.add(seq(i, 1, 100 * i, false, true));
  CHECK(a.breakdown(plan).total() == b.breakdown(plan).total());
}

TEST_CASE("profile model: a simulation with the profile model runs end to end and is deterministic") {
  const ModelSpec m = tiny_model();
  SimulationSetup setup;
  setup.model = m;
  setup.hardware = resolve_hardware("h200");  // not used: the KV capacity is given
  setup.scheduler.policy = SchedulerPolicy::Chunked;
  setup.scheduler.max_num_batched_tokens = 512;
  setup.scheduler.num_gpu_blocks = 2048;
  setup.scheduler.block_size = 16;
  setup.workload.arrival = ArrivalProcess::Poisson;
  setup.workload.rate = 20;
  setup.workload.num_requests = 60;
  setup.workload.prompt_len = "uniform:16:1500";
  setup.workload.output_len = "uniform:2:64";
  setup.workload.seed = 11;
  const Workload workload = make_workload(setup.workload);

  setup.cost.profile = synthetic_profile(m);
  auto run_once = [&] { return simulate_workload(setup, workload); };
  const SimulationOutput a = run_once();
  const SimulationOutput b = run_once();
  CHECK(a.summary.completed == 60);
  REQUIRE(a.records.iterations.size() == b.records.iterations.size());
  REQUIRE(!a.records.iterations.empty());
  for (size_t i = 0; i < a.records.iterations.size(); ++i) {
    CHECK(a.records.iterations[i].duration_s == b.records.iterations[i].duration_s);
    CHECK(a.records.iterations[i].duration_s > kOverhead);
  }
  for (size_t i = 0; i < a.records.requests.size(); ++i) {
    CHECK(a.records.requests[i].first_token_s == b.records.requests[i].first_token_s);
    CHECK(a.records.requests[i].finish_s == b.records.requests[i].finish_s);
  }
  CHECK(a.records.end_s == b.records.end_s);

  // The iteration times are the profile's, not the roofline's: one decode-free
  // first iteration of the first request's prompt costs what breakdown() says.
  const auto& first = a.records.iterations.front();
  IterationPlan plan;
  plan.add(seq(0, first.prefill_tokens, 0, true, first.sampled_sequences > 0));
  ProfileModel executor(synthetic_profile(m), m);
  if (first.prefill_sequences == 1 && first.decode_sequences == 0)
    CHECK(first.duration_s == executor.breakdown(plan).total());
}

TEST_CASE("profile model: the whole-model factor f(T) scales GEMMs and elementwise work, linear in log T") {
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m);
  ProfileModel plain(p, m);
  p.gemm_factor.x = {32, 512};
  p.gemm_factor.factor = {1.0, 1.2};
  ProfileModel in_situ(p, m);
  CHECK(in_situ.gemm_factor(1) == 1.0);
  CHECK(in_situ.gemm_factor(32) == Approx(1.0));
  CHECK(in_situ.gemm_factor(128) == Approx(1.1));  // halfway in log T between 32 and 512
  CHECK(in_situ.gemm_factor(4096) == Approx(1.2));  // the last point's beyond it
  p.gemm_factor.factor = {0.5, 1.2};
  CHECK(ProfileModel(p, m).gemm_factor(std::sqrt(32.0)) == Approx(0.75));  // from (1, 1) to (32, 0.5)

  IterationPlan plan;
  plan.add(seq(0, 128, 0, true, true));
  const ProfileBreakdown a = plain.breakdown(plan), b = in_situ.breakdown(plan);
  CHECK(b.gemm == Approx(1.1 * a.gemm));
  CHECK(b.elementwise == Approx(1.1 * a.elementwise));
  CHECK(b.prefill_attention == a.prefill_attention);
  CHECK(b.lm_head == a.lm_head);

  // Through the file, and refused when malformed.
  const DeviceProfile back = DeviceProfile::from_json(DeviceProfile(p).to_json(), "test");
  CHECK(back.gemm_factor.factor == p.gemm_factor.factor);
  nlohmann::json bad = p.to_json();
  bad["tables"]["gemm_in_situ"]["factor"] = {1.0};
  CHECK_THROWS_AS(DeviceProfile::from_json(bad, "test"), InputError);
}

TEST_CASE("profile model: the decode-step factor scales whole decode steps only, linear in log B") {
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m);
  ProfileModel plain(p, m);
  p.decode_step_factor.x = {1, 16};
  p.decode_step_factor.factor = {0.8, 1.0};
  ProfileModel stepped(p, m);
  CHECK(plain.decode_step_factor(4) == 1.0);  // no curve: 1
  CHECK(stepped.decode_step_factor(1) == Approx(0.8));
  CHECK(stepped.decode_step_factor(4) == Approx(0.9));  // halfway in log B between 1 and 16
  CHECK(stepped.decode_step_factor(16) == Approx(1.0));
  CHECK(stepped.decode_step_factor(200) == Approx(1.0));  // the nearest end's beyond the points

  // Four sequences decoding one token each: every part times g(4) = 0.9.
  IterationPlan step;
  for (int64_t i = 0; i < 4; ++i) step.add(seq(i, 1, 100 + int32_t(i), false, true));
  const ProfileBreakdown a = plain.breakdown(step), b = stepped.breakdown(step);
  CHECK(b.gemm == Approx(0.9 * a.gemm));
  CHECK(b.decode_attention == Approx(0.9 * a.decode_attention));
  CHECK(b.lm_head == Approx(0.9 * a.lm_head));
  CHECK(b.total() == Approx(0.9 * a.total()));

  // Not a plain decode step: a prefill beside the decodes, a verification
  // pass (several query tokens), a decode that does not sample.
  IterationPlan mixed = step;
  mixed.add(seq(9, 32, 0, true, true));
  CHECK(stepped.breakdown(mixed).total() == Approx(plain.breakdown(mixed).total()));
  IterationPlan verify;
  ScheduledSequence v = seq(1, 4, 100, false, true);
  v.num_sample_rows = 4;
  verify.add(v);
  CHECK(stepped.breakdown(verify).total() == Approx(plain.breakdown(verify).total()));
  IterationPlan silent;
  silent.add(seq(1, 1, 100, false, false));
  CHECK(stepped.breakdown(silent).total() == Approx(plain.breakdown(silent).total()));

  // Through the file, and refused when malformed.
  const DeviceProfile back = DeviceProfile::from_json(DeviceProfile(p).to_json(), "test");
  CHECK(back.decode_step_factor.x == p.decode_step_factor.x);
  CHECK(back.decode_step_factor.factor == p.decode_step_factor.factor);
  nlohmann::json bad = p.to_json();
  bad["tables"]["decode_in_situ"]["factor"] = {0.8, -1.0};
  CHECK_THROWS_AS(DeviceProfile::from_json(bad, "test"), InputError);
  bad = p.to_json();
  bad["tables"]["decode_in_situ"]["x"] = {16, 1};
  CHECK_THROWS_AS(DeviceProfile::from_json(bad, "test"), InputError);
  bad = p.to_json();
  bad["tables"].erase("decode_in_situ");  // an older profile: no curve, factor 1
  CHECK(DeviceProfile::from_json(bad, "test").decode_step_factor.x.empty());
}

TEST_CASE("profile model: a prefix-cache hit costs GEMMs for the q new tokens and attention for q over c + q",
          "[prefix]") {
  const ModelSpec m = tiny_model();
  ProfileModel model(synthetic_profile(m), m);
  const double L = 2;
  // 16 new tokens after 2000 cached (q << c, inside the calibrated grid).
  IterationPlan hit, fresh;
  hit.add(seq(0, 16, 2000, true, true));
  fresh.add(seq(0, 16, 0, true, true));
  const ProfileBreakdown h = model.breakdown(hit), f = model.breakdown(fresh);
  CHECK(h.gemm == f.gemm);
  CHECK(h.elementwise == f.elementwise);
  CHECK(h.lm_head == f.lm_head);
  CHECK(rel_close(h.prefill_attention, L * prefill_s(16, 2000), 1e-6));
  CHECK(h.prefill_attention > f.prefill_attention);
}
