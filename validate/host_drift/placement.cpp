#include "validate/host_drift/placement.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>

namespace servesim {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Spins until `turn` holds `value`. False when the other thread gave up, or
// when this wait passed a millisecond (then it tells the other thread).
bool wait_for(const std::atomic<int32_t>& turn, int32_t value, std::atomic<bool>& gave_up) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(1);
  for (uint32_t spin = 1;; ++spin) {
    if (turn.load(std::memory_order_acquire) == value) return true;
    if (spin % 256 == 0) {
      if (gave_up.load(std::memory_order_relaxed)) return false;
      if (Clock::now() > deadline) {
        gave_up.store(true, std::memory_order_relaxed);
        return false;
      }
    }
  }
}

}  // namespace

double core_to_core_latency_ns(int threads) {
  if (threads == 0) threads = omp_get_num_procs();
  if (threads < 2) return kNaN;
  constexpr int kBatches = 3, kRoundTrips = 16;
  // Hop h (from 1) is thread 0 storing 2h - 1 and thread 1 answering 2h.
  alignas(64) std::atomic<int32_t> turn{0};
  std::atomic<bool> gave_up{false};
  double batch_ns[kBatches] = {};
  bool team_of_two = false;
#pragma omp parallel num_threads(threads)
  {
    const int me = omp_get_thread_num();
    const bool two = omp_get_num_threads() >= 2;
    if (me == 0) team_of_two = two;
    // Round trip 0 is not timed: it waits for thread 1 to arrive.
    if (two && me == 0) {
      for (int32_t trip = 0, batch = -1; batch < kBatches; ++batch) {
        const Clock::time_point start = Clock::now();
        for (int r = 0; r < (batch < 0 ? 1 : kRoundTrips); ++r, ++trip) {
          turn.store(2 * trip + 1, std::memory_order_release);
          if (!wait_for(turn, 2 * trip + 2, gave_up)) break;
        }
        if (gave_up.load()) break;
        if (batch >= 0) batch_ns[batch] = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
      }
    } else if (two && me == 1) {
      for (int32_t trip = 0; trip < 1 + kBatches * kRoundTrips; ++trip) {
        if (!wait_for(turn, 2 * trip + 1, gave_up)) break;
        turn.store(2 * trip + 2, std::memory_order_release);
      }
    }
  }
  if (!team_of_two || gave_up.load()) return kNaN;
  std::sort(batch_ns, batch_ns + kBatches);
  return batch_ns[kBatches / 2] / (2.0 * kRoundTrips);
}

Placement placement_of(double one_way_ns) {
  if (std::isnan(one_way_ns)) return Placement::Unknown;
  return one_way_ns > kFarCoreLatencyNs ? Placement::Far : Placement::Near;
}

Placement placement_of(double before_ns, double after_ns) {
  const Placement a = placement_of(before_ns), b = placement_of(after_ns);
  return a == b ? a : Placement::Unknown;
}

const char* to_string(Placement placement) {
  switch (placement) {
    case Placement::Near: return "near";
    case Placement::Far: return "far";
    case Placement::Unknown: return "unknown";
  }
  return "?";
}

void PlacementCounts::add(Placement p) {
  switch (p) {
    case Placement::Near: ++near; break;
    case Placement::Far: ++far; break;
    case Placement::Unknown: ++unknown; break;
  }
}

Placement PlacementCounts::dominant() const {
  if (near == far) return Placement::Unknown;
  return near > far ? Placement::Near : Placement::Far;
}

double PlacementCounts::share(Placement p) const {
  if (total() == 0) return 0;
  const int64_t n = p == Placement::Near ? near : p == Placement::Far ? far : unknown;
  return double(n) / double(total());
}

}  // namespace servesim
