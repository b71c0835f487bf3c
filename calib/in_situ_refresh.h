// Re-measuring a profile's in-situ factors at the moment of a run.
//
// A profile ties its kernel tables to whole-model iterations by two
// measured curves (calib/profile_model.h): f(T), whole-model prefills of T
// tokens against the tables, and g(B), served-like decode steps of B
// sequences against them. A machine that drifts (the 2-core VM: 5-10%
// over minutes within one placement of its threads, calib/placement.h)
// moves these whole-model costs between the calibration and a run made
// minutes later, by an amount that differs between shapes -- so one
// re-anchoring scale per resource (calib/anchor.h, --anchor apply)
// over-corrects some shapes and under-corrects others.
//
// validate --in-situ refresh measures the same whole-model iterations the
// calibration measured for f and g -- prefills of the profile's in-situ
// lengths (each after two decode steps of another sequence, as a served
// prefill follows decode steps), and decode steps of its in-situ batch sizes (DecodeSteps, the
// same warm-up and timed steps as a full calibration) -- just before and
// just after the real run, on the served decoder itself (serve()'s
// ServeHooks: on the 2-core VM two copies of the same weights ran the same
// decode step up to 9% apart, the first allocated fastest, so a copy of its
// own would time another speed), the threads' placement taken before and
// after every shape. The host
// moves the threads between placements whose speeds differ by shape (a
// 1-sequence decode step 0.75x far against near on the 2-core VM), so the
// samples are kept by placement: f and g are set, by the calibration's own
// rules (calibration::set_in_situ, then set_decode_in_situ), from the
// samples of a placement that saw every shape, and where the other
// placement saw every shape too the placement ratios are measured afresh
// from the two (refresh_in_situ below says what happens otherwise). The
// kernel tables, the attention fits and the iteration overhead stay as
// calibrated: the prediction still composes every iteration from the
// tables, at the machine's speed of the run's minutes instead of the
// calibration's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/placement.h"
#include "calib/profile.h"
#include "sim/executor.h"

