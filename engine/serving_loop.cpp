#include "engine/serving_loop.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace servesim {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// Follow-up turns of sessions: a request with follows >= 0 is released
// think_time_s after the request it follows finished, or was rejected (its
// user reads the error, then goes on). Releases wait in a min-heap of
// (time, id), so equal times release in id order.
class FollowUps {
 public:
  explicit FollowUps(const std::vector<Request>& requests) : requests_(requests) {
    for (const Request& r : requests) {
      if (r.follows < 0) continue;
      if (r.follows >= r.id) {
        throw std::invalid_argument("request " + std::to_string(r.id) + " follows request " +
                                    std::to_string(r.follows) + ", not an earlier one");
      }
      if (first_.empty()) index(requests);  // only workloads with sessions pay for this
      // The heap orders releases, so followers may be listed in any order.
      sibling_[size_t(r.id)] = first_[size_t(r.follows)];
      first_[size_t(r.follows)] = r.id;
    }
  }

  bool any() const { return !first_.empty(); }

  // `id` finished (completed or rejected) at `time_s`: its followers' turns come.
  void finished(int64_t id, double time_s) {
    if (first_.empty()) return;
    for (int64_t f = first_[size_t(id)]; f >= 0; f = sibling_[size_t(f)])
      heap_.emplace(time_s + requests_[size_t(f)].think_time_s, f);
  }
  double next_time() const { return heap_.empty() ? kNever : heap_.top().first; }
  std::pair<double, int64_t> pop() {
    const auto top = heap_.top();
    heap_.pop();
    return top;
  }

  // `r` as its client sends it: a span quoting an earlier request's output
  // holds what that request really generated (all of it, unless it stopped
  // at end of sequence; nothing if it was rejected).
  Request as_sent(const Request& r, const RunRecords& records) const {
    Request sent = r;
    if (output_owner_.empty() || sent.tokens.empty()) return sent;
    std::vector<TokenSpan>& spans = sent.tokens.prompt_spans;
    size_t kept = 0;
    for (TokenSpan span : spans) {
      if (const auto it = output_owner_.find(span.source); it != output_owner_.end()) {
        const int32_t generated = records.requests[it->second].tokens_emitted;
        span.length = std::clamp(generated - span.offset, 0, span.length);
      }
      if (span.length > 0) spans[kept++] = span;
    }
    spans.resize(kept);
    sent.prompt_tokens = int32_t(sent.tokens.prompt_tokens());
    return sent;
  }

 private:
  void index(const std::vector<Request>& requests) {
    first_.assign(requests.size(), -1);
    sibling_.assign(requests.size(), -1);
    for (size_t i = 0; i < requests.size(); ++i)
      if (requests[i].tokens.output_source != 0) output_owner_.emplace(requests[i].tokens.output_source, i);
  }

  const std::vector<Request>& requests_;
  std::vector<int64_t> first_, sibling_;  // followers of each id, as linked lists
  std::unordered_map<uint64_t, size_t> output_owner_;  // output source -> its request
  std::priority_queue<std::pair<double, int64_t>, std::vector<std::pair<double, int64_t>>,
                      std::greater<>>
      heap_;
};

}  // namespace

