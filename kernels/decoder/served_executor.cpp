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

void extend_with_prompt(const RequestInput& input, int64_t request_id, int64_t end, std::vector<int32_t>& tokens) {
  if (end > int64_t(std::max(tokens.size(), input.prompt.size())))
    throw std::logic_error(fmt::format("request {}: position {} is past its prompt of {} tokens", request_id, end - 1,
                                       input.prompt.size()));
  while (int64_t(tokens.size()) < end) tokens.push_back(input.prompt[tokens.size()]);
}

bool request_stops(const RequestInput* input, bool honor_eos, int64_t eos_token_id, int32_t token, size_t generated) {
  if (!input) return honor_eos && token == eos_token_id;
  if (generated < size_t(input->min_tokens)) return false;
  if (input->stop_at_eos && token == eos_token_id) return true;
  return std::find(input->stop_token_ids.begin(), input->stop_token_ids.end(), token) != input->stop_token_ids.end();
}

}  // namespace servesim
