// The prompts `servesim bench` sends, built to a workload's token counts.
//   completions: token ids, as vLLM's benchmark sends them. The ids are the
//     ones `servesim run` feeds its decoder for the same workload and seed
//     (kernels/decoder/prompt_tokens.h): a request without token identity
//     draws a hash of (seed, request, position); one with identity (shared
//     prefixes, Mooncake hash ids) draws each position from its (source,
//     position), so prompts that share a prefix send identical leading ids.
//     Ids are in [3, vocab) (0..2 are special in Llama-style vocabularies).
//   chat: text, one "token unit" per prompt token, drawn from the same ids:
//     words (a common short English word each, one token in GPT-, Llama- and
//     Qwen-style BPE vocabularies) or letters (one ASCII letter each, one
//     token for servesim serve's byte-level tokenizer). The chat template
//     adds tokens, and a tokenizer may merge words, so the server's
//     usage.prompt_tokens is what requests.csv reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/request.h"

namespace servesim {

enum class ChatText { Words, Letters };
// "words" | "letters" (InputError naming --chat-text otherwise).
ChatText parse_chat_text(const std::string& name);

// The prompt's ids (request.prompt_tokens of them). Throws
// std::invalid_argument for a span that quotes an earlier request's output
// (sessions: bench refuses them before this).
std::vector<int32_t> bench_prompt_ids(const Request& request, uint64_t seed, int64_t vocab);

// The chat text of `ids`: their units joined by spaces (words) or
// concatenated (letters).
std::string bench_prompt_text(const std::vector<int32_t>& ids, ChatText style);

}  // namespace servesim