RunRecords run_serving_loop(Scheduler& scheduler, Executor& executor, Clock& clock, const Workload& workload,
                            const LoopOptions& options) {
  const auto& requests = workload.requests;
  const int64_t total = int64_t(requests.size());
  RunRecords records;
  records.requests.resize(requests.size());
  for (auto& r : records.requests) r.arrival_s = -1;  // not yet submitted
  records.num_gpu_blocks = scheduler.kv().num_blocks();
  records.block_size = scheduler.kv().block_size();
  MetricsRecorder recorder(records);

  FollowUps follow_ups(requests);
  if (workload.closed_loop && follow_ups.any())
    throw std::invalid_argument("a closed-loop workload cannot hold follow-up turns (Request::follows)");
  // Open loop: the indices of the independent requests, in index (= arrival) order.
  std::vector<int64_t> open_loop;
  if (!workload.closed_loop) {
    open_loop.reserve(requests.size());
    for (int64_t i = 0; i < total; ++i)
      if (requests[size_t(i)].follows < 0) open_loop.push_back(i);
  }
  const auto num_open = int64_t(open_loop.size());
  auto next_open_arrival = [&](int64_t next) {
    return next < num_open ? requests[size_t(open_loop[size_t(next)])].arrival_s : kNever;
  };

  int64_t next = 0;      // next request to submit (closed loop), or next of open_loop
  int64_t finished = 0;  // completed or rejected
  auto submit = [&](const Request& r, double arrival_s) {
    recorder.set_now(arrival_s);
    recorder.on_arrival(r.id, arrival_s, r.prompt_tokens, r.output_tokens);
    Request accepted = r;
    accepted.arrival_s = arrival_s;
    if (auto reason = scheduler.add_request(accepted)) {
      recorder.on_rejected(r.id, *reason);
      follow_ups.finished(r.id, arrival_s);
    }
  };
  // Closed loop: each finished (or rejected) request lets its client send
  // the next one at that moment.
  auto release_closed_loop = [&](int64_t count) {
    for (; count > 0 && next < total; --count) submit(requests[size_t(next++)], clock.now());
  };
  // A request released here may be rejected at once, which frees its client
  // again: repeat until no release is rejected, or a run of rejections would
  // stall the closed loop (or end it with requests never submitted).
  auto absorb_finished = [&] {
    for (int64_t n = recorder.take_finished(); n > 0; n = recorder.take_finished()) {
      finished += n;
      if (workload.closed_loop) release_closed_loop(n);
    }
  };

  if (workload.closed_loop) {
    release_closed_loop(workload.concurrency);
    absorb_finished();  // rejections at release free their client at once
  }

  IterationPlan plan;
  int64_t iteration = 0;
  IterationResult result;
  const auto wall_start = std::chrono::steady_clock::now();
  auto last_report = wall_start;
  for (;;) {
    if (!workload.closed_loop) {
      // Arrivals and released turns that are due, merged in time order (an
      // arrival first at equal times); a turn rejected here may release the
      // next one at once.
      for (;;) {
        const double arrival = next_open_arrival(next), release = follow_ups.next_time();
        if (arrival <= release) {
          if (!(arrival <= clock.now())) break;
          const Request& r = requests[size_t(open_loop[size_t(next++)])];
          submit(r, r.arrival_s);
        } else {
          if (!(release <= clock.now())) break;
          const auto [time_s, id] = follow_ups.pop();
          submit(follow_ups.as_sent(requests[size_t(id)], records), time_s);
        }
      }
      absorb_finished();
    }
    if (!scheduler.has_unfinished()) {
      const double until = std::min(next_open_arrival(next), follow_ups.next_time());
      if (workload.closed_loop || until == kNever) break;
      if (until > clock.now())
        for (LoopObserver* o : options.observers) o->on_idle(clock.now(), until);
      clock.wait_until(until);
      continue;
    }

    recorder.set_now(clock.now());
    plan.index = iteration++;
    IterationRecord rec;
    rec.index = plan.index;
    rec.start_s = clock.now();
    rec.waiting = int32_t(scheduler.num_waiting());
    scheduler.schedule(plan, recorder);

    result.reset();
    for (LoopObserver* o : options.observers) o->before_execute(plan);
    executor.execute(plan, result);
    clock.advance(result.duration_s);
    recorder.set_now(clock.now());
    rec.kv_blocks_used = scheduler.kv().num_used();
    scheduler.complete(plan, result, recorder);
    for (int64_t id : recorder.completed_ids()) {
      executor.on_request_finished(id);
      follow_ups.finished(id, records.requests[size_t(id)].finish_s);
    }
    recorder.completed_ids().clear();
    absorb_finished();

    rec.duration_s = result.duration_s;
    rec.prefill_tokens = plan.num_prefill_tokens;
    rec.decode_tokens = plan.num_decode_tokens;
    rec.prefill_sequences = plan.num_prefill_sequences;
    rec.decode_sequences = plan.num_decode_sequences;
    rec.sampled_sequences = plan.num_sampling_sequences;
    rec.prefix_hit_tokens = plan.num_prefix_hit_tokens;
    if (options.keep_iterations) records.iterations.push_back(rec);
    for (LoopObserver* o : options.observers) o->after_iteration(plan, result, rec);

    if (options.progress && (plan.index & 1023) == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report > std::chrono::seconds(1)) {
        last_report = now;
        options.progress(RunProgress{finished, total, plan.index + 1, clock.now()});
      }
    }
  }
  records.num_iterations = iteration;
  records.preemptions = scheduler.num_preemptions();
  records.peak_kv_blocks = scheduler.kv().peak_used();
  records.prefix_cache.evicted_blocks = scheduler.kv().evicted_blocks();
  return records;
}

}  // namespace servesim
