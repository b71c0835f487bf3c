// The one serving loop: arrivals -> scheduler -> plan -> executor -> clock
// -> metrics. The same loop serves a simulation (virtual clock, a cost
// model's executor), a real run (wall clock, the decoder) and a validation
// (a real run with observers attached); they differ only in the executor,
// the clock and the observers.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/router.h"
#include "sim/clock.h"
#include "sim/executor.h"
#include "sim/metrics.h"
#include "sim/scheduler.h"
#include "sim/workload.h"

namespace servesim {

struct RunProgress {
  int64_t finished = 0;  // completed + rejected
  int64_t total = 0;
  int64_t iterations = 0;
  double clock_s = 0;
};

// What a caller watches of a run, without taking part in it: a validation
// records every plan, a drift probe times the machine between iterations.
// Every call happens on the loop's thread, in time order.
class LoopObserver {
 public:
  virtual ~LoopObserver() = default;
  // The executor is about to run `plan` (scheduled, not yet timed).
  virtual void before_execute(const IterationPlan& plan) { (void)plan; }
  // An iteration is over and its requests' progress recorded, before the
  // next arrivals are taken in: its plan, what the executor reported and
  // the iteration's record.
  virtual void after_iteration(const IterationPlan& plan, const IterationResult& result,
                               const IterationRecord& record) {
    (void)plan, (void)result, (void)record;
  }
  // No request is in the engine and the next one (open loop: an arrival
  // or a session's released turn) comes at `until_s` on the clock (now
  // `now_s`); called before waiting for it.
  virtual void on_idle(double now_s, double until_s) { (void)now_s, (void)until_s; }
  // False where the observer reads only a plan's counts and sums, never its
  // items (see Executor::needs_plan_items).
  virtual bool needs_plan_items() const { return true; }
};

struct LoopOptions {
  // Called about once a second of wall time while the run goes on.
  std::function<void(const RunProgress&)> progress;
  // Keep a record of every iteration (iterations.csv).
  bool keep_iterations = true;
  std::vector<LoopObserver*> observers;
};

// Serves every request of `workload` with `scheduler` (fresh), `executor`
// and `clock`, and returns what happened. Open loop: each independent
// request (follows == -1) is submitted at its arrival_s; a session's later
// turn (follows >= 0) at the moment the request it follows finished, or was
// rejected, plus its think_time_s. Its record's arrival_s is that moment
// (-1 until submitted), and a span of its prompt that quotes an earlier
// request's output holds what that request generated (less after end of
// sequence, nothing after a rejection). Throws std::invalid_argument for a
// request that follows a later one, or a closed loop with follow-ups.
RunRecords run_serving_loop(Scheduler& scheduler, Executor& executor, Clock& clock, const Workload& workload,
                            const LoopOptions& options = {});

// One replica of a cluster: its scheduler (fresh), executor and clock.
struct ServingReplica {
  Scheduler* scheduler = nullptr;
  Executor* executor = nullptr;
  Clock* clock = nullptr;
};

// The same loop over several replicas in one discrete-event simulation:
// each request (an arrival, a session's released turn, a closed loop's
// next request) is routed by `router` when it arrives, on the replicas'
// state then; the replica whose next iteration starts first runs it
// (requests due by then are routed first). Records are the run's, each
// request's and iteration's `replica` set (with more than one) and
// RunRecords::replicas filled. With a router of several engines per replica
// (pipeline-parallel replicas), `replicas` lists every replica's engines in
// turn and the records name the replica, not the engine. run_serving_loop
// is this with one replica.
RunRecords run_cluster_loop(std::span<const ServingReplica> replicas, Router& router, const Workload& workload,
                            const LoopOptions& options = {});

}  // namespace servesim
