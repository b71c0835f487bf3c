#include "engine/serving_loop.h"

#include <chrono>

namespace servesim {

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

  int64_t next = 0;      // next request to submit
  int64_t finished = 0;  // completed or rejected
  auto submit = [&](const Request& r, double arrival_s) {
    recorder.set_now(arrival_s);
    recorder.on_arrival(r.id, arrival_s, r.prompt_tokens, r.output_tokens);
    Request accepted = r;
    accepted.arrival_s = arrival_s;
    if (auto reason = scheduler.add_request(accepted)) recorder.on_rejected(r.id, *reason);
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
      while (next < total && requests[size_t(next)].arrival_s <= clock.now()) {
        const Request& r = requests[size_t(next++)];
        submit(r, r.arrival_s);
      }
      absorb_finished();
    }
    if (!scheduler.has_unfinished()) {
      if (workload.closed_loop || next >= total) break;
      if (requests[size_t(next)].arrival_s > clock.now())
        for (LoopObserver* o : options.observers) o->on_idle(clock.now(), requests[size_t(next)].arrival_s);
      clock.wait_until(requests[size_t(next)].arrival_s);
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
    for (int64_t id : recorder.completed_ids()) executor.on_request_finished(id);
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
