// Workloads: how requests arrive, how long they are and, where sharing
// matters, which tokens they hold (shared prefixes, multi-turn sessions,
// Mooncake traces).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/length_distribution.h"
#include "sim/request.h"
#include "sim/trace_reader.h"

namespace servesim {

// Open-loop arrival times: Constant puts request i at i/rate, so the first
// arrives at t = 0. Poisson and Gamma put request i at the sum of i + 1
// sampled gaps, so the first arrives after one gap. Gamma gaps are
// Gamma(shape k = 1/cv^2, scale 1/(rate*k)): mean 1/rate, CV cv.
//
// Arrival gaps, prompt lengths, output lengths and trace resampling each draw
// from their own random stream derived from the seed, so changing the rate or
// the arrival process leaves the lengths drawn unchanged (and vice versa).
// Shared-prefix groups, session turns and think times have their own streams
// too: adding them leaves the lengths and arrivals drawn as they were.
enum class ArrivalProcess {
  Poisson,   // open loop, exponential gaps with mean 1/rate
  Gamma,     // open loop, gamma gaps with mean 1/rate and coefficient of variation cv
  Constant,  // open loop, gaps of exactly 1/rate
  Closed,    // closed loop: `concurrency` requests in flight, a new one when one finishes
  Trace,     // arrivals (and lengths) replayed from a trace file
};

// Throws InputError for an unknown name.
ArrivalProcess parse_arrival_process(const std::string& name);
std::string to_string(ArrivalProcess p);

struct WorkloadSpec {
  ArrivalProcess arrival = ArrivalProcess::Poisson;
  double rate = 10.0;           // requests/s, open loop (> 0)
  double cv = 1.0;              // gamma only (> 0); cv = 1 is Poisson
  int64_t concurrency = 0;      // closed loop only (>= 1)
  int64_t num_requests = 1000;  // synthetic workloads (>= 1)
  std::string prompt_len = "lognormal:1024:1.0:16:8192";
  std::string output_len = "lognormal:256:1.0:1:2048";
  // When set, (prompt, output) pairs are resampled jointly, uniformly with
  // replacement, from this trace instead of prompt_len/output_len.
  std::optional<TraceOptions> lengths_from_trace;
  // Arrival == Trace: the trace to replay.
  TraceOptions trace;
  // Synthetic workloads: each prompt (each session's first turn) starts with
  // one of `shared_prefix_groups` prefixes of `shared_prefix_len` tokens,
  // drawn uniformly, then its own --prompt-len tokens. 0 and 0: none.
  int64_t shared_prefix_groups = 0;
  int64_t shared_prefix_len = 0;
  // Open-loop multi-turn sessions when set: turns per session, as a length
  // spec (sim/length_distribution.h). The open-loop process at `rate` starts
  // the sessions; num_requests counts every turn of every session.
  std::optional<std::string> session_turns;
  // Between a turn's end and the next turn (sim/sessions.h ThinkTime).
  std::string think_time = "0";
  uint64_t seed = 0;
};

struct Workload {
  // Ids 0..N-1. The independent ones (follows == -1) are sorted by arrival;
  // a session's later turns follow an earlier id and arrive when released.
  std::vector<Request> requests;
  bool closed_loop = false;       // arrivals are decided by the runner
  int64_t concurrency = 0;        // closed loop only
};

// Validates the spec (InputError naming the flag: --rate, --cv, ...) and
// draws the requests. Same spec and seed give the same workload. Token
// identity: none for plain synthetic, Azure and CSV requests; with shared
// prefixes a prompt is [SharedPrefix(group), 0, len] + [RequestTail(id), 0,
// tail]; sessions: build_session_requests (sim/sessions.h); Mooncake: its
// hash ids (read_trace). Every request with identity has the output source
// token_source(Output, id).
Workload make_workload(const WorkloadSpec& spec);

}  // namespace servesim
