// The whole-model timings of the CPU calibration (calib/cpu_calibration.h):
// what ties the kernel tables to what an iteration really costs.
#include <algorithm>

#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "calib/cpu_calibration.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/host_weights.h"

namespace servesim::cpu_calibration {
namespace {

using calibration::ceil_div;

// Full mode times steps 5-8 of each run of decode steps: the first steps
// after a prefill run slower than the steady ones that fill a served
// request's output (docs/calibration.md).
constexpr int kFullDecodeStepWarmUp = 4;
constexpr int kFullDecodeStepsTimed = 4;
// The 1-token decode timed at every moment: untimed, then timed executions.
constexpr int kDecodeWarmUp = 3;
constexpr int kDecodeTimedQuick = 10, kDecodeTimedFull = 20;
// Its request id: apart from the ids the prefill and step timings use.
constexpr int64_t kDecodeRequestId = 1000;
// Full mode times the whole-model prefills and decode steps at every
// kInSituEvery-th moment (0, 2, ..., 12 of the 13): 7 medians per point
// still span the calibration, at about half the time (a moment's prefills
// and steps take 3-4 s of small-110m on a 2-core VM).
constexpr size_t kInSituEvery = 2;

int repetitions_of(const CalibrationOptions& o) { return o.repetitions > 0 ? o.repetitions : 5; }

// The decode steps' context: around 128 tokens, within the calibration's.
int64_t step_cached_of(const CalibrationOptions& o) { return std::min<int64_t>(128, max_context_of(o)) - 1; }

// The decode-step factor's batch sizes. 3 among them: the GEMM benchmarks
// cost M = 3 close to M = 4, served steps of 3 sequences do not follow them
// as far, and g(B), linear between its batch sizes, corrects the tables only
// where it was measured (docs/calibration.md#why-quick-times-every-m-to-32).
std::vector<int64_t> step_batches_of(const CalibrationOptions& o) {
  std::vector<int64_t> v;
  for (int64_t b : {1, 2, 3, 4, 8, 16, 32})
    if (b <= o.max_num_seqs) v.push_back(b);
  return v;
}

int step_warm_up_of(const CalibrationOptions& o) {
  return o.quick ? calibration::kDecodeStepWarmUp : kFullDecodeStepWarmUp;
}
int step_timed_of(const CalibrationOptions& o) { return o.quick ? repetitions_of(o) : kFullDecodeStepsTimed; }

int64_t step_blocks_of(const CalibrationOptions& o) {
  const std::vector<int64_t> batches = step_batches_of(o);
  if (batches.empty()) return 0;
  return calibration::DecodeSteps::blocks(batches.back(), step_cached_of(o), step_warm_up_of(o) + step_timed_of(o),
                                          o.block_size);
}


}  // namespace

struct WholeModelTimings::State {
  CalibrationOptions options;
  std::vector<int64_t> prefill_lengths, step_batches;
  int64_t step_cached = 0;
  int step_warm_up = 0, step_timed = 0;
  std::unique_ptr<DecoderExecutor> decoder;
  std::unique_ptr<calibration::OneSequencePlan> decode_plan;
  std::vector<double> decode_s;                            // per moment
  std::vector<size_t> in_situ_moments;                     // the moments the prefills and steps were timed at
  std::vector<std::vector<double>> prefill_s;              // [length][in_situ_moments index]
  std::vector<std::vector<std::vector<double>>> steps_s;   // [in_situ_moments index][batch]: the timed steps
};

double WholeModelTimings::decoder_bytes(const CalibrationOptions& o) {
  const ModelSpec& m = o.model;
  const double d = double(m.hidden_size), I = double(m.intermediate_size), V = double(m.vocab_size);
  const double qkv_out = double((m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim);
  const double q_out = double(m.num_attention_heads * m.head_dim);
  const double layer = 4.0 * (qkv_out * d + d * q_out + 2 * I * d + d * I);
  return double(m.num_hidden_layers) * layer + 4.0 * V * d * (m.tie_word_embeddings ? 1 : 2);
}

double WholeModelTimings::decode_steps_kv_bytes(const CalibrationOptions& o) {
  return double(step_blocks_of(o)) * o.block_size * decoder_kv_bytes_per_token(o.model, DeviceChoice{}, o.precision);
}

WholeModelTimings::WholeModelTimings(const CalibrationOptions& options, const CalibrationGrids& grids, int threads)
    : state_(std::make_shared<State>()), context_(grids.decode_context.front()) {
  State& s = *state_;
  s.options = options;
  s.prefill_lengths = calibration::gemm_factor_lengths(options, max_context_of(options));
  s.step_batches = step_batches_of(options);
  s.step_cached = step_cached_of(options);
  s.step_warm_up = step_warm_up_of(options);
  s.step_timed = step_timed_of(options);
  s.prefill_s.resize(s.prefill_lengths.size());
  const int32_t bs = options.block_size;
  // The prefills follow decode steps (calibration::time_prefills).
  const int64_t prefill_blocks =
      s.prefill_lengths.empty() ? 0
                                : calibration::prefill_blocks_with_lead(s.prefill_lengths.back(), bs,
                                                                        calibration::kPrefillLeadSteps, s.step_cached);
  const int64_t blocks = std::max({ceil_div(context_, bs), prefill_blocks, step_blocks_of(options)});
  const CpuDecoderOptions decoder_options(threads, cpu_precision(options.precision.on(DeviceChoice{})));
  DecoderExecutorOptions executor_options;
  executor_options.sampling = options.sampling;
  s.decoder = std::make_unique<DecoderExecutor>(
      make_cpu_decoder(random_weights(options.model, options.weights_seed), blocks, bs, decoder_options),
      executor_options);
  s.decode_plan = std::make_unique<calibration::OneSequencePlan>(kDecodeRequestId, 1, context_ - 1, false, bs);
}

void WholeModelTimings::at_moment() {
  State& s = *state_;
  const int32_t bs = s.options.block_size;
  s.decode_s.push_back(calibration::median_execute_s(*s.decoder, s.decode_plan->plan(), kDecodeWarmUp,
                                                     s.options.quick ? kDecodeTimedQuick : kDecodeTimedFull));
  s.decoder->on_request_finished(kDecodeRequestId);
  if (s.options.quick) return;  // quick: the prefills and steps once, at the end
  const size_t moment = s.decode_s.size() - 1;
  if (moment % kInSituEvery != 0) return;
  s.in_situ_moments.push_back(moment);
  for (size_t i = 0; i < s.prefill_lengths.size(); ++i)
    s.prefill_s[i].push_back(calibration::median(calibration::time_prefills(
        *s.decoder, s.prefill_lengths[i], bs, 1, 2, calibration::kPrefillLeadSteps, s.step_cached)));
  auto& steps = s.steps_s.emplace_back();
  for (int64_t b : s.step_batches)
    steps.push_back(calibration::time_decode_steps(*s.decoder, b, s.step_cached, bs, s.step_warm_up, s.step_timed));
}

double WholeModelTimings::benchmark_decode(MicrobenchSession& session) {
  auto decoder = state_;  // the benchmark's step keeps the decoder alive
  auto make = [decoder]() -> Step {
    auto result = std::make_shared<IterationResult>();
    return [decoder, result](int64_t) {
      result->reset();
      decoder->decoder->execute(decoder->decode_plan->plan(), *result);
    };
  };
  add_benchmark(session, fmt::format("iteration/decode/b:1/L:{}", context_), make);
  const double seconds = session.run()[0].median_s;
  state_->decoder->on_request_finished(kDecodeRequestId);
  return seconds;
}

void WholeModelTimings::finish(DeviceProfile& p, const std::function<bool(size_t moment)>& keeps,
                               const std::function<void(const std::string&)>& say, double benchmark_decode_s) {
  State& s = *state_;
  const int32_t bs = s.options.block_size;
  auto kept = [&](size_t moment) { return !keeps || keeps(moment); };
  // per_moment[i] was timed at moment moments[i].
  auto median_of_kept = [&](const std::vector<double>& per_moment, const std::vector<size_t>& moments) {
    std::vector<double> v;
    for (size_t i = 0; i < per_moment.size(); ++i)
      if (kept(moments[i])) v.push_back(per_moment[i]);
    return calibration::median(v.empty() ? per_moment : v);
  };
  std::vector<size_t> every_moment(s.decode_s.size());
  for (size_t m = 0; m < every_moment.size(); ++m) every_moment[m] = m;

  // The fixed cost: the whole model's 1-token decode minus what the tables
  // predict for the same plan. Measured on the whole model because its
  // layers cost more inside a forward pass than their kernels alone; the
  // difference for the model's own layer count lands here. Its median over
  // the moments is robust to the machine changing speed while one family ran.
  const double measured = median_of_kept(s.decode_s, every_moment);
  const double predicted = calibration::tables_seconds(p, s.decode_plan->plan());
  p.iteration_overhead_s = std::max(0.0, measured - predicted);
  p.metadata["iteration_overhead"] = {{"plan", fmt::format("1 decode token, {} cached", context_ - 1)},
                                      {"layers", s.options.model.num_hidden_layers},
                                      {"measured_s", measured},
                                      {"measured_by", "the median over the calibration's moments of the same plan"},
                                      {"moments_s", s.decode_s},
                                      {"google_benchmark_family_s", benchmark_decode_s},
                                      {"predicted_kernels_s", predicted},
                                      {"clamped_at_zero", measured < predicted}};

  // f(T): whole-model prefills against the tables (sim/cost/profile_model.h).
  if (!s.prefill_lengths.empty() && s.options.quick) {
    calibration::measure_gemm_factor(p, *s.decoder, s.prefill_lengths, bs, repetitions_of(s.options), say,
                                     calibration::kPrefillLeadSteps, s.step_cached);
  } else if (!s.prefill_lengths.empty()) {
    std::vector<double> medians;
    for (const std::vector<double>& times : s.prefill_s) medians.push_back(median_of_kept(times, s.in_situ_moments));
    say(fmt::format("whole-model prefills of {} tokens, the median over {} of the calibration's {} moments",
                    calibration::axis_text(s.prefill_lengths), s.prefill_s.front().size(), s.decode_s.size()));
    calibration::set_gemm_factor(p, s.prefill_lengths, medians, bs, say);
    p.metadata["in_situ_prefills"] = {
        {"tokens", s.prefill_lengths},
        {"seconds", s.prefill_s},
        {"moments", s.in_situ_moments},
        {"meaning", "whole-model prefills (median of 2 after 1 warm-up) at every other moment of the calibration "
                    "('moments': which); the factor uses each length's median over the moments kept"}};
  }

  // g(B): served-like decode steps against the tables with the overhead and f.
  if (!s.step_batches.empty() && s.options.quick) {
    calibration::measure_decode_step_factor(p, *s.decoder, s.step_batches, s.step_cached, bs,
                                            repetitions_of(s.options), say);
  } else if (!s.step_batches.empty()) {
    std::vector<std::vector<double>> steps(s.step_batches.size());
    std::vector<std::vector<double>> medians(s.steps_s.size());  // per moment, per batch size
    // As median_of_kept: every moment's steps where none of them is kept.
    const bool any_kept = std::any_of(s.in_situ_moments.begin(), s.in_situ_moments.end(), kept);
    for (size_t m = 0; m < s.steps_s.size(); ++m) {
      for (size_t i = 0; i < s.step_batches.size(); ++i) medians[m].push_back(calibration::median(s.steps_s[m][i]));
      if (any_kept && !kept(s.in_situ_moments[m])) continue;
      for (size_t i = 0; i < s.step_batches.size(); ++i)
        steps[i].insert(steps[i].end(), s.steps_s[m][i].begin(), s.steps_s[m][i].end());
    }
    say(fmt::format("whole-model decode steps of {} sequences around context {}, {} steps after {} untimed at {} "
                    "moments",
                    calibration::axis_text(s.step_batches), s.step_cached + 1, s.step_timed, s.step_warm_up,
                    s.steps_s.size()));
    calibration::set_decode_step_factor(p, s.step_batches, s.step_cached, bs, s.step_warm_up, s.step_timed, steps,
                                        say);
    const std::vector<double> spread = calibration::moment_spread(medians);
    p.metadata["decode_in_situ"] = {
        {"sequences", s.step_batches},
        {"moment_spread", spread},
        {"cached", {s.step_cached / 2, s.step_cached / 2 + s.step_cached}},
        {"seconds_median", medians},
        {"moments", s.in_situ_moments},
        {"warm_up_steps", s.step_warm_up},
        {"timed_steps", s.step_timed},
        {"meaning", "successive decode steps (contexts spread over 'cached', one token further each step; "
                    "median per moment and batch size here) at every other moment of the calibration ('moments': "
                    "which); the factor is the median over the moments kept of measured / predicted; "
                    "'moment_spread': per batch size, the slowest moment's median over the fastest's"}};
    // Above DeviceProfile::kUnsteadySpread the moments disagree by more
    // than a shared VM's jitter between moments (docs/noisy-hosts.md#what-the-vms-did).
    const std::string warning = p.unsteadiness_warning();
    if (!warning.empty()) say("warning: " + warning);
  }
}

void WholeModelTimings::release() { state_.reset(); }

}  // namespace servesim::cpu_calibration
