#include "validate/record.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace servesim {

const char* to_string(IterationKind kind) {
  switch (kind) {
    case IterationKind::Decode: return "decode";
    case IterationKind::Prefill: return "prefill";
    case IterationKind::Mixed: return "mixed";
  }
  return "?";
}

IterationKind iteration_kind(int32_t prefill_sequences, int32_t decode_sequences) {
  if (prefill_sequences == 0) return IterationKind::Decode;
  if (decode_sequences == 0) return IterationKind::Prefill;
  return IterationKind::Mixed;
}

RecordedIteration record_iteration(const IterationPlan& plan, const IterationResult& result) {
  RecordedIteration it;
  it.sequences.reserve(plan.sequences.size());
  for (size_t k = 0; k < plan.sequences.size(); ++k) {
    const ScheduledSequence& s = plan.sequences[k];
    RecordedSequence r;
    r.request_id = s.request_id;
    r.num_query_tokens = s.num_query_tokens;
    r.num_cached_tokens = s.num_cached_tokens;
    r.is_prefill = s.is_prefill;
    r.samples = s.samples;
    if (!result.emitted_tokens.empty()) r.emitted_tokens = result.emitted_tokens[k];
    r.eos = !result.finished.empty() && result.finished[k] != 0;
    it.sequences.push_back(r);
  }
  it.measured_s = result.duration_s;
  it.prefill_tokens = plan.num_prefill_tokens;
  it.decode_tokens = plan.num_decode_tokens;
  it.prefill_sequences = plan.num_prefill_sequences;
  it.decode_sequences = plan.num_decode_sequences;
  return it;
}

void IterationRecorder::after_iteration(const IterationPlan& plan, const IterationResult& result,
                                        const IterationRecord&) {
  out_.push_back(record_iteration(plan, result));
}

void rebuild_plan(const RecordedIteration& iteration, int64_t index, int32_t block_size, IterationPlan& plan,
                  std::vector<int32_t>& block_storage) {
  if (block_size < 1) throw std::invalid_argument("rebuild_plan: block_size must be >= 1");
  auto blocks_of = [&](const RecordedSequence& s) {
    return (int64_t(s.num_cached_tokens) + s.num_query_tokens + block_size - 1) / block_size;
  };
  int64_t most = 0;
  for (const RecordedSequence& s : iteration.sequences) most = std::max(most, blocks_of(s));
  // Grown before any span points into it.
  if (int64_t(block_storage.size()) < most) block_storage.resize(size_t(most), 0);
  plan.clear();
  plan.index = index;
  for (const RecordedSequence& s : iteration.sequences) {
    ScheduledSequence seq;
    seq.request_id = s.request_id;
    seq.num_query_tokens = s.num_query_tokens;
    seq.num_cached_tokens = s.num_cached_tokens;
    seq.is_prefill = s.is_prefill;
    seq.samples = s.samples;
    // A decode samples every query row (its drafts' and the bonus's).
    seq.num_sample_rows = !s.samples ? 0 : s.is_prefill ? 1 : s.num_query_tokens;
    seq.block_table = std::span<const int32_t>(block_storage.data(), size_t(blocks_of(s)));
    plan.add(seq);
  }
}

std::vector<double> cost_recorded(const std::vector<RecordedIteration>& iterations, const CostModel& model,
                                  int32_t block_size, CostMultiplier* multiplier, std::span<const double> starts_s) {
  if (multiplier && starts_s.size() != iterations.size())
    throw std::invalid_argument(fmt::format("cost_recorded: {} starts for {} iterations", starts_s.size(),
                                            iterations.size()));
  std::vector<double> costs;
  costs.reserve(iterations.size());
  IterationPlan plan;
  std::vector<int32_t> blocks;
  for (size_t k = 0; k < iterations.size(); ++k) {
    rebuild_plan(iterations[k], int64_t(k), block_size, plan, blocks);
    double cost = model.seconds(plan);
    if (multiplier) cost *= multiplier->factor(plan, starts_s[k]);
    costs.push_back(cost);
  }
  return costs;
}

std::vector<double> cost_recorded(const std::vector<RecordedIteration>& iterations, const SpeculativeCost& model,
                                  int32_t block_size) {
  std::vector<double> costs;
  costs.reserve(iterations.size());
  IterationPlan plan;
  std::vector<int32_t> blocks, draft_cached;
  DraftCacheState draft_cache;
  for (size_t k = 0; k < iterations.size(); ++k) {
    rebuild_plan(iterations[k], int64_t(k), block_size, plan, blocks);
    draft_cache.lookup(plan, draft_cached);
    costs.push_back(model.seconds(plan, draft_cached).total);
    // The drafts each decode accepted in the real run (emitted - 1), within
    // those it proposed.
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const RecordedSequence& s = iterations[k].sequences[i];
      const ScheduledSequence& item = plan.sequences[i];
      const int32_t proposed = item.is_prefill ? 0 : item.num_query_tokens - 1;
      const int32_t accepted = !s.is_prefill && s.emitted_tokens > 0 ? s.emitted_tokens - 1 : 0;
      draft_cache.advance(item, std::clamp(accepted, 0, std::max(proposed, 0)));
    }
  }
  return costs;
}

}  // namespace servesim
