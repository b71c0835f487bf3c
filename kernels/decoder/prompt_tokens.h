// The token ids of a request's prompt in a real run: a hash of (seed,
// request, position). Shared by the plain and the speculative executors so
// that runs with the same seed serve identical prompts.
#pragma once

#include <cstdint>

#include "sim/random.h"

namespace servesim {

// The prompt token at `position` of `request_id` for a vocabulary of `vocab`
// (>= 4) ids. Ids 0..2 are special in Llama-2-style vocabularies; prompts
// avoid them.
inline int32_t prompt_token_id(uint64_t seed, int64_t vocab, int64_t request_id, int64_t position) {
  const uint64_t h = splitmix64_finalize(splitmix64_finalize(seed ^ splitmix64_finalize(uint64_t(request_id))) +
                                         uint64_t(position));
  return int32_t(3 + int64_t(h % uint64_t(vocab - 3)));
}

}  // namespace servesim
