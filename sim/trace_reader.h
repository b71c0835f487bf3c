// Readers for request traces: the Azure LLM inference CSV, a plain CSV and
// the Mooncake JSON lines (which also give each prompt's token identity).
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
  // JSON lines: timestamp (ms), input_length, output_length, hash_ids (one
  // id per 512-token prompt block; sim/mooncake_trace.h). Mooncake FAST'25.
  Mooncake,
};

// Throws InputError for an unknown name ("azure", "csv" or "mooncake").
TraceFormat parse_trace_format(const std::string& name);
std::string to_string(TraceFormat format);

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
  // Mooncake only: tokens each hash id stands for (the trace's 512, or fewer
  // to replay its sharing at a smaller size); prompt and output lengths are
  // scaled by the same factor, rounded up.
  int32_t mooncake_block_tokens = 512;
};

// Reads, sorts by arrival (stable), windows, shifts, scales and numbers the
// requests 0..N-1. Errors (InputError) name the file, the line number and the
// field: a missing column, a non-number, a negative time, a zero or negative
// token count, an empty trace, a header that does not match the format.
// Azure and CSV requests carry no token identity. Mooncake requests do:
// prompt spans from their hash ids (mooncake_prompt_spans) and the output
// source token_source(Output, id) of their final (renumbered) id.
std::vector<Request> read_trace(const TraceOptions& options);

}  // namespace servesim
