// Re-timing a profile's whole-model factors at the moment of a run, and
// timing the served decoder between served iterations (validate
// --host-drift interleave; docs/noisy-hosts.md has the findings behind it).
//
// A profile ties its kernel tables to whole-model iterations by two
// measured curves (sim/cost/profile_model.h): f(T), whole-model prefills of
// T tokens against the tables, and g(B), served-like decode steps of B
// sequences against them. A machine that drifts moves these whole-model
// costs between the calibration and a run made minutes later, by an amount
// that differs between shapes.
//
// The refresh measures the same whole-model iterations the calibration
// measured for f and g -- prefills of the profile's lengths (each after
// decode steps of another sequence, as a served prefill follows decode
// steps), and decode steps of its batch sizes -- just before and just after
// the real run, on the served decoder itself (a copy of the weights of its
// own may run at another speed), the threads' placement taken before and
// after every shape. The samples are kept by placement: f and g are set, by
// the calibration's own rules (calibration::set_gemm_factor, then
// set_decode_step_factor), from the samples of a placement that saw every
// shape, and where the other placement saw every shape too the placement
// ratios are measured afresh from the two (refresh_whole_model_factors says
// what happens otherwise). The kernel tables, the attention fits and the
// iteration overhead stay as calibrated.
//
// Interleaving: between served iterations, with the run's clock stopped,
// decode steps of the served batch (and every so often a whole-model
// prefill) are timed on KV blocks of their own; each probe's time over the
// refreshed prediction is the machine's level at that moment (drift_levels).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/profile.h"
#include "sim/executor.h"
#include "validate/host_drift/placement.h"

namespace servesim {

// Seconds of the run's clock between interleaved timings, and between
// interleaved prefill timings (each a whole-model prefill of about 128
// tokens): docs/noisy-hosts.md gives the measurements behind both.
inline constexpr double kDefaultInterleaveIntervalS = 0.1;
inline constexpr double kDefaultInterleavePrefillIntervalS = 0.25;

struct RefreshSettings {
  std::vector<int64_t> prefill_tokens;  // T of f(T); empty: none re-measured
  std::vector<int64_t> decode_batches;  // B of g(B); empty: none re-measured
  int64_t cached = 127;                 // decode steps' contexts spread over cached/2 .. 3 cached/2
  int warm_up = 4;                      // untimed decode steps before the timed ones
  int timed = 4;                        // timed decode steps per batch size and round
  int rounds = 2;                       // rounds of every shape before, and again after, the run
  int32_t block_size = 16;
  // The interleaved probes' first KV block (their blocks follow it): past
  // the scheduler's blocks (EngineRunOptions::extra_kv_blocks), to probe
  // between served iterations while requests hold blocks.
  int32_t probe_first_block = 0;
  // Run-clock seconds from one probe between served iterations to the next.
  double between_probe_interval_s = kDefaultInterleaveIntervalS;
  // A whole-model prefill of this many tokens (after
  // calibration::kPrefillLeadSteps decode steps, as the refresh times its
  // prefills) instead of the decode probe once this many run-clock seconds
  // have passed since the last prefill probe; 0 tokens or seconds: none.
  // Prefill and decode speeds move apart on a shared host (compute against
  // memory), so iterations with a prefill follow the prefill probes.
  int64_t prefill_probe_tokens = 0;
  double between_prefill_probe_interval_s = kDefaultInterleavePrefillIntervalS;
};

// The settings for `profile` and a run of at most `max_num_seqs` sequences,
// `max_batched_tokens` tokens per iteration and `max_model_len` tokens of
// context: the profile's own prefill lengths and batch sizes (a full
// calibration's 32, 128, 512 and 1 .. 32 for a profile without them)
// within those limits; the prefill probe's length the one of those nearest
// 128 tokens in log scale (a served prompt's size in the default workload).
RefreshSettings refresh_settings_for(const DeviceProfile& profile, int64_t max_num_seqs, int64_t max_batched_tokens,
                                     int64_t max_model_len);

// KV blocks a decoder needs for the settings' refresh plans.
int64_t refresh_blocks(const RefreshSettings& settings);
// KV blocks the largest interleaved probe, decode or prefill, needs (from
// settings.probe_first_block on).
int64_t interleave_probe_blocks(const RefreshSettings& settings);
// The settings without the prefills and decode batches that need more than
// `kv_blocks` KV blocks of `block_size` tokens, in blocks of that size.
RefreshSettings fit_to_kv_cache(RefreshSettings settings, int64_t kv_blocks, int32_t block_size);

// One timed whole-model iteration of the refresh.
struct RefreshSample {
  bool before = true;          // before the real run (else after)
  int64_t prefill_tokens = 0;  // a prefill of this many tokens, or 0 for a decode step
  int64_t sequences = 1;       // a decode step's sequences
  int step = 0;                // a decode step's index among its round's timed steps
  double seconds = 0;
  Placement placement = Placement::Unknown;  // the same before and after its shape, else Unknown
};

// A timing of the served decoder between served iterations: decode steps of
// `sequences` sequences, their median; or one whole-model prefill of
// `prefill_tokens` tokens.
struct InterleavedProbe {
  double time_s = 0;   // on the run's clock, when it started
  double seconds = 0;  // median of the timed steps, or the prefill's
  int64_t sequences = 1;
  int64_t prefill_tokens = 0;  // a prefill probe's length; 0 for decode steps
  Placement placement = Placement::Unknown;
};

// Times the refresh's iterations and the interleaved probes;
// `core_latency_ns` reads the threads' placement (NaN: not measured).
class WholeModelRefresher {
 public:
  WholeModelRefresher(RefreshSettings settings, std::function<double()> core_latency_ns);
  // settings.rounds rounds of every shape on `executor` (a whole-model
  // decoder with at least refresh_blocks(settings) free KV blocks, and no
  // live request 1 .. max decode batch), recorded as before or after the
  // run. The requests it runs are finished after.
  void measure(Executor& executor, bool before);
  const std::vector<RefreshSample>& samples() const { return samples_; }
  const RefreshSettings& settings() const { return settings_; }

