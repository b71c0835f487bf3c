// Warm-up passes run before a real run starts its clock, as serving engines
// do at start-up (vLLM's dummy and profiling runs): a decoder's first passes
// pay for work later passes do not repeat -- the first touch of its
// activation buffers, the thread pool's start, cold caches and TLBs; on the
// GPU, module loading and cuBLAS's first calls (docs/noisy-hosts.md has how
// much). A run measured from a cold start charges that to its first
// requests -- under queueing, to every request behind them.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "kernels/decoder/decoder_model.h"

namespace servesim {

struct WarmUpSettings {
  int32_t prefill_tokens = 256;  // one prefill of this many tokens (capped by the KV cache); 0: no warm-up
  int32_t decode_steps = 4;      // then this many 1-token decode steps of the same sequence
  // Before the passes, DecoderModel::prepare_batches for batches up to
  // these sizes (the scheduler's token budget and sequence limit); 0: skip.
  int32_t max_batched_tokens = 0;
  int32_t max_sample_rows = 0;
};

// What warm_up did.
struct WarmUpReport {
  int32_t prefill_tokens = 0;
  int32_t decode_steps = 0;
  double seconds = 0;
  nlohmann::json to_json() const;
};

// Runs the warm-up passes on `model` through its KV blocks 0, 1, ..., which
// must be free: the passes write K and V there, and a request that later
// holds those blocks writes every position before it reads it, so nothing
// of the warm-up reaches a real request's results. Token ids 0 .. V - 1.
WarmUpReport warm_up(DecoderModel& model, const WarmUpSettings& settings);

}  // namespace servesim
