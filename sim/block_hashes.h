// The prefix cache's keys: one per full KV block of a sequence, each a
// function of its parent block's key and of the tokens the block holds
// (vLLM V1's hash_block_tokens, kv_cache_utils.py): the parent's key plus a
// hash of the block's tokens and of its index in the sequence. The sum
// chains the keys (a block's key depends on every token before it) while
// the blocks' own hashes, which do not depend on each other, are computed
// side by side. Tokens are named by their TokenIdentity (source, position)
// instead of by vocabulary ids, so a block's own hash is of the maximal runs
// of consecutive positions of one source it covers: the same tokens always
// give the same runs, however the prompt's spans were cut.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/token_identity.h"

namespace servesim {

// The key every chain starts from (vLLM's NONE_HASH, a fixed seed here so
// runs are reproducible).
inline constexpr uint64_t kRootBlockKey = 0x5E55E5A1CAC4E001ULL;

// Extends `keys` (the keys of blocks 0 .. keys.size()-1, as an earlier call
// left them) with the keys of every further block that `known_tokens`
// tokens fill: the prompt's spans, then positions 0 .. known_tokens - prompt
// - 1 of identity.output_source. Work is proportional to the new blocks and
// the prompt's spans, never to earlier blocks' tokens.
void extend_block_keys(const TokenIdentity& identity, int64_t known_tokens, int32_t block_size,
                       std::vector<uint64_t>& keys);

}  // namespace servesim
