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

namespace {

// One replica of the loop: its scheduler, executor and clock, and the
// recorder writing its requests into the shared records.
// With several replicas (virtual clocks, which move only when the loop moves
// them) the loop picks the next one from cached figures (refresh() after a
// submission and an iteration): it looks at every replica before each
// iteration. One replica (a real run's wall clock too) is read live.
struct ReplicaLoop {
  ServingReplica parts;
  MetricsRecorder recorder;
  IterationPlan plan;
  IterationResult result;
  // Whether the replica's steps may be repeated (Scheduler::repeat_step,
  // whose steps skip the per-sequence scheduling and bookkeeping): only
  // where the executor emits one token a sequence.
  bool may_repeat = false;
  ReplicaLoop(const ServingReplica& p, RunRecords& records, bool observers_need_items)
      : parts(p), recorder(records), may_repeat(p.executor->emits_one_token_per_sequence()) {
    // Lazy repeats where nobody reads a repeated step's items.
    p.scheduler->set_lazy_repeats(!observers_need_items && !p.executor->needs_plan_items());
    refresh();
  }
  // The stretch is over: each of its sequences' emissions recorded, the
  // last one now.
  void end_repeats() {
    recorder.set_now(now());
    parts.scheduler->end_repeats(recorder);
  }
  bool busy() const { return parts.scheduler->has_unfinished(); }
  double now() const { return parts.clock->now(); }
  // Where refresh() writes when the replica's next iteration starts
  // (kNever while it is idle): one array for all replicas, scanned before
  // every iteration.
  void set_due_slot(double* slot) {
    due_slot_ = slot;
    refresh();
  }
  void refresh() {
    if (due_slot_) *due_slot_ = busy() ? now() : kNever;
  }

 private:
  double* due_slot_ = nullptr;
};

}  // namespace

