// The body of an OpenAI-API request (POST /v1/completions and
// /v1/chat/completions), checked field by field: what the engine serves, or
// an ApiError naming the field, with the HTTP status to answer.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/tokenizer.h"

namespace servesim {

// An error answered as OpenAI does: status, {"error": {message, type, param, code}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  // "invalid_request_error" for 4xx, "server_error" otherwise, unless given.
  std::string type() const;
  // The JSON error body.
  std::string body() const;

 private:
  int status_;
  std::string param_, type_;
};

enum class ApiEndpoint { Completions, ChatCompletions };

// What the server knows when it reads a request.
struct ApiContext {
  std::string model_name;       // the one model served (--served-model-name)
  const Tokenizer* tokenizer = nullptr;
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;    // prompt + max_tokens at most
};

struct CompletionRequest {
  ApiEndpoint endpoint = ApiEndpoint::Completions;
  std::string model;
  std::vector<int32_t> prompt_ids;  // [prompt tokens]
  int32_t max_tokens = 16;
  double temperature = 1.0, top_p = 1.0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // stop strings (not in the output)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t min_tokens = 0;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt's text before the output
};

// Reads `body` for `endpoint`. Throws ApiError (400 malformed JSON, a field
// of the wrong type or out of range, an unsupported option; 404 an unknown
// model) naming the field.
CompletionRequest parse_completion_request(std::string_view body, ApiEndpoint endpoint, const ApiContext& context);

}  // namespace servesim
