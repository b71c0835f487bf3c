// The OpenAI API as `servesim bench` speaks it: the bodies of streamed
// /v1/completions and /v1/chat/completions requests, and what one
// server-sent event of the answer says.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace servesim {

enum class OpenAiEndpoint { Completions, Chat };

// "completions" | "chat" (InputError naming --endpoint otherwise).
OpenAiEndpoint parse_openai_endpoint(const std::string& name);
std::string to_string(OpenAiEndpoint e);
// The route under the base URL's path: "/v1/completions" or "/v1/chat/completions".
std::string endpoint_route(OpenAiEndpoint e);

struct SamplingRequest {
  std::string model;
  int32_t max_tokens = 1;
  bool ignore_eos = false;  // vLLM's and SGLang's extension; omitted when false
};

// {"model", "prompt": [ids], "max_tokens", "temperature": 0, "stream": true,
//  "stream_options": {"include_usage": true}, ["ignore_eos": true]}
std::string completions_body(const SamplingRequest& r, std::span<const int32_t> prompt_ids);
// The same for chat: "messages": [{"role": "user", "content": text}].
// "max_tokens" (not "max_completion_tokens"): vLLM, SGLang and TGI all take it.
std::string chat_body(const SamplingRequest& r, const std::string& prompt_text);

// One event of a streamed answer.
struct StreamEvent {
  bool done = false;          // "data: [DONE]"
  bool token_chunk = false;   // "choices" is a non-empty array: vLLM bench's token chunk
  std::string text;           // choices[0].text (completions) or .delta.content (chat)
  std::optional<int64_t> completion_tokens, prompt_tokens;  // from a non-null "usage"
  std::optional<std::string> error;  // an {"error": {...}} event, or data that is not JSON
};

StreamEvent parse_stream_event(std::string_view data);

// The message of an OpenAI-style error body ({"error": {"message": ...}},
// {"message": ...} or TGI's {"error": "..."}), else the body's first 200 bytes.
std::string error_message_of_body(std::string_view body);

}  // namespace servesim
