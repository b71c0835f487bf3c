// What one forward pass does: the contract between the scheduler and an
// executor (cost model or real decoder).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/token_identity.h"

namespace servesim {

// One sequence's share of an iteration. Its new query tokens are packed with
// every other sequence's (varlen batch) and attend causally to the sequence's
// own cached history.
struct ScheduledSequence {
  int64_t request_id = 0;
  // New tokens computed this iteration: a prefill chunk, 1 for a decode, or
  // k+1 for a speculative verification.
  int32_t num_query_tokens = 0;
  // Tokens whose K and V are already in the cache before this iteration,
  // prefix-cache hits included.
  int32_t num_cached_tokens = 0;
  // Of those, the tokens this iteration's admission found in the prefix
  // cache (0 unless the sequence was admitted in this iteration).
  int32_t prefix_hit_tokens = 0;
  // True while the sequence is (re)computing its prompt; false once decoding.
  bool is_prefill = false;
  // True when the iteration ends with a sampled token for this sequence: the
  // last chunk of a prefill, and every decode.
  bool samples = false;
  // Rows whose logits the iteration computes for this sequence: 0 without
  // sampling, 1 for a prefill's last chunk or a plain decode, k' + 1 for a
  // speculative verification (every draft position and the bonus).
  int32_t num_sample_rows = 0;
  // The sequence's KV blocks (ids into the cache), owned by the scheduler's
  // block manager and valid until the next schedule() call. They cover at
  // least num_cached_tokens + num_query_tokens tokens.
  std::span<const int32_t> block_table;
  // Which tokens the sequence holds (nullptr: no identity), for a real
  // executor to draw the same token ids wherever two prompts share a
  // prefix. Valid as long as block_table.
  const TokenIdentity* tokens = nullptr;
};

struct IterationPlan {
  int64_t index = 0;  // 0, 1, 2, ... in the order the runner executes them
  std::vector<ScheduledSequence> sequences;

  // Aggregates over `sequences`, filled by the scheduler.
  int32_t num_prefill_tokens = 0;    // query tokens of prefill sequences
  int32_t num_decode_tokens = 0;     // query tokens of decode sequences
  int32_t num_prefill_sequences = 0;
  int32_t num_decode_sequences = 0;
  int32_t num_sampling_sequences = 0;
  int32_t num_sample_rows = 0;  // rows through the LM head: sum of num_sample_rows
  int32_t num_prefix_hit_tokens = 0;  // sum of prefix_hit_tokens
  // What attention costs need of the prefill and of the decode sequences,
  // summed: a cost model reads these instead of every item. A sequence of
  // q query tokens over c cached ones has q*c + q(q+1)/2 query-key pairs.
  struct AttentionSums {
    int64_t cached_tokens = 0;  // sum of c
    int64_t pairs = 0;          // sum of q*c + q(q+1)/2
  };
  AttentionSums prefill_attention, decode_attention;
  // Set by the scheduler's repeated decode steps where the executor reads
  // only the counts and sums above (Scheduler::set_lazy_repeats): the
  // repeated decodes' items (the first num_decode_sequences) are then not
  // kept up to date, only their number is right.
  bool items_lag = false;

  bool empty() const { return sequences.empty(); }
  int32_t num_tokens() const { return num_prefill_tokens + num_decode_tokens; }
  void clear() {
    sequences.clear();
    num_prefill_tokens = num_decode_tokens = 0;
    num_prefill_sequences = num_decode_sequences = num_sampling_sequences = num_sample_rows = 0;
    num_prefix_hit_tokens = 0;
    prefill_attention = decode_attention = {};
    items_lag = false;
  }
  // Appends `item`; a sampling item that names no sample rows samples one.
  void add(const ScheduledSequence& item) {
    sequences.push_back(item);
    count_last();
  }
  // Appends a default item for the caller to fill in place (no copy of a
  // whole item per sequence and iteration), then count_last().
  ScheduledSequence& append() { return sequences.emplace_back(); }
  // Counts the last item into the aggregates, as add() does.
  void count_last() {
    ScheduledSequence& s = sequences.back();
    s.num_sample_rows = s.samples ? std::max(s.num_sample_rows, 1) : 0;
    AttentionSums& attention = s.is_prefill ? prefill_attention : decode_attention;
    const int64_t q = s.num_query_tokens, c = s.num_cached_tokens;
    attention.cached_tokens += c;
    attention.pairs += q * c + q * (q + 1) / 2;
    if (s.is_prefill) {
      num_prefill_tokens += s.num_query_tokens;
      ++num_prefill_sequences;
    } else {
      num_decode_tokens += s.num_query_tokens;
      ++num_decode_sequences;
    }
    if (s.samples) ++num_sampling_sequences;
    num_sample_rows += s.num_sample_rows;
    num_prefix_hit_tokens += s.prefix_hit_tokens;
  }
};

// What an executor reports back for one plan.
struct IterationResult {
  // Time the iteration took: predicted by a cost model, measured by a real
  // executor. Seconds.
  double duration_s = 0.0;
  // Tokens emitted by each sequence of the plan, in plan order. Left empty,
  // it means one token for every sampling sequence (no speculation).
  std::vector<int32_t> emitted_tokens;
  // Sequences that hit end-of-sequence (real decoder with --honor-eos), in
  // plan order; empty means none did.
  std::vector<uint8_t> finished;

  void reset() {
    duration_s = 0.0;
    emitted_tokens.clear();
    finished.clear();
  }
};

}  // namespace servesim
