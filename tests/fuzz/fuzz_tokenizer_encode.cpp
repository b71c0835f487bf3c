// libFuzzer: encoding any bytes with the committed tokenizers (the
// byte-level one and the two tests/data/tokenizers fixtures): the ids are in
// the vocabulary and decode back to the same bytes, the split patterns'
// pre-tokens concatenate to the text, and a chat with the bytes as content
// encodes.
#include <string>
#include <vector>

#include "engine/text/byte_level_pretokenizer.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"
#include "fuzz_support.h"

#ifndef SERVESIM_TOKENIZER_DIR
#error "SERVESIM_TOKENIZER_DIR (tests/data/tokenizers) must be defined"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  static const std::vector<std::unique_ptr<Tokenizer>> tokenizers = [] {
    std::vector<std::unique_ptr<Tokenizer>> out;
    out.push_back(make_byte_tokenizer(1024));
    out.push_back(load_tokenizer_json(SERVESIM_TOKENIZER_DIR "/tiny_gpt2.json", 300));
    out.push_back(load_tokenizer_json(SERVESIM_TOKENIZER_DIR "/tiny_llama3.json", 300));
    return out;
  }();
  const std::string_view text = fuzz::as_text(data, size);
  for (const auto& tok : tokenizers) {
    const std::vector<int32_t> ids = tok->encode(text);
    for (int32_t id : ids) fuzz::require(id >= 0 && id < tok->vocab_size(), "encode gave an id outside the vocabulary");
    fuzz::require(tok->decode(ids) == text, "decode(encode(text)) != text");
    const std::string chat = apply_chat_template({{"user", std::string(text)}}, *tok);
    (void)tok->encode(chat);
  }
  for (auto pattern : {text::SplitPattern::Gpt2, text::SplitPattern::Llama3, text::SplitPattern::Qwen2}) {
    std::vector<std::string_view> pieces;
    text::split_pretokens(text, pattern, pieces);
    std::string joined;
    for (std::string_view p : pieces) {
      fuzz::require(!p.empty(), "an empty pre-token");
      joined += p;
    }
    fuzz::require(joined == text, "pre-tokens do not concatenate to the text");
  }
  return 0;
}
