#include "engine/client/bench_prompts.h"

#include <array>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/decoder/prompt_tokens.h"
#include "sim/errors.h"

namespace servesim {

ChatText parse_chat_text(const std::string& name) {
  if (name == "words") return ChatText::Words;
  if (name == "letters") return ChatText::Letters;
  throw InputError(fmt::format("--chat-text: '{}' is not one of words, letters", name));
}

std::vector<int32_t> bench_prompt_ids(const Request& request, uint64_t seed, int64_t vocab) {
  std::vector<int32_t> ids;
  ids.reserve(size_t(request.prompt_tokens));
  if (request.tokens.empty()) {
    for (int64_t p = 0; p < request.prompt_tokens; ++p) ids.push_back(prompt_token_id(seed, vocab, request.id, p));
    return ids;
  }
  for (const TokenSpan& span : request.tokens.prompt_spans)
    for (int32_t j = 0; j < span.length; ++j)
      ids.push_back(token_id_of_source(seed, vocab, span.source, int64_t(span.offset) + j));
  if (int64_t(ids.size()) != request.prompt_tokens)
    throw std::invalid_argument(fmt::format("request {}: its token spans hold {} tokens, its prompt {}", request.id,
                                            ids.size(), request.prompt_tokens));
  return ids;
}

namespace {

// Short, frequent English words: each is one token (with its leading space)
// in the common BPE vocabularies.
constexpr std::array<const char*, 64> kWords = {
    "the",  "of",   "and",  "to",   "in",   "is",   "it",   "that", "for",  "you",  "was",  "with", "on",
    "as",   "have", "but",  "be",   "they", "at",   "one",  "this", "from", "by",   "not",  "or",   "we",
    "an",   "all",  "his",  "her",  "can",  "said", "there", "use", "each", "which", "she", "do",   "how",
    "their", "if",  "will", "up",   "other", "about", "out", "many", "then", "them", "these", "so", "some",
    "would", "make", "like", "him", "into", "time", "has",  "look", "two",  "more", "go",   "see"};

}  // namespace

std::string bench_prompt_text(const std::vector<int32_t>& ids, ChatText style) {
  std::string text;
  text.reserve(ids.size() * (style == ChatText::Words ? 5 : 1));
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto id = uint32_t(ids[i]);
    if (style == ChatText::Letters) {
      text.push_back(char('a' + id % 26));
    } else {
      if (i > 0) text.push_back(' ');
      text += kWords[id % kWords.size()];
    }
  }
  return text;
}

}  // namespace servesim
