// `servesim bench`'s load: sends a workload's requests to a server, each at
// its arrival time (open loop) or `concurrency` at a time (closed loop), on
// one io_context thread with every stream open at once, and timestamps every
// streamed chunk. The measurements follow vLLM's `bench serve`
// (benchmarks/lib/endpoint_request_func.py): a token chunk is an event whose
// "choices" is non-empty (its text may be empty); TTFT = first token chunk
// - send; ITL = gaps between token chunks; latency (E2E) = last token chunk
// - send (the trailing usage chunk and [DONE] do not count); output tokens
// from the last usage chunk, else the number of token chunks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/client/http_stream_client.h"

namespace servesim {

struct PlannedRequest {
  int64_t id = 0;
  double arrival_s = 0;  // open loop: when to send, after the start
  int32_t prompt_tokens = 0, output_tokens = 0;  // as the workload asks
  std::string body;      // the JSON to POST
};

struct LoadPlan {
  std::vector<PlannedRequest> requests;  // open loop: in arrival order; closed loop: in sending order
  bool closed_loop = false;
  int64_t concurrency = 0;      // closed loop: requests in flight
  int64_t max_concurrency = 0;  // open loop: at most this many in flight (0: no limit); later ones wait
  double timeout_s = 600;       // per request, connect to last byte
  std::string target;           // "/v1/completions" or "/v1/chat/completions"
  std::string api_key;
  bool keep_alive = true;       // reuse connections (HTTP/1.1 persistent connections)
};

struct RequestMeasurement {
  bool sent = false;
  double send_s = -1;             // after the start
  std::vector<double> chunk_s;    // token chunks' arrival times, after the start
  double end_s = -1;              // the answer ended or failed
  std::optional<int64_t> usage_output_tokens, usage_prompt_tokens;
  std::string text;               // generated text
  std::string error;              // empty: success
  int http_status = 0;

  bool ok() const { return sent && error.empty(); }
  // vLLM's output_tokens: usage.completion_tokens, else the token chunks.
  int64_t output_tokens() const { return usage_output_tokens ? *usage_output_tokens : int64_t(chunk_s.size()); }
  double ttft_s() const { return chunk_s.front() - send_s; }
  double latency_s() const { return chunk_s.back() - send_s; }
};

struct LoadProgress {
  int64_t done = 0, total = 0, errors = 0, in_flight = 0;
  double elapsed_s = 0;
};

struct LoadResult {
  std::vector<RequestMeasurement> requests;  // indexed like LoadPlan::requests
  double duration_s = 0;                     // start -> the last answer ended (vLLM's benchmark duration)
  int64_t max_in_flight = 0;
  int64_t connections_opened = 0, connections_reused = 0, resent = 0;  // ConnectionPool's counts
  std::chrono::system_clock::time_point started_at;
};

// Runs the plan to the end: every request is sent once and ends in success
// or an error (never retried). `progress` is called about once a second and
// at the end. Throws std::runtime_error when the host cannot be resolved.
LoadResult run_load(const HttpEndpoint& endpoint, const LoadPlan& plan,
                    const std::function<void(const LoadProgress&)>& progress);

}  // namespace servesim
