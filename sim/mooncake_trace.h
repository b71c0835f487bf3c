// The Mooncake trace format (FAST'25 release): one JSON object a line with
// `timestamp` (ms since the trace's start), `input_length` and
// `output_length` (tokens) and `hash_ids`, one id per 512-token block of the
// prompt. Ids are chained prefix hashes, so two prompts with the same first
// n ids share their first n blocks; the last block may be partial. The
// parser is apart from trace_reader.cpp's sorting and windowing, which every
// format shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/token_identity.h"

namespace servesim {

// Tokens of one Mooncake block (the trace's hash-id granularity).
inline constexpr int32_t kMooncakeBlockTokens = 512;

struct MooncakeLine {
  double timestamp_s = 0;     // seconds since the trace's start, as written (not shifted)
  int32_t input_length = 0;   // prompt tokens, >= 1
  int32_t output_length = 0;  // output tokens, >= 1
  size_t first_id = 0;        // its ids are hash_ids[first_id, first_id + num_ids)
  size_t num_ids = 0;         // ceil(input_length / 512)
};

struct MooncakeTrace {
  std::vector<MooncakeLine> lines;  // in file order
  std::vector<uint64_t> hash_ids;   // every line's ids, one after another

  std::span<const uint64_t> ids_of(const MooncakeLine& line) const {
    return {hash_ids.data() + line.first_id, line.num_ids};
  }
};

// Parses `lines` (line i of the file is lines[i], without its newline) of
// the file `path`. Errors (InputError) name the file, the line and the field:
// a line that is not a JSON object, a missing field, a negative or
// non-finite timestamp, a zero, negative or non-integer length, a hash id
// that is not an integer >= 0, or a number of ids other than
// ceil(input_length / 512). Fields other than these four are ignored.
MooncakeTrace parse_mooncake_trace(const std::string& path,
                                   const std::vector<std::string_view>& lines);

// The prompt of a Mooncake request: block i is span {MooncakeBlock(id_i), 0,
// min(B, input_length - B i)} with B = block_tokens (the trace's 512, or
// fewer for a scaled replay), so the spans' lengths sum to input_length.
std::vector<TokenSpan> mooncake_prompt_spans(std::span<const uint64_t> hash_ids,
                                             int32_t input_length,
                                             int32_t block_tokens = kMooncakeBlockTokens);

// A length of the trace scaled to `block_tokens` tokens per hash id:
// ceil(length * block_tokens / 512), at least 1. A prompt's scaled length
// still needs exactly its ids: ceil(scaled / block_tokens) = ceil(length / 512).
int32_t scaled_mooncake_length(int32_t length, int32_t block_tokens);

}  // namespace servesim
