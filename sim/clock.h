// Time for the serving loop: virtual (a discrete-event simulation jumps from
// one iteration's end to the next) or wall (a real run).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

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

// A real run: time passes while the executor works; idle waits sleep.
class WallClock final : public Clock {
 public:
  WallClock() : start_(std::chrono::steady_clock::now()) {}
  double now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void advance(double) override {}  // the iteration's time has already passed
  void wait_until(double time_s) override {
    const double wait = time_s - now();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace servesim
