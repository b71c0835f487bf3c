// Workloads: how requests arrive and how long they are.
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
  uint64_t seed = 0;
};

struct Workload {
  std::vector<Request> requests;  // sorted by arrival; ids 0..N-1
  bool closed_loop = false;       // arrivals are decided by the runner
  int64_t concurrency = 0;        // closed loop only
};

// Validates the spec (InputError naming the flag: --rate, --cv, ...) and
// draws the requests. Same spec and seed give the same workload.
Workload make_workload(const WorkloadSpec& spec);

}  // namespace servesim