  // Between served iterations at `now_s` (the run's clock stopped), after
  // an iteration that decoded `served_sequences` sequences: kProbeWarmUp +
  // kProbeTimed decode steps of the served batch as the refresh timed it
  // (the largest of settings.decode_batches not above it, else 1), on the
  // KV blocks from settings.probe_first_block and request ids from
  // kProbeRequestId, when settings.between_probe_interval_s have passed
  // since the last probe of either kind; instead, a prefill of
  // settings.prefill_probe_tokens when settings.between_prefill_probe_
  // interval_s have passed since the last prefill probe (or there was
  // none). Returns whether it probed.
  bool probe_between(Executor& executor, double now_s, int64_t served_sequences);
  const std::vector<InterleavedProbe>& probes() const { return probes_; }
  static constexpr int kProbeWarmUp = 2, kProbeTimed = 6;
  // Far above any workload's request ids.
  static constexpr int64_t kProbeRequestId = int64_t(1) << 40;

 private:
  RefreshSettings settings_;
  double latency_ns() const;  // core_latency_ns_, NaN without it
  std::vector<double> time_probe_steps(Executor& executor, int64_t sequences) const;
  std::function<double()> core_latency_ns_;
  std::vector<InterleavedProbe> probes_;
  double last_prefill_probe_s_ = -1;  // run-clock time of the last prefill probe; < 0: none yet
  std::vector<RefreshSample> samples_;
};

struct RefreshResult {
  // The input with gemm_factor, decode_step_factor and placement_ratios
  // re-measured for `tables_placement` (below).
  DeviceProfile profile;
  // The placement the refreshed factors describe; Unknown when the
  // placement was not watched (one thread) and the profile has no ratios.
  Placement tables_placement = Placement::Unknown;
  nlohmann::json report;  // report.json's host_drift.refresh
};

// `profile` with f and g set from `samples`, by where they ran:
//   every shape timed in both placements: f and g from the samples in the
//     profile's reference placement (its ratios' reference, else the
//     placement most of its drift probes saw, else near), and fresh
//     placement ratios, each shape's median in the other over its median
//     in that one;
//   every shape timed in one placement only: f and g from that one's, and
//     the profile's ratios seen from it (inverted when the profile's
//     reference is the other), or none;
//   neither (one thread; the host moving the threads between shapes):
//     every sample, divided by the profile's ratio for the placement it ran
//     in where it has ratios.
// Throws InputError when no sample of a shape the settings name was taken.
RefreshResult refresh_whole_model_factors(const DeviceProfile& profile, const RefreshSettings& settings,
                                          const std::vector<RefreshSample>& samples,
                                          const std::function<void(const std::string&)>& say = {});

// The machine's level through the run from the interleaved probes. For each
// probe, its time over what `refreshed` (refresh_whole_model_factors'
// profile) predicts for it in the probe's placement
// (`measured_over_predicted`); then the median of it and its neighbours in
// time (`smoothed`; a decode probe of a few steps is noisy, a prefill probe
// is taken as measured); that is the probe's `level`. Decode probes and
// prefill probes make two levels, each sorted by time and smoothed over its
// own kind's neighbours (kDecodeNeighbours and kPrefillNeighbours on each
// side); empty without probes of its kind.
struct DriftLevel {
  InterleavedProbe probe;
  double measured_over_predicted = 1, smoothed = 1, level = 1;
};
struct DriftLevels {
  std::vector<DriftLevel> decode;   // scales decode-only iterations
  std::vector<DriftLevel> prefill;  // scales iterations with a prefill (prefill-only and mixed)
  bool empty() const { return decode.empty() && prefill.empty(); }
  // The level at time t of an iteration with (or without) a prefill:
  // linear between that kind's levels around t, the nearest one's before
  // the first and after the last, 1 without any.
  double at(bool has_prefill, double t) const;
};
constexpr size_t kDecodeNeighbours = 1;
constexpr size_t kPrefillNeighbours = 0;
DriftLevels drift_levels(const DeviceProfile& refreshed, const RefreshSettings& settings,
                         const std::vector<InterleavedProbe>& probes);

}  // namespace servesim
