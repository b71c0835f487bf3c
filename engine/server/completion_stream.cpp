#include "engine/server/completion_stream.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace servesim {

using nlohmann::json;

namespace {

// Invalid UTF-8 (a random-weight model's bytes) becomes U+FFFD.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(const CompletionUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

}  // namespace

size_t utf8_complete_prefix(const std::string& s, size_t begin, size_t end) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past `end`.
  for (size_t back = 1; back <= 4 && back <= end - begin; ++back) {
    const auto c = static_cast<unsigned char>(s[end - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking
    const size_t need = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? end - back : end;
  }
  return end;
}

CompletionStream::CompletionStream(const CompletionRequest& request, const Tokenizer& tokenizer, std::string id,
                                   int64_t created)
    : request_(request), tokenizer_(tokenizer), id_(std::move(id)), created_(created) {
  if (request_.echo) prompt_text_ = tokenizer_.decode(request_.prompt_ids);
  request_.prompt_ids.clear();
  request_.prompt_ids.shrink_to_fit();
}

std::string CompletionStream::add_tokens(std::span<const int32_t> ids) {
  if (stopped_) return {};
  completion_tokens_ += int32_t(ids.size());
  const size_t old_size = decoded_.size();
  decoded_ += tokenizer_.decode(ids);
  // A stop string that ends in the new bytes: the output ends before it.
  size_t longest_stop = 0;
  for (const std::string& stop : request_.stop) longest_stop = std::max(longest_stop, stop.size());
  const size_t search_from = old_size >= longest_stop ? old_size - longest_stop + 1 : 0;
  size_t cut = std::string::npos;
  for (const std::string& stop : request_.stop) {
    const size_t at = decoded_.find(stop, std::max(search_from, released_));
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  size_t end = decoded_.size();
  if (cut != std::string::npos) {
    stopped_ = true;
    decoded_.resize(cut);
    end = cut;
  } else {
    // Hold back a tail that may be the start of a stop string.
    size_t hold = 0;
    for (const std::string& stop : request_.stop)
      for (size_t k = std::min(stop.size() - 1, decoded_.size() - released_); k > hold; --k)
        if (decoded_.compare(decoded_.size() - k, k, stop, 0, k) == 0) {
          hold = k;
          break;
        }
    end = utf8_complete_prefix(decoded_, released_, decoded_.size() - hold);
  }
  std::string out = decoded_.substr(released_, end - released_);
  released_ = end;
  text_ += out;
  return out;
}

std::string CompletionStream::flush() {
  std::string out = decoded_.substr(released_);
  released_ = decoded_.size();
  text_ += out;
  return out;
}

std::string CompletionStream::chunk_object() const {
  return request_.endpoint == ApiEndpoint::Completions ? "text_completion" : "chat.completion.chunk";
}

std::string CompletionStream::role_event() const {
  json choice = {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  json chunk = {{"id", id_}, {"object", chunk_object()}, {"created", created_}, {"model", request_.model},
                {"choices", json::array({choice})}};
  if (request_.include_usage) chunk["usage"] = nullptr;
  return "data: " + dump(chunk) + "\n\n";
}

std::string CompletionStream::delta_event(const std::string& text, const std::optional<std::string>& finish_reason) const {
  json choice = {{"index", 0}, {"logprobs", nullptr}};
  choice["finish_reason"] = finish_reason ? json(*finish_reason) : json(nullptr);
  if (request_.endpoint == ApiEndpoint::Completions) {
    choice["text"] = text;
  } else {
    choice["delta"] = finish_reason && text.empty() ? json::object() : json{{"content", text}};
  }
  json chunk = {{"id", id_}, {"object", chunk_object()}, {"created", created_}, {"model", request_.model},
                {"choices", json::array({choice})}};
  if (request_.include_usage) chunk["usage"] = nullptr;
  return "data: " + dump(chunk) + "\n\n";
}

std::string CompletionStream::usage_event(const CompletionUsage& usage) const {
  json chunk = {{"id", id_}, {"object", chunk_object()}, {"created", created_}, {"model", request_.model},
                {"choices", json::array()}, {"usage", usage_json(usage)}};
  return "data: " + dump(chunk) + "\n\n";
}

std::string CompletionStream::full_response(const std::string& finish_reason, const CompletionUsage& usage) const {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  json response = {{"id", id_}, {"created", created_}, {"model", request_.model}, {"usage", usage_json(usage)}};
  if (request_.endpoint == ApiEndpoint::Completions) {
    choice["text"] = prompt_text_ + text_;
    response["object"] = "text_completion";
  } else {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
    response["object"] = "chat.completion";
  }
  response["choices"] = json::array({choice});
  return dump(response);
}

}  // namespace servesim
