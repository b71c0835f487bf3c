// libFuzzer: a server's iteration log (validate/iteration_log_format.h,
// parse_iteration_log), then the writer's line of every iteration it
// accepts, read back: the same fields.
#include <cmath>

#include "fuzz_support.h"
#include "sim/errors.h"
#include "validate/iteration_log_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  try {
    const IterationLogRead read = parse_iteration_log(fuzz::as_text(data, size), "fuzz");
    const IterationLog& log = read.log;
    fuzz::require(!log.iterations.empty() && log.iterations.size() == log.starts_s.size(), "iterations vs starts");
    std::string text;
    for (size_t k = 0; k < log.iterations.size(); ++k) {
      const RecordedIteration& it = log.iterations[k];
      fuzz::require(std::isfinite(it.measured_s) && it.measured_s >= 0, "measured_s not finite and >= 0");
      fuzz::require(std::isfinite(log.starts_s[k]) && log.starts_s[k] >= 0, "start_s not finite and >= 0");
      fuzz::require(!it.sequences.empty(), "an accepted iteration without sequences");
      int64_t tokens = 0;
      for (const RecordedSequence& s : it.sequences) {
        fuzz::require(s.num_query_tokens >= 1 && s.num_cached_tokens >= 0, "a sequence's token counts");
        fuzz::require(s.emitted_tokens >= -1 && s.emitted_tokens <= s.num_query_tokens, "emitted out of range");
        tokens += s.num_query_tokens;
      }
      fuzz::require(tokens == int64_t(it.prefill_tokens) + it.decode_tokens, "token sums");
      fuzz::require(it.prefill_sequences + it.decode_sequences == int32_t(it.sequences.size()), "sequence counts");
      text += iteration_log_line(int64_t(k), log.starts_s[k], it) + "\n";
    }
    const IterationLogRead again = parse_iteration_log(text, "fuzz round trip");
    fuzz::require(!again.truncated_last_line && again.log.iterations.size() == log.iterations.size(),
                  "the writer's lines read back to other iterations");
    for (size_t k = 0; k < log.iterations.size(); ++k) {
      const RecordedIteration& a = log.iterations[k];
      const RecordedIteration& b = again.log.iterations[k];
      fuzz::require(a.measured_s == b.measured_s && log.starts_s[k] == again.log.starts_s[k], "times round trip");
      fuzz::require(a.sequences.size() == b.sequences.size(), "sequences round trip");
      for (size_t i = 0; i < a.sequences.size(); ++i) {
        const RecordedSequence& x = a.sequences[i];
        const RecordedSequence& y = b.sequences[i];
        fuzz::require(x.request_id == y.request_id && x.num_query_tokens == y.num_query_tokens &&
                          x.num_cached_tokens == y.num_cached_tokens && x.is_prefill == y.is_prefill &&
                          x.samples == y.samples && x.emitted_tokens == y.emitted_tokens,
                      "a sequence's fields round trip");
      }
    }
  } catch (const InputError&) {
  }
  return 0;
}
