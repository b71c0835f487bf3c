#include "kernels/decoder/prompt_tokens.h"

#include <stdexcept>

#include <fmt/format.h>

namespace servesim {

void PromptTokens::fill(const ScheduledSequence& item, std::vector<int32_t>& tokens, int64_t end) const {
  if (!item.tokens) {
    while (int64_t(tokens.size()) < end)
      tokens.push_back(prompt_token_id(seed_, vocab_, item.request_id, int64_t(tokens.size())));
    return;
  }
  int64_t span_start = 0;
  for (const TokenSpan& span : item.tokens->prompt_spans) {
    if (int64_t(tokens.size()) >= end) return;
    const int64_t span_end = span_start + span.length;
    if (int64_t(tokens.size()) < span_end) {
      auto quoted = generated_.find(span.source);
      for (int64_t p = int64_t(tokens.size()); p < std::min(span_end, end); ++p) {
        const int64_t at = span.offset + (p - span_start);
        if (quoted == generated_.end()) {
          tokens.push_back(token_id_of_source(seed_, vocab_, span.source, at));
        } else if (at < int64_t(quoted->second.size())) {
          tokens.push_back(quoted->second[size_t(at)]);
        } else {
          throw std::logic_error(fmt::format("request {} quotes output token {} of an earlier request that "
                                             "generated {} (did it stop at EOS?)",
                                             item.request_id, at, quoted->second.size()));
        }
      }
    }
    span_start = span_end;
  }
  if (int64_t(tokens.size()) < end)
    throw std::logic_error(fmt::format("request {}: position {} is past its prompt of {} tokens and was never "
                                       "generated", item.request_id, tokens.size(), span_start));
}

}  // namespace servesim
