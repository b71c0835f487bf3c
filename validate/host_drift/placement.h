// Where the hypervisor put the decoder's CPU threads: their core-to-core
// latency.
//
// A VM's vCPUs may be moved between the host's cores, seconds to minutes
// apart: sometimes onto cores that share an L3 (a cache line crosses from
// one thread to the other in about 50 ns), sometimes onto different CCDs
// (about 200 ns), and the decoder's speed follows the placement
// (docs/noisy-hosts.md). A prediction can be compared with a real run only
// if both saw the same placement, so with --host-drift the calibration's
// drift probes and every iteration of a validation's real run record it.
#pragma once

#include <cstdint>
#include <string>

namespace servesim {

// One-way latency of a cache line between OpenMP threads 0 and 1 of a team
// of `threads` (the decoder's team size, so the same pool threads; 0: one
// per core, as the decoder's default): the
// median of 3 batches of 16 round trips, 5-40 us in all. NaN when
// threads < 2, when the team got fewer than 2 threads, or when a hop took
// over a millisecond (two threads time-sliced on one CPU).
double core_to_core_latency_ns(int threads);

// One-way latencies above this mean threads on different CCDs (the two
// clusters above lie either side of it).
constexpr double kFarCoreLatencyNs = 120;

enum class Placement { Unknown, Near, Far };

// Near below kFarCoreLatencyNs, Far above, Unknown for NaN.
Placement placement_of(double one_way_ns);
// Near or Far when both measurements agree, Unknown otherwise.
Placement placement_of(double before_ns, double after_ns);
const char* to_string(Placement placement);

// Counts of measurements per placement.
struct PlacementCounts {
  int64_t near = 0, far = 0, unknown = 0;
  void add(Placement p);
  int64_t total() const { return near + far + unknown; }
  // The placement of most measurements (Unknown when none is known, or
  // near and far tie).
  Placement dominant() const;
  // Share of the measurements in placement p (0 when there are none).
  double share(Placement p) const;
};

}  // namespace servesim
