// libFuzzer: the trace readers (sim/trace_reader.h) on any file, in each of
// the three formats, with and without a window and a rate scale.
#include <cmath>

#include "fuzz_support.h"
#include "sim/errors.h"
#include "sim/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  const std::string& path = fuzz::write_input(data, size, ".trace");
  for (TraceFormat format : {TraceFormat::Azure, TraceFormat::Csv, TraceFormat::Mooncake}) {
    for (int variant = 0; variant < 2; ++variant) {
      TraceOptions options;
      options.path = path;
      options.format = format;
      if (variant == 1) {
        options.rate_scale = 3.0;
        options.window_start_s = 0.5;
        options.window_duration_s = 10.0;
        options.max_requests = 3;
        options.mooncake_block_tokens = 16;
      }
      try {
        const std::vector<Request> requests = read_trace(options);
        fuzz::require(!requests.empty() || variant == 1, "read_trace returned no request without a window");
        for (const Request& r : requests) fuzz::require(std::isfinite(r.arrival_s) && r.arrival_s >= 0, "bad arrival");
      } catch (const InputError&) {
      }
    }
  }
  return 0;
}