RunRecords run_cluster_loop(std::span<const ServingReplica> replica_parts, Router& router, const Workload& workload,
                            const LoopOptions& options) {
  if (replica_parts.empty()) throw std::invalid_argument("run_cluster_loop: no replica");
  const auto& requests = workload.requests;
  const int64_t total = int64_t(requests.size());
  // With pipeline-parallel replicas, engine j belongs to replica j / group.
  const size_t group = size_t(router.engines_per_replica());
  if (replica_parts.size() % group != 0)
    throw std::invalid_argument("run_cluster_loop: the engines are not whole replicas of the router's size");
  const bool several = replica_parts.size() / group > 1;
  RunRecords records;
  records.requests.resize(requests.size());
  for (auto& r : records.requests) r.arrival_s = -1;  // not yet submitted
  std::vector<ReplicaLoop> replicas;
  replicas.reserve(replica_parts.size());
  std::vector<const Scheduler*> schedulers;
  const bool observers_need_items = std::any_of(options.observers.begin(), options.observers.end(),
                                                [](const LoopObserver* o) { return o->needs_plan_items(); });
  for (const ServingReplica& p : replica_parts) {
    replicas.emplace_back(p, records, observers_need_items);
    schedulers.push_back(p.scheduler);
    records.num_gpu_blocks += p.scheduler->kv().num_blocks();
  }
  std::vector<double> due(replicas.size(), kNever);  // ReplicaLoop::set_due_slot
  for (size_t j = 0; j < replicas.size(); ++j) replicas[j].set_due_slot(&due[j]);
  records.block_size = replica_parts[0].scheduler->kv().block_size();

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
  // Closed loop: clients released by a finished (or rejected) request send
  // their next one at that moment, in release order.
  std::priority_queue<std::pair<double, int64_t>, std::vector<std::pair<double, int64_t>>, std::greater<>>
      closed_releases;

  int64_t next = 0;      // next request to submit (closed loop), or next of open_loop
  int64_t finished = 0;  // completed or rejected
  int64_t releases = 0;  // closed loop: releases queued so far (each sends request `releases`)
  // Routes `r`, arriving at `arrival_s`, and submits it there (an idle
  // replica first waits for it); returns that replica.
  auto submit = [&](const Request& r, double arrival_s) -> ReplicaLoop& {
    const size_t j = router.route(r, schedulers);
    ReplicaLoop& rep = replicas[j];
    if (!rep.busy() && arrival_s > rep.now()) {
      for (LoopObserver* o : options.observers) o->on_idle(rep.now(), arrival_s);
      rep.parts.clock->wait_until(arrival_s);
    }
    rep.recorder.set_now(arrival_s);
    rep.recorder.on_arrival(r.id, arrival_s, r.prompt_tokens, r.output_tokens);
    if (several) records.requests[size_t(r.id)].replica = int32_t(j / group);
    Request accepted = r;
    accepted.arrival_s = arrival_s;
    if (auto reason = rep.parts.scheduler->add_request(accepted)) {
      rep.recorder.on_rejected(r.id, *reason);
      follow_ups.finished(r.id, arrival_s);
    }
    rep.refresh();
    return rep;
  };
  // The requests `rep` finished (or rejected) release closed-loop clients
  // at `time_s`. Only the replica that just ran an iteration or took a
  // request can have finished any.
  auto absorb_finished = [&](ReplicaLoop& rep, double time_s) {
    for (int64_t n = rep.recorder.take_finished(); n > 0; n = rep.recorder.take_finished()) {
      finished += n;
      if (workload.closed_loop)
        for (; n > 0 && releases < total; --n) closed_releases.emplace(time_s, releases++);
    }
  };
  // The next request to submit and its time: open-loop arrivals and released
  // session turns merged in time order (an arrival first at equal times), or
  // the closed loop's next release; kNever when none is left.
  auto next_event_time = [&] {
    if (workload.closed_loop) return closed_releases.empty() ? kNever : closed_releases.top().first;
    return std::min(next_open_arrival(next), follow_ups.next_time());
  };
  // Submits that request; returns the replica it went to.
  auto submit_next_event = [&]() -> ReplicaLoop& {
    if (workload.closed_loop) {
      const double time_s = closed_releases.top().first;
      closed_releases.pop();
      return submit(requests[size_t(next++)], time_s);
    }
    const double arrival = next_open_arrival(next), release = follow_ups.next_time();
    if (arrival <= release) {
      const Request& r = requests[size_t(open_loop[size_t(next++)])];
      return submit(r, r.arrival_s);
    }
    const auto [time_s, id] = follow_ups.pop();
    return submit(follow_ups.as_sent(requests[size_t(id)], records), time_s);
  };

  if (workload.closed_loop)
    for (int64_t c = 0; c < workload.concurrency && releases < total; ++c) closed_releases.emplace(0.0, releases++);

  int64_t iteration = 0;
  const auto wall_start = std::chrono::steady_clock::now();
  auto last_report = wall_start;
  for (;;) {
    // The replica whose next iteration starts first (the lowest index of equals).
    ReplicaLoop* earliest = nullptr;
    if (replicas.size() == 1) {
      if (replicas[0].busy()) earliest = &replicas[0];
    } else {
      // The lowest index of the earliest (kNever: idle).
      const auto first = std::min_element(due.begin(), due.end());
      if (*first != kNever) earliest = &replicas[size_t(first - due.begin())];
    }
    // Requests due before it starts (all at once while every replica is
    // idle, the next one first) are routed and submitted; a rejection may
    // release the next one at once.
    const double due = earliest ? earliest->now() : kNever;
    const double event = next_event_time();
    if (event != kNever && (event <= due || !earliest)) {
      absorb_finished(submit_next_event(), event);
      continue;
    }
    if (!earliest) break;  // nothing runs and nothing is left to arrive

    ReplicaLoop& rep = *earliest;
    Scheduler& scheduler = *rep.parts.scheduler;
    IterationPlan& plan = rep.plan;
    IterationResult& result = rep.result;
    IterationRecord rec;
    rec.start_s = rep.now();
    rec.waiting = int32_t(scheduler.num_waiting());
    if (several) rec.replica = int32_t(size_t(&rep - replicas.data()) / group);
    // In a stretch, the last step again if the scheduler can repeat it
    // (Scheduler::repeat_step); otherwise the stretch ends and the step is
    // scheduled in full.
    // (set_now: for the prompts a repeated step admits, and the stretch's
    // emissions where it ends)
    const bool repeating = scheduler.repeating();
    if (repeating) rep.recorder.set_now(rec.start_s);
    const bool repeat = repeating && scheduler.repeat_step(plan, rep.recorder);
    plan.index = iteration++;
    rec.index = plan.index;
    if (!repeat) {
      rep.recorder.set_now(rep.now());
      scheduler.schedule(plan, rep.recorder);
    }

    result.reset();
    for (LoopObserver* o : options.observers) o->before_execute(plan);
    rep.parts.executor->execute(plan, result);
    rep.parts.clock->advance(result.duration_s);
    rec.kv_blocks_used = scheduler.kv().num_used();
    // The requests the step completed: their executor state goes, their
    // follow-up turns and closed-loop clients are released.
    auto after_completions = [&] {
      rep.refresh();
      for (int64_t id : rep.recorder.completed_ids()) {
        rep.parts.executor->on_request_finished(id);
        follow_ups.finished(id, records.requests[size_t(id)].finish_s);
      }
      rep.recorder.completed_ids().clear();
      absorb_finished(rep, rep.now());
    };
    if (repeat) {
      const double now = rep.now();
      rep.recorder.set_now(now);
      // Sequences that emitted their last token leave the stretch, prompts
      // whose last chunk ran join it.
      scheduler.complete_repeat(plan, result, rep.recorder);
      // Every repeated sequence's gap: now less its last emission, the step's start.
      rep.recorder.on_repeated_step(now - rec.start_s, scheduler.num_repeated_sequences());
      after_completions();
    } else {
      rep.recorder.set_now(rep.now());
      scheduler.complete(plan, result, rep.recorder);
      after_completions();
      if (rep.may_repeat) scheduler.begin_repeats(plan);
    }

    rec.duration_s = result.duration_s;
    rec.prefill_tokens = plan.num_prefill_tokens;
    rec.decode_tokens = plan.num_decode_tokens;
    rec.prefill_sequences = plan.num_prefill_sequences;
    rec.decode_sequences = plan.num_decode_sequences;
    rec.sampled_sequences = plan.num_sampling_sequences;
    {
      // A repeated step's members emit without on_tokens, one token each
      // (repeats need one token per sequence); its joiners go through it.
      const MetricsRecorder::StepTokens t = rep.recorder.take_step_tokens();
      rec.emitted_tokens = repeat ? plan.num_sampling_sequences : int32_t(t.emitted);
      rec.first_token_prompt_tokens = t.first_token_prompts;
    }
    rec.prefix_hit_tokens = plan.num_prefix_hit_tokens;
    records.batch_tokens += rec.prefill_tokens + rec.decode_tokens;
    records.batch_sequences += rec.prefill_sequences + rec.decode_sequences;
    if (options.keep_iterations) records.iterations.push_back(rec);
    for (LoopObserver* o : options.observers) o->after_iteration(plan, result, rec);

    if (options.progress && (plan.index & 1023) == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report > std::chrono::seconds(1)) {
        last_report = now;
        options.progress(RunProgress{finished, total, plan.index + 1, rep.now()});
      }
    }
  }
  // A stretch ends with the step in which a sequence finishes; none is left.
  for (ReplicaLoop& rep : replicas)
    if (rep.parts.scheduler->repeating()) rep.end_repeats();
  records.num_iterations = iteration;
  records.preemptions = 0;  // the schedulers' counts (the recorders count them too)
  for (const ReplicaLoop& rep : replicas) {
    const Scheduler& s = *rep.parts.scheduler;
    records.preemptions += s.num_preemptions();
    records.peak_kv_blocks += s.kv().peak_used();
    records.prefix_cache.evicted_blocks += s.kv().evicted_blocks();
    if (several) {
      // A replica's engines summed (peak: the sum of each engine's, an upper bound).
      if (size_t(&rep - replicas.data()) % group == 0) records.replicas.emplace_back();
      ReplicaRecord& replica = records.replicas.back();
      replica.preemptions += s.num_preemptions();
      replica.peak_kv_blocks += s.kv().peak_used();
      replica.num_gpu_blocks += s.kv().num_blocks();
    }
  }
  if (several) std::stable_sort(records.iterations.begin(), records.iterations.end(),
                                [](const IterationRecord& a, const IterationRecord& b) { return a.start_s < b.start_s; });
  return records;
}

RunRecords run_serving_loop(Scheduler& scheduler, Executor& executor, Clock& clock, const Workload& workload,
                            const LoopOptions& options) {
  const ServingReplica one{&scheduler, &executor, &clock};
  Router router{RouterSettings{}};
  return run_cluster_loop(std::span<const ServingReplica>(&one, 1), router, workload, options);
}

}  // namespace servesim
