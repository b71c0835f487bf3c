// The event loop: arrivals -> scheduler -> executor -> clock -> metrics.
// The same loop drives a simulation (virtual clock, cost-model executor) and
// a real run (wall clock, decoder executor).
#pragma once

#include <functional>

#include "sim/clock.h"
#include "sim/executor.h"
#include "sim/metrics.h"
#include "sim/scheduler.h"
#include "sim/workload.h"

namespace servesim {

struct RunProgress {
  int64_t finished = 0;     // completed + rejected
  int64_t total = 0;
  int64_t iterations = 0;
  double clock_s = 0;
};

class Runner {
 public:
  Runner(Scheduler& scheduler, Executor& executor, Clock& clock)
      : scheduler_(scheduler), executor_(executor), clock_(clock) {}

  // Called about once a second of wall time while the run goes on.
  void on_progress(std::function<void(const RunProgress&)> callback) {
    progress_ = std::move(callback);
  }
  // Keep a record of every iteration (iterations.csv). On by default.
  void keep_iterations(bool keep) { keep_iterations_ = keep; }
  // Called when no request is in the engine and the next one (open loop)
  // arrives at `until_s` on the clock, before waiting for it; what it
  // does must end by then. Validation times the machine's speed there.
  void on_idle(std::function<void(double until_s)> callback) { on_idle_ = std::move(callback); }
  // Called after every iteration with its record, once its requests'
  // progress is recorded and before the next arrivals are taken in.
  void after_iteration(std::function<void(const IterationRecord&)> callback) {
    after_iteration_ = std::move(callback);
  }

  // Serves every request of the workload and returns what happened.
  RunRecords run(const Workload& workload);

 private:
  Scheduler& scheduler_;
  Executor& executor_;
  Clock& clock_;
  std::function<void(const RunProgress&)> progress_;
  bool keep_iterations_ = true;
  std::function<void(double)> on_idle_;
  std::function<void(const IterationRecord&)> after_iteration_;
};

}  // namespace servesim
