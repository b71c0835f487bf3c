// The replay timeline: a real run's timeline with every iteration re-costed.
//
// Replay (validate/replay.h) keeps the real run's iterations and gives each
// one another duration, its predicted cost. The replay timeline is the real
// timeline stretched iteration by iteration: iteration k keeps its place in
// the sequence and every real gap between iterations (host work between
// steps, and idle time waiting for arrivals) keeps its real length:
//   start'(0) = start(0)
//   start'(k) = end'(k-1) + (start(k) - end(k-1))      end'(k) = start'(k) + replayed(k)
// and any real instant t maps onto it piecewise linearly (at(t)): inside
// iteration k in proportion to replayed(k) / measured(k), in a gap at the
// real rate, before the first iteration unchanged. The map is continuous and
// never decreasing, and with replayed == measured it is the identity.
//
// Why a map and not just the re-costed iterations: a request's latency is a
// difference of two instants, and both must be read on the same clock. Its
// arrival is a real instant; its tokens come at replayed iteration ends. On
// one clock a request's TTFT is the replayed time of the work it waited
// through and was served in, and nothing else; an arrival taken from the real
// clock instead would add the replay's accumulated lead or lag from before
// the request arrived (near saturation, a few percent of cost bias summed
// over a whole busy period).
#pragma once

#include <span>
#include <vector>

namespace servesim {

class ReplayTimeline {
 public:
  // Real starts and durations of the run's iterations, in execution order,
  // and the replayed duration of each. Throws std::invalid_argument when the
  // three differ in length, a duration is negative or not finite, or the
  // starts go backwards.
  ReplayTimeline(std::vector<double> real_starts_s, std::vector<double> real_durations_s,
              std::span<const double> replayed_durations_s);

  double start(size_t k) const { return starts_[k]; }
  double end(size_t k) const { return starts_[k] + replayed_[k]; }
  // The replayed instant of real instant t.
  double at(double t) const;

 private:
  std::vector<double> real_starts_, real_durations_;
  std::vector<double> starts_, replayed_;
};

}  // namespace servesim
