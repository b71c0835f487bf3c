// Replay: a real run's iterations re-timed with other durations (their
// predicted costs), the error of the cost model alone.
#pragma once

#include <span>
#include <vector>

#include "sim/metrics.h"
#include "validate/record.h"

namespace servesim {

// Re-times a real run with other iteration durations (one per recorded
// iteration) on the replay timeline (validate/replay_timeline.h): iteration
// k starts at the replayed end of k-1 plus the real gap between them, and
// lasts durations_s[k]. Every request instant is read on that timeline: its
// arrival is the real arrival mapped onto it (so a closed loop's release
// follows the replayed finish that released it), it is first scheduled at
// the start of its first plan, its tokens are emitted at the end of each
// iteration in which it samples (as many as the executor reported, clamped
// as Scheduler::complete does), and it finishes at the emission that
// completes its output (or carried EOS). The events go through the same
// MetricsRecorder as any run's, so a request's TTFT is the replayed time of
// the iterations it waited through and was prefilled in, by the same
// definitions. Rejections, preemption counts and KV figures are copied from
// the measured run. Needs the measured iteration records (their real
// starts); throws std::invalid_argument without them or when the durations
// do not match the iterations. With the measured durations it reproduces
// the run exactly.
RunRecords replay_timing(const RunRecords& measured, const std::vector<RecordedIteration>& iterations,
                         std::span<const double> durations_s);

}  // namespace servesim
