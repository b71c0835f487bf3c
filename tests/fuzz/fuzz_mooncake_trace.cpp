// libFuzzer: the Mooncake JSON-lines parser (sim/mooncake_trace.h) in
// memory, then the prompt spans and scaled lengths of every line it accepts.
#include <vector>

#include "fuzz_support.h"
#include "sim/errors.h"
#include "sim/mooncake_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  const std::string_view text = fuzz::as_text(data, size);
  std::vector<std::string_view> lines;
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  try {
    const MooncakeTrace trace = parse_mooncake_trace("fuzz.jsonl", lines);
    for (const MooncakeLine& line : trace.lines) {
      fuzz::require(line.first_id + line.num_ids <= trace.hash_ids.size(), "ids past the end");
      for (int32_t block : {kMooncakeBlockTokens, 16, 1}) {
        const int32_t length = scaled_mooncake_length(line.input_length, block);
        const auto spans = mooncake_prompt_spans(trace.ids_of(line), length, block);
        int64_t total = 0;
        for (const TokenSpan& s : spans) total += s.length;
        fuzz::require(total == length, "prompt spans do not sum to the prompt length");
        fuzz::require(scaled_mooncake_length(line.output_length, block) >= 1, "scaled output length < 1");
      }
    }
  } catch (const InputError&) {
  }
  return 0;
}
