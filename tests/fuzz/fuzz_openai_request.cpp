// libFuzzer: the OpenAI request parser (engine/server/openai_request.h) on
// any body, at both endpoints, with the byte-level tokenizer and the Llama-3
// fixture. ApiError is its expected answer (and its body must be JSON);
// an accepted request must fit the context and the vocabulary.
#include <nlohmann/json.hpp>

#include "engine/server/openai_request.h"
#include "engine/text/tokenizer.h"
#include "fuzz_support.h"
#include "sim/errors.h"

#ifndef SERVESIM_TOKENIZER_DIR
#error "SERVESIM_TOKENIZER_DIR (tests/data/tokenizers) must be defined"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  static const auto byte_level = make_byte_tokenizer(512);
  static const auto llama3 = load_tokenizer_json(SERVESIM_TOKENIZER_DIR "/tiny_llama3.json", 300);
  const std::string_view body = fuzz::as_text(data, size);
  for (const Tokenizer* tok : {byte_level.get(), llama3.get()}) {
    const ApiContext context{"m", tok, tok->vocab_size(), 256};
    for (ApiEndpoint endpoint : {ApiEndpoint::Completions, ApiEndpoint::ChatCompletions}) {
      try {
        const CompletionRequest r = parse_completion_request(body, endpoint, context);
        fuzz::require(!r.prompt_ids.empty(), "an accepted request with an empty prompt");
        fuzz::require(int64_t(r.prompt_ids.size()) + r.max_tokens <= context.max_model_len,
                      "an accepted request past the context length");
        for (int32_t id : r.prompt_ids) fuzz::require(id >= 0 && id < context.vocab_size, "a prompt id outside the vocabulary");
        for (int32_t id : r.stop_token_ids) fuzz::require(id >= 0 && id < context.vocab_size, "a stop id outside the vocabulary");
        fuzz::require(r.min_tokens >= 0 && r.min_tokens <= r.max_tokens, "min_tokens outside [0, max_tokens]");
      } catch (const ApiError& e) {
        fuzz::require(e.status() >= 400 && e.status() < 600, "an ApiError status outside 4xx/5xx");
        fuzz::require(nlohmann::json::accept(e.body()), "an ApiError body that is not JSON");
      } catch (const InputError&) {
      }
    }
  }
  return 0;
}
