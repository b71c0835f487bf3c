// The iteration log's format: one JSON line per iteration a server ran
// (`servesim serve --iteration-log`), its writer's line and its reader.
//
//   {"index":N,"start_s":T,"measured_s":D,"sequences":[[request_id,
//    query_tokens,cached_tokens,prefill,samples,emitted],...]}
// prefill and samples are 0 or 1; emitted is the tokens the step emitted
// for the sequence (-1: not reported). start_s is on the server's clock.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "validate/record.h"

namespace servesim {

// The line for one iteration (without its newline).
std::string iteration_log_line(int64_t index, double start_s, const RecordedIteration& iteration);

struct IterationLog {
  std::string source;
  std::vector<RecordedIteration> iterations;
  std::vector<double> starts_s;  // one per iteration, server clock
};
// Throws InputError naming the source, the line and what is wrong: a line
// that is not JSON, a missing or mistyped field, negative counts, an
// iteration without sequences. A last line cut off mid-write (a server
// killed while writing it: no newline after it) is the one exception: it is
// dropped and said in `truncated_last_line`.
struct IterationLogRead {
  IterationLog log;
  bool truncated_last_line = false;
};
IterationLogRead parse_iteration_log(std::string_view text, const std::string& source);
// The same, of a file (InputError when it cannot be opened).
IterationLogRead read_iteration_log(const std::string& path);

}  // namespace servesim
