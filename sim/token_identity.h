// Which tokens a request's prompt holds, for prefix caching. A prompt is a
// list of spans, each a stretch of one token source: token `offset + j` of
// source `source`. Two prompts share a token exactly where they name the
// same (source, position), so shared system prompts, documents, Mooncake
// hash ids and multi-turn histories are spans of a common source. A request's
// generated tokens are the positions 0, 1, 2, ... of its output source, so
// the next turn of a conversation can quote them.
//
// The simulator never needs the token ids themselves: a KV block's key is a
// chained hash of the spans it covers (sim/kv_block_pool.h). The real engine
// turns a (source, position) into a vocabulary id (token_id_of_source) or,
// for an output source, into the token it sampled there.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/random.h"

namespace servesim {

struct TokenSpan {
  uint64_t source = 0;  // never 0 for a real source
  int32_t offset = 0;   // first position of the source this span holds
  int32_t length = 0;   // tokens, >= 1

  bool operator==(const TokenSpan&) const = default;
};

// The kinds of token source; a source id is a hash of (kind, a, b), so ids of
// different kinds never meet.
enum class TokenSourceKind : uint64_t {
  MooncakeBlock = 1,  // a = the trace's hash id (512 tokens)
  SharedPrefix = 2,   // a = group
  RequestTail = 3,    // a = request id: a prompt's own, unshared tokens
  Output = 4,         // a = request id: what the request generates
  UserMessage = 5,    // a = session, b = turn: a new message of a conversation
};

inline uint64_t token_source(TokenSourceKind kind, uint64_t a, uint64_t b = 0) {
  const uint64_t h = splitmix64_finalize(splitmix64_finalize(uint64_t(kind) * 0x9E3779B97F4A7C15ULL ^ a) + b);
  return h == 0 ? 1 : h;
}

// A request's token identity. Without prompt spans a request has none: its
// prompt is taken to share nothing, and the prefix cache leaves it alone.
struct TokenIdentity {
  std::vector<TokenSpan> prompt_spans;  // their lengths sum to the prompt's tokens
  uint64_t output_source = 0;           // generated token j is position j of this source

  bool empty() const { return prompt_spans.empty(); }
  int64_t prompt_tokens() const {
    int64_t n = 0;
    for (const TokenSpan& s : prompt_spans) n += s.length;
    return n;
  }
};

// The vocabulary id the real engine uses for position `position` of a
// prompt source, for a vocabulary of `vocab` (>= 4) ids. Ids 0..2 are
// special in Llama-2-style vocabularies; prompts avoid them. A partial block
// of a source is a prefix of the full one by construction.
inline int32_t token_id_of_source(uint64_t seed, int64_t vocab, uint64_t source, int64_t position) {
  const uint64_t h = splitmix64_finalize(splitmix64_finalize(seed ^ source) + uint64_t(position));
  return int32_t(3 + int64_t(h % uint64_t(vocab - 3)));
}

}  // namespace servesim
