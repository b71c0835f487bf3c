// Choosing the next token from logits: greedy, temperature, top-p (nucleus).
#pragma once

#include <cstdint>
#include <span>

namespace servesim {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (argmax)
  double top_p = 1.0;        // keep the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;

  void validate() const;  // InputError naming --temperature / --top-p
};

// The token for `logits` [V]. Sampling draws one uniform from a generator
// seeded by (seed, request, position), so a sequence's tokens do not depend
// on which other sequences share its batch. Greedy breaks ties by lowest id.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params,
                     int64_t request_id, int64_t position);

// The uniform on [0, 1) that sample_token draws for (request, position):
// a hash of (seed, request, position), 53 bits.
double sampling_uniform(const SamplingParams& params, int64_t request_id, int64_t position);

// The distribution sample_token draws from (softmax of logits / T, cut to
// the top-p nucleus and renormalised), for tests. Greedy: one-hot.
void sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                           std::span<double> probabilities);

}  // namespace servesim
