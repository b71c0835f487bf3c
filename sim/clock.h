// Time for the runner: virtual (a discrete-event simulation jumps from one
// iteration's end to the next) or wall (a real run, added with the decoder).
#pragma once

#include <algorithm>

namespace servesim {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the run started.
  virtual double now() const = 0;
  // An iteration that took `duration_s` has just been executed.
  virtual void advance(double duration_s) = 0;
  // Nothing to do before `time_s` (the next arrival): idle until then.
  virtual void wait_until(double time_s) = 0;
};

class VirtualClock final : public Clock {
 public:
  double now() const override { return now_; }
  void advance(double duration_s) override { now_ += duration_s; }
  void wait_until(double time_s) override { now_ = std::max(now_, time_s); }

 private:
  double now_ = 0.0;
};

}  // namespace servesim