namespace servesim {

// Seconds of the run's clock between interleaved timings: on the 2-core VM
// every 0.1 s followed the level closer than every 0.5 s (the same run's
// timings, every fifth kept: iteration MAPE 0-0.7% higher at 4 of 6
// points, experiments/validation_cpu/probe_interval.py).
inline constexpr double kDefaultInterleaveIntervalS = 0.1;
// Seconds of the run's clock between interleaved prefill timings (each a
// whole-model prefill of about 128 tokens: on the 2-core VMs 90-170 ms of
// stopped clock; InSituRefreshSettings::prefill_probe_tokens). 0.25 s
// since the Xeon VM's prefill speed moves within a second: within-run, with
// only every 2nd / 4th timing kept, prefill MAPE rose 7.7% -> 9.4% -> 11.6%
// over runs timed every 0.5 s, and 10.2% -> 11.3% over one timed every
// 0.25 s (experiments/validation_cpu/level_by_kind.py --prefill-every). A
// prefill timing replaces a decode timing, so the clock stops about as
// long as at 0.5 s (25-53 s against 24-57 s per point).
inline constexpr double kDefaultInterleavePrefillIntervalS = 0.25;

struct InSituRefreshSettings {
  std::vector<int64_t> prefill_tokens;  // T of f(T); empty: none re-measured
  std::vector<int64_t> decode_batches;  // B of g(B); empty: none re-measured
  int64_t cached = 127;                 // decode steps' contexts spread over cached/2 .. 3 cached/2
  int warm_up = 4;                      // untimed decode steps before the timed ones
  int timed = 4;                        // timed decode steps per batch size and round
  int rounds = 2;                       // rounds of every shape before, and again after, the run
  int32_t block_size = 16;
  // The tracking probes' first KV block (their blocks follow it): past the
  // scheduler's blocks (ServeHooks::probe_kv_blocks) to probe between
  // served iterations, when requests hold blocks.
  int32_t probe_first_block = 0;
  // Interleaving: run-clock seconds from one probe between served
  // iterations to the next (InSituRefresher::probe_between).
  double between_probe_interval_s = kDefaultInterleaveIntervalS;
  // Interleaving: a whole-model prefill of this many tokens (after
  // calibration::kPrefillLeadSteps decode steps, as the refresh times its
  // prefills) instead of the decode probe once this many run-clock seconds
  // have passed since the last prefill probe; 0 tokens or seconds: none.
  // Prefill and decode speeds move apart on a shared host (compute against
  // memory): on the 2-core Intel Xeon VM served mixed iterations ran 7%
  // over the refresh's prediction for most of a run while the decode
  // probes read 1.00, and prefill probes read 1.0 to 1.9 times it within
  // seconds (experiments/results/cpu_xeon).
  int64_t prefill_probe_tokens = 0;
  double between_prefill_probe_interval_s = kDefaultInterleavePrefillIntervalS;
};

// The settings for `profile` and a run of at most `max_num_seqs` sequences,
// `max_batched_tokens` tokens per iteration and `max_model_len` tokens of
// context: the profile's own in-situ lengths and batch sizes (the full
// calibration's 32, 128, 512 and 1 .. 32 for a profile without them)
// within those limits; the prefill probe's length the one of those nearest
// 128 tokens in log scale (a served prompt's size in the default workload).
InSituRefreshSettings in_situ_refresh_settings(const DeviceProfile& profile, int64_t max_num_seqs,
                                               int64_t max_batched_tokens, int64_t max_model_len);

// KV blocks a decoder needs for the settings' plans.
int64_t in_situ_refresh_blocks(const InSituRefreshSettings& settings);
// KV blocks the largest tracking probe, decode or prefill, needs (from settings.probe_first_block on).
int64_t track_probe_blocks(const InSituRefreshSettings& settings);
// The settings without the prefills and decode batches that need more than
// `kv_blocks` KV blocks of `block_size` tokens, in blocks of that size.
InSituRefreshSettings fit_to_kv_cache(InSituRefreshSettings settings, int64_t kv_blocks, int32_t block_size);

// One timed whole-model iteration of the refresh.
struct InSituSample {
  bool before = true;          // before the real run (else after)
  int64_t prefill_tokens = 0;  // a prefill of this many tokens, or 0 for a decode step
  int64_t sequences = 1;       // a decode step's sequences
  int step = 0;                // a decode step's index among its round's timed steps
  double seconds = 0;
  Placement placement = Placement::Unknown;  // the same before and after its shape, else Unknown
};

// A timing of the served decoder during the run (validate --in-situ track
// and interleave): decode steps of `sequences` sequences, their median; or
// one whole-model prefill of `prefill_tokens` tokens.
struct TrackProbe {
  double time_s = 0;   // on the run's clock, when it started
  double seconds = 0;  // median of the timed steps, or the prefill's
  int64_t sequences = 1;
  int64_t prefill_tokens = 0;  // a prefill probe's length; 0 for decode steps
  Placement placement = Placement::Unknown;
  bool between_iterations = false;  // with the clock stopped between served iterations, else in an idle gap
};

// Times the refresh's iterations; `core_latency_ns` reads the threads'
// placement (calib/placement.h; NaN: not measured).
class InSituRefresher {
 public:
  InSituRefresher(InSituRefreshSettings settings, std::function<double()> core_latency_ns);
  // settings.rounds rounds of every shape on `executor` (a whole-model
  // decoder with at least in_situ_refresh_blocks(settings) free KV blocks,
  // and no live request 1 .. max decode batch), recorded as before or
  // after the run. The requests it runs are finished after.
  void measure(Executor& executor, bool before);
  const std::vector<InSituSample>& samples() const { return samples_; }
  const InSituRefreshSettings& settings() const { return settings_; }

  // In an idle gap of the run from `now_s` to the next arrival at
  // `until_s`: kProbeWarmUp + kProbeTimed 1-sequence decode steps
  // (DecodeSteps around settings.cached) on `executor`, when the gap is
  // at least twice the last probe's length (kFirstIdleProbeGapS before the
  // first) and kIdleProbeIntervalS have passed since the last; nothing
  // otherwise. Returns whether it probed.
  bool probe_idle(Executor& executor, double now_s, double until_s);
  // Between served iterations at `now_s` (the run's clock stopped,
  // ServeHooks::between_iterations), after an iteration that decoded
  // `served_sequences` sequences: the same steps, but of the served batch
  // as the refresh timed it (the largest of settings.decode_batches not
  // above it, else 1: a 1-sequence step's speed moves in ways a batch's
  // does not), on the KV blocks from settings.probe_first_block and
  // request ids from kProbeRequestId, when settings.between_probe_interval_s
  // have passed since the last probe of either kind; instead, a prefill of
  // settings.prefill_probe_tokens when settings.between_prefill_probe_
  // interval_s have passed since the last prefill probe (or there was
  // none). Returns whether it probed.
  bool probe_between(Executor& executor, double now_s, int64_t served_sequences);
  const std::vector<TrackProbe>& probes() const { return probes_; }
  // Every tracking probe, in an idle gap or between iterations: untimed, then timed decode steps.
  static constexpr int kProbeWarmUp = 2, kProbeTimed = 6;
  static constexpr double kFirstIdleProbeGapS = 0.2, kIdleProbeIntervalS = 0.25;
  // Far above any workload's request ids.
  static constexpr int64_t kProbeRequestId = int64_t(1) << 40;

