#include "validate/replay.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "validate/replay_timeline.h"

namespace servesim {

RunRecords replay_timing(const RunRecords& measured, const std::vector<RecordedIteration>& iterations,
                         std::span<const double> durations_s) {
  if (durations_s.size() != iterations.size())
    throw std::invalid_argument(fmt::format("replay_timing: {} durations for {} iterations",
                                            durations_s.size(), iterations.size()));
  if (measured.iterations.size() != iterations.size())
    throw std::invalid_argument(fmt::format("replay_timing: {} measured iteration records for {} iterations",
                                            measured.iterations.size(), iterations.size()));
  std::vector<double> real_starts, real_durations;
  for (const IterationRecord& it : measured.iterations) {
    real_starts.push_back(it.start_s);
    real_durations.push_back(it.duration_s);
  }
  const ReplayTimeline timeline(std::move(real_starts), std::move(real_durations), durations_s);

  RunRecords out;
  out.requests = measured.requests;
  for (RequestRecord& r : out.requests) {
    r.arrival_s = timeline.at(r.arrival_s);  // the same instant, read on the replay timeline
    r.first_scheduled_s = r.first_token_s = r.last_token_s = r.finish_s = -1;
    r.tokens_emitted = 0;
    r.emissions = 0;
  }
  out.rejection_reasons = measured.rejection_reasons;
  out.num_iterations = int64_t(iterations.size());
  // The same iterations as the real run: its batches and prefix-cache hits.
  out.batch_tokens = measured.batch_tokens;
  out.batch_sequences = measured.batch_sequences;
  out.prefix_cache = measured.prefix_cache;
  out.preemptions = measured.preemptions;
  out.peak_kv_blocks = measured.peak_kv_blocks;
  out.num_gpu_blocks = measured.num_gpu_blocks;
  out.block_size = measured.block_size;
  out.end_s = 0;

  MetricsRecorder recorder(out);
  out.iterations.reserve(iterations.size());
  for (size_t k = 0; k < iterations.size(); ++k) {
    const RecordedIteration& it = iterations[k];
    recorder.set_now(timeline.start(k));
    for (const RecordedSequence& s : it.sequences)
      if (out.requests[size_t(s.request_id)].first_scheduled_s < 0) recorder.on_first_scheduled(s.request_id);
    recorder.set_now(timeline.end(k));
    for (const RecordedSequence& s : it.sequences) {
      if (!s.samples) continue;
      const RequestRecord& r = out.requests[size_t(s.request_id)];
      const int32_t room = std::max(1, r.output_tokens - r.tokens_emitted);
      recorder.on_tokens(s.request_id, std::clamp(s.emitted_tokens < 0 ? 1 : s.emitted_tokens, 1, room));
      if (r.tokens_emitted >= r.output_tokens || s.eos) recorder.on_finished(s.request_id);
    }
    IterationRecord rec = measured.iterations[k];
    rec.start_s = timeline.start(k);
    rec.duration_s = durations_s[k];
    out.iterations.push_back(rec);
  }
  return out;
}

}  // namespace servesim
