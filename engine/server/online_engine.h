// The engine behind `servesim serve`: the one scheduler and the built-in
// decoder under the wall clock, stepping iteration by iteration as the
// serving loop does (engine/serving_loop.h: schedule -> execute -> advance
// -> complete), with requests arriving from connections instead of a
// workload. Other threads submit and abort requests; the engine thread
// (run()) takes them in between iterations and reports each request's new
// tokens, and its end, through the request's sink.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/server/serving_metrics.h"
#include "kernels/decoder/served_executor.h"
#include "sim/clock.h"
#include "sim/scheduler.h"

namespace servesim {

// What the engine tells a request's owner (on the engine thread: a sink
// hands it over to its own thread and returns).
struct EngineEvent {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // new output token ids, in order
  bool finished = false;
  // With finished: "length" (max_tokens reached), "stop" (EOS or a stop
  // token), "abort" (aborted or the server shut down), "rejected" (it can
  // never be served: `error` says why).
  std::string finish_reason;
  std::string error;
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens found in the prefix cache
};
using EventSink = std::function<void(EngineEvent&&)>;

struct OnlineRequest {
  RequestInput input;  // prompt ids, sampling, stop rules
  int32_t max_tokens = 16;
};

struct OnlineEngineOptions {
  // Requests admitted but not yet scheduled, at most (vLLM's
  // --max-waiting analogue); beyond it submit() answers QueueFull.
  int64_t max_waiting = 1024;
  // Called on the engine thread after each iteration, once its tokens were
  // handed to their sinks, with its plan, what the executor reported and
  // its start on the engine's clock (`serve --iteration-log` writes them);
  // must not throw.
  std::function<void(const IterationPlan&, const IterationResult&, double start_s)> on_iteration;
};

class OnlineEngine {
 public:
  OnlineEngine(Scheduler& scheduler, ServedExecutor& executor, ServingMetrics& metrics,
               const OnlineEngineOptions& options);

  enum class Admission { Accepted, QueueFull, Draining };
  // Thread-safe. With Accepted, `*id` names the request for abort().
  Admission submit(OnlineRequest request, EventSink sink, int64_t* id);
  // Thread-safe: drops the request (its KV blocks are freed before the next
  // iteration) and ends it with `reason` ("abort", or "stop" for a stop
  // string the server matched). Unknown or finished ids are ignored.
  void abort(int64_t id, const std::string& reason = "abort");
  // Thread-safe: take no new requests; finish those in flight for up to
  // `grace_s` seconds, then abort the rest; run() then returns.
  void drain(double grace_s);

  // The engine loop, on the calling thread, until drain() has completed.
  void run();

  struct State {
    int64_t running = 0, waiting = 0, live = 0;
    int64_t kv_blocks_used = 0, kv_blocks = 0;
    int64_t completed = 0;
  };
  State state() const;  // thread-safe
  const Scheduler& scheduler() const { return scheduler_; }
  double now() const { return clock_.now(); }

 private:
  struct Live {
    EventSink sink;
    double arrival_s = 0, first_scheduled_s = -1, first_token_s = -1, last_token_s = -1;
    int32_t prompt_tokens = 0, max_tokens = 0, generated = 0, cached_tokens = 0;
    EngineEvent pending;  // this iteration's tokens, sent after complete()
    bool has_pending = false;
  };
  struct Submission {
    int64_t id;
    double arrival_s;
    OnlineRequest request;
    EventSink sink;
  };
  class Listener;

  void take_inbox();
  void admit(Submission&& s);
  void finish(int64_t id, const std::string& reason);  // ends a live request: metrics, sink, forget it
  void step();
  void publish_state();

  Scheduler& scheduler_;
  ServedExecutor& executor_;
  ServingMetrics& metrics_;
  OnlineEngineOptions options_;
  WallClock clock_;

  std::mutex mutex_;  // guards the inbox and drain state
  std::condition_variable wake_;
  std::deque<Submission> submissions_;
  std::vector<std::pair<int64_t, std::string>> aborts_;
  bool draining_ = false;
  double drain_deadline_s_ = 0;
  int64_t next_id_ = 0;

  // Engine thread only.
  std::unordered_map<int64_t, Live> live_;
  IterationPlan plan_;
  IterationResult result_;
  std::vector<int64_t> finished_ids_;

  std::atomic<int64_t> queued_{0};  // submitted, not yet first scheduled (bounded by max_waiting)
  std::atomic<int64_t> running_{0}, waiting_{0}, live_count_{0}, kv_used_{0}, completed_{0};
};

}  // namespace servesim