 private:
  InSituRefreshSettings settings_;
  double latency_ns() const;  // core_latency_ns_, NaN without it
  std::vector<double> time_probe_steps(Executor& executor, int64_t sequences) const;
  std::function<double()> core_latency_ns_;
  std::vector<TrackProbe> probes_;
  double last_probe_length_s_ = 0;
  double last_prefill_probe_s_ = -1;  // run-clock time of the last prefill probe; < 0: none yet
  std::vector<InSituSample> samples_;
};

struct InSituRefreshResult {
  // The input with gemm_in_situ, decode_in_situ and placement_ratios
  // re-measured for `tables_placement` (below).
  DeviceProfile profile;
  // The placement the refreshed factors describe; Unknown when the
  // placement was not watched (one thread) and the profile has no ratios.
  Placement tables_placement = Placement::Unknown;
  nlohmann::json report;  // report.json's in_situ (see validate.h)
};

// `profile` with f and g set from `samples`, by where they ran:
//   every shape timed in both placements: f and g from the samples in the
//     profile's reference placement (its ratios' reference, else the
//     placement most of its anchor probes saw, else near), and fresh
//     placement ratios, each shape's median in the other over its median
//     in that one;
//   every shape timed in one placement only: f and g from that one's, and
//     the profile's ratios seen from it (inverted when the profile's
//     reference is the other), or none;
//   neither (one thread; the host moving the threads between shapes):
//     every sample, divided by the profile's ratio for the placement it ran
//     in where it has ratios.
// Throws InputError when no sample of a shape the settings name was taken.
InSituRefreshResult refresh_in_situ(const DeviceProfile& profile, const InSituRefreshSettings& settings,
                                    const std::vector<InSituSample>& samples,
                                    const std::function<void(const std::string&)>& say = {});

// The machine's level through the run from the tracking probes. For each
// probe, its median over what `refreshed` (refresh_in_situ's profile)
// predicts for those steps in the probe's placement (`measured_over_
// predicted`); then the median of it and its neighbours in time (a probe
// of a few steps is noisy, `smoothed`); then `level`, by `basis`:
//   RunMedian: divided by the median over all probes, so the probes move
//     the refresh's level through the run but do not set it (steps timed
//     after an idle gap ran about 5% faster than served ones on the 2-core
//     VM: --in-situ track, whose probes all follow a wait);
//   Refresh: as it is, so the probes set the level (--in-situ interleave,
//     whose probes mostly run between served iterations, as served steps
//     do).
// Decode probes and prefill probes make two levels, each sorted by time and
// smoothed over its own kind's neighbours (kDecodeNeighbours and
// kPrefillNeighbours on each side); empty without probes of its kind.
struct TrackLevel {
  TrackProbe probe;
  double measured_over_predicted = 1, smoothed = 1, level = 1;
};
struct TrackedLevels {
  std::vector<TrackLevel> decode;   // scales decode-only iterations
  std::vector<TrackLevel> prefill;  // scales iterations with a prefill (prefill-only and mixed)
  bool empty() const { return decode.empty() && prefill.empty(); }
  // The level at time t of an iteration with (or without) a prefill:
  // linear between that kind's levels around t, the nearest one's before
  // the first and after the last, 1 without any.
  double at(bool has_prefill, double t) const;
};
// A decode probe is the median of a few steps; its neighbours' median
// keeps one noisy probe from setting the level.
constexpr size_t kDecodeNeighbours = 1;
// Prefill probes are not smoothed. On the 2-core Xeon VM a prefill ran
// either near its prediction or about 1.3x over it, in spells that lasted
// seconds (three probes 0.5 s apart at 1.32-1.34 in one run); a median over
// 2 neighbours on each side read through the spells and under-costed the
// served prefills in them. Over the 758 iterations with a prefill of 4
// study runs there (24 points; experiments/validation_cpu/level_by_kind.py
// --prefill-smooth 5 and 1), MAPE was 9.3% with that median and 8.3%
// unsmoothed; prefill-only iterations' was lower in each run.
constexpr size_t kPrefillNeighbours = 0;
enum class TrackLevelBasis { RunMedian, Refresh };
TrackedLevels track_levels(const DeviceProfile& refreshed, const InSituRefreshSettings& settings,
                           const std::vector<TrackProbe>& probes, TrackLevelBasis basis);

}  // namespace servesim
