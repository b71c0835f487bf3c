// A wall clock that can be stopped: a real run's time, less the time the
// host-drift probes took between served iterations, so a run with probes
// reads as if they had taken no time (no request's latency and no
// iteration includes them).
#pragma once

#include <cstdint>

#include "sim/clock.h"

namespace servesim {

class StoppableWallClock final : public Clock {
 public:
  double now() const override { return wall_.now() - stopped_s_; }
  void advance(double) override {}  // the iteration's time has already passed
  void wait_until(double time_s) override { wall_.wait_until(time_s + stopped_s_); }

  // Runs `work` with the clock stopped; returns its answer (whether it did
  // anything), counting the stops that did.
  template <typename Work>
  bool stopped_while(Work&& work) {
    const double begin = wall_.now();
    const bool did = work();
    const double took = wall_.now() - begin;
    stopped_s_ += took;
    if (did) {
      ++stops_;
      probed_s_ += took;
    }
    return did;
  }
  int64_t stops() const { return stops_; }
  double stopped_s() const { return probed_s_; }  // seconds of the stops that did something

 private:
  WallClock wall_;
  double stopped_s_ = 0;  // every stop's
  int64_t stops_ = 0;
  double probed_s_ = 0;
};

}  // namespace servesim
