#include "kernels/decoder/served_executor.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace servesim {

void check_request_input(const RequestInput& input, int64_t vocab, const char* who) {
  if (input.prompt.empty()) throw std::invalid_argument(fmt::format("{}: an empty prompt", who));
  for (int32_t id : input.prompt)
    if (id < 0 || id >= vocab)
      throw std::invalid_argument(fmt::format("{}: prompt token {} outside the vocabulary of {}", who, id, vocab));
  input.sampling.validate();
}

bool request_stops(const RequestInput* input, bool honor_eos, int64_t eos_token_id, int32_t token, size_t generated) {
  if (!input) return honor_eos && token == eos_token_id;
  if (generated < size_t(input->min_tokens)) return false;
  if (input->stop_at_eos && token == eos_token_id) return true;
  return std::find(input->stop_token_ids.begin(), input->stop_token_ids.end(), token) != input->stop_token_ids.end();
}

}  // namespace servesim
