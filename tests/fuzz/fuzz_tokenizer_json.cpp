// libFuzzer: the Hugging Face tokenizer.json reader (engine/text/tokenizer.h,
// parse_tokenizer_json) in memory; a tokenizer it accepts must then encode
// sample texts to ids inside the vocabulary and decode them. (Not back to
// the same bytes: an added token with lstrip/rstrip drops white space, and
// one may reuse a vocab entry's id; fuzz_tokenizer_encode checks the round
// trip on the committed fixtures.)
#include "engine/text/tokenizer.h"
#include "fuzz_support.h"
#include "sim/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  try {
    const auto tok = parse_tokenizer_json(fuzz::as_text(data, size), "fuzz.json", 1 << 17);
    for (std::string_view text : {"hello world, it's 1234 \n\n naïve 😀", "<|endoftext|> \xff\xfe x"}) {
      const std::vector<int32_t> ids = tok->encode(text);
      for (int32_t id : ids) fuzz::require(id >= 0 && id < tok->vocab_size(), "encode gave an id outside the vocabulary");
      (void)tok->decode(ids);
    }
  } catch (const InputError&) {
  }
  return 0;
}
