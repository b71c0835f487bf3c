// What `servesim serve` needs of an executor beyond an Executor: each
// request served with what its client sent (prompt ids, sampling, stop
// rules) and its tokens so far. The plain decoder (decoder_executor.h) and
// the speculative one (speculative_executor.h) both serve requests this way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/decoder/sampler.h"
#include "sim/executor.h"
#include "sim/speculative_stats.h"

namespace servesim {

// What a client sent with a request: its prompt's token ids and how to
// sample and when to stop. A request without one draws its prompt from its
// token identity or the prompt seed and samples with the executor's settings.
struct RequestInput {
  std::vector<int32_t> prompt;  // [prompt tokens], ids < the model's vocabulary
  SamplingParams sampling;
  // With a seed of its own a request's tokens depend on (seed, position)
  // only, not on its id: the same request with the same seed samples the same.
  bool seeded = false;
  bool stop_at_eos = true;              // false: vLLM's ignore_eos
  int32_t min_tokens = 0;               // no stop before this many output tokens
  std::vector<int32_t> stop_token_ids;  // besides EOS (vLLM's stop_token_ids)
};

// Throws std::invalid_argument, naming `who`, for an empty prompt, a token
// id outside [0, vocab) or invalid sampling settings.
void check_request_input(const RequestInput& input, int64_t vocab, const char* who);

// Extends `tokens` (a request's prompt and generated tokens so far) with
// the prompt's ids up to position `end` (exclusive) for a prefill reaching
// it: positions not seen before are prompt positions, since the scheduler
// asks for a generated token's position only after it was emitted. Throws
// std::logic_error, naming `request_id`, for a position past the prompt.
void extend_with_prompt(const RequestInput& input, int64_t request_id, int64_t end, std::vector<int32_t>& tokens);

// The request id a request's random draws are keyed by: 0 for a seeded
// request (its draws then depend on its seed and position only), else its id.
inline int64_t draw_request_id(const RequestInput* input, int64_t request_id) {
  return input && input->seeded ? 0 : request_id;
}

// Whether `token`, the request's `generated`-th output token (1-based),
// ends it: for a request without input, EOS when the run honours it; with
// input, EOS (unless ignore_eos) or one of its stop token ids, once
// min_tokens have been generated.
bool request_stops(const RequestInput* input, bool honor_eos, int64_t eos_token_id, int32_t token, size_t generated);

class ServedExecutor : public Executor {
 public:
  // Serve `request_id` with what its client sent (before it is scheduled);
  // forgotten when it finishes (on_request_finished). Throws
  // std::invalid_argument for input the model cannot take.
  virtual void set_request_input(int64_t request_id, RequestInput input) = 0;
  // Prompt and generated tokens of a live request (nullptr once finished).
  virtual const std::vector<int32_t>* tokens_of(int64_t request_id) const = 0;
  // What speculation did so far; nullptr for an executor that does not speculate.
  virtual const SpeculativeStats* speculative_stats() const { return nullptr; }
};

}  // namespace servesim
