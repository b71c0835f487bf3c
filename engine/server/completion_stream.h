// One completion's text and the OpenAI-API JSON that carries it: output
// tokens are detokenized as they come, stop strings are matched, and each
// delta is released only once it cannot be part of a stop string or of an
// unfinished UTF-8 character (as vLLM's incremental detokenizer does).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "engine/server/openai_request.h"

namespace servesim {

struct CompletionUsage {
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

class CompletionStream {
 public:
  CompletionStream(const CompletionRequest& request, const Tokenizer& tokenizer, std::string id, int64_t created);

  // New output tokens; returns the text that may be sent now. Once a stop
  // string appears, stopped() is true, the text ends before it and later
  // tokens are ignored.
  std::string add_tokens(std::span<const int32_t> ids);
  // At the end of the request: the text held back so far.
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }  // everything released so far
  const std::string& prompt_text() const { return prompt_text_; }  // with echo
  int32_t completion_tokens() const { return completion_tokens_; }

  // Server-sent-event payloads ("data: ...\n\n"), streamed responses.
  std::string role_event() const;  // chat: the first chunk, {"role": "assistant"}
  std::string delta_event(const std::string& text, const std::optional<std::string>& finish_reason) const;
  std::string usage_event(const CompletionUsage& usage) const;
  static std::string done_event() { return "data: [DONE]\n\n"; }
  // The whole response of a request that was not streamed.
  std::string full_response(const std::string& finish_reason, const CompletionUsage& usage) const;

 private:
  std::string chunk_object() const;  // "text_completion" or "chat.completion.chunk"

  CompletionRequest request_;
  const Tokenizer& tokenizer_;
  std::string id_;
  int64_t created_;
  std::string prompt_text_;  // echo
  std::string decoded_;      // every output token's bytes (up to a stop string)
  size_t released_ = 0;      // bytes of decoded_ handed out
  std::string text_;
  bool stopped_ = false;
  int32_t completion_tokens_ = 0;
};

// Bytes of `s` up to `end` that do not end inside a UTF-8 sequence still
// missing its continuation bytes.
size_t utf8_complete_prefix(const std::string& s, size_t begin, size_t end);

}  // namespace servesim
