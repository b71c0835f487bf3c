// Readers for request traces: the Azure LLM inference CSV and a plain CSV.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "sim/request.h"

namespace servesim {

enum class TraceFormat {
  Azure,  // TIMESTAMP,ContextTokens,GeneratedTokens (Azure Public Dataset 2023)
  Csv,    // arrival_s,prompt_tokens,output_tokens (header line required)
};

// Throws InputError for an unknown name ("azure" or "csv" are accepted).
TraceFormat parse_trace_format(const std::string& name);

struct TraceOptions {
  std::string path;
  TraceFormat format = TraceFormat::Azure;
  // Arrival times are divided by this: 2.0 doubles the request rate.
  double rate_scale = 1.0;
  // Keep only requests whose arrival, in seconds since the trace's first
  // request (before rate scaling), lies in [window_start_s, window_start_s +
  // window_duration_s). The kept arrivals are shifted so the first is at 0.
  double window_start_s = 0.0;
  double window_duration_s = std::numeric_limits<double>::infinity();
  // Then keep only the first max_requests (-1: all).
  int64_t max_requests = -1;
};

// Reads, sorts by arrival (stable), windows, shifts, scales and numbers the
// requests 0..N-1. Errors (InputError) name the file, the line number and the
// field: a missing column, a non-number, a negative time, a zero or negative
// token count, an empty trace, a header that does not match the format.
std::vector<Request> read_trace(const TraceOptions& options);

}  // namespace servesim
