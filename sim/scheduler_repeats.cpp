// Scheduler's stretches of repeated decode steps (scheduler.h, "Repeated
// decode steps"): the running decodes kept as one group of small counters
// that advance together, so that a step costs one pass over those counters
// plus its events (block growth, completions, prompts' chunks and
// admissions), not the per-sequence scheduling and bookkeeping of
// schedule() and complete(). Each step is exactly the one schedule() would
// make; the tests run both side by side (tests/sim/test_scheduler_repeats.cpp).
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <vector>

#include "sim/scheduler.h"

namespace servesim {

namespace {
// The finish calendar is a min-heap of (finish, order, slot).
constexpr auto kLater = std::greater<>{};
}  // namespace

bool Scheduler::begin_repeats(const IterationPlan& plan) {
  clear_group();
  joiners_.clear();
  plan_members_ = 0;
  group_broken_ = false;
  repeating_ = false;
  if (config_.policy == SchedulerPolicy::Static || config_.num_speculative_tokens > 0 || running_.empty()) return false;
  // Every decode took one query token (no speculation) ...
  if (plan.num_decode_tokens != plan.num_decode_sequences) return false;
  // ... and the running sequences are the plan's sampled, unfinished ones
  // in their order (none was preempted or skipped), then prompts still
  // prefilling: the sampled ones form the group and decode next.
  if (!join_sampled_items(plan, 0)) return false;
  for (size_t i = group_size_; i < running_.size(); ++i)
    if (!slots_[size_t(running_[i])].in_prefill()) return false;
  repeating_ = group_size_ > 0;
  return repeating_;
}

void Scheduler::clear_group() {
  for (std::vector<int32_t>& bucket : growth_ring_) bucket.clear();
  finish_calendar_.clear();
  group_size_ = 0;
  group_base_sum_ = 0;
  prefix_members_ = 0;
}

bool Scheduler::join_sampled_items(const IterationPlan& plan, size_t from) {
  const int64_t t = group_steps_, block = kv_.block_size();
  if (growth_ring_.size() != size_t(block)) growth_ring_.resize(size_t(block));
  if (member_.size() < slots_.size()) member_.resize(slots_.size());
  size_t f = 0;
  while (f < finished_in_plan_.size() && size_t(finished_in_plan_[f]) < from) ++f;
  for (size_t k = from; k < plan.sequences.size(); ++k) {
    if (f < finished_in_plan_.size() && size_t(finished_in_plan_[f]) == k) {
      ++f;
      continue;
    }
    const int32_t slot = planned_slots_[k];
    const Sequence& s = slots_[size_t(slot)];
    if (s.in_prefill()) continue;  // a prompt's chunk: it goes on prefilling
    // It decodes next. Only a sequence that emitted a token in this step
    // joins (a repeated step's gap is its inter-token latency): not a
    // preempted one whose recomputation just ended.
    if (!plan.sequences[k].samples) return false;
    if (group_size_ >= running_.size() || running_[group_size_] != slot) return false;
    GroupMember& m = member(slot);
    m.base = s.computed - t;
    m.next_growth = int64_t(s.blocks.size()) * block - m.base;
    m.finish = t + (s.output_tokens - s.generated);
    m.joined = t;
    m.order = next_order_++;
    m.prefix = uses_prefix_cache(s);
    growth_ring_[size_t(m.next_growth % block)].push_back(slot);
    finish_calendar_.emplace_back(m.finish, m.order, slot);
    std::push_heap(finish_calendar_.begin(), finish_calendar_.end(), kLater);
    group_base_sum_ += m.base;
    prefix_members_ += m.prefix ? 1 : 0;
    ++group_size_;
    joiners_.push_back(int32_t(k));
  }
  return true;
}

void Scheduler::sync_plan_with_group(IterationPlan& plan) {
  if (lazy_repeats_) {
    // Nobody reads the group's items: only their number is kept.
    plan.sequences.resize(group_size_);
    planned_slots_.resize(group_size_);
    finished_in_plan_.clear();
    joiners_.clear();
    plan_members_ = group_size_;
    return;
  }
  // The last plan's group decodes stay in place but for the finished ones;
  // the prompts that joined follow them as decodes (of one query token,
  // sampled, without a prefix hit); the other items go.
  size_t kept = plan_members_;
  if (!finished_in_plan_.empty()) kept = std::min(kept, size_t(finished_in_plan_.front()));
  size_t f = 0, j = 0;
  while (f < finished_in_plan_.size() && size_t(finished_in_plan_[f]) < kept) ++f;
  for (size_t k = kept; k < plan.sequences.size(); ++k) {
    if (k < plan_members_) {
      if (f < finished_in_plan_.size() && size_t(finished_in_plan_[f]) == k) {
        ++f;
        continue;
      }
    } else {
      if (j == joiners_.size()) break;
      if (size_t(joiners_[j]) != k) continue;
      ++j;
      ScheduledSequence& item = plan.sequences[k];
      item.num_query_tokens = 1;
      item.is_prefill = false;
      item.samples = true;
      item.num_sample_rows = 1;
      item.prefix_hit_tokens = 0;
    }
    if (kept != k) {
      plan.sequences[kept] = plan.sequences[k];
      planned_slots_[kept] = planned_slots_[k];
    }
    ++kept;
  }
  plan.sequences.resize(kept);
  planned_slots_.resize(kept);
  finished_in_plan_.clear();
  joiners_.clear();
  plan_members_ = kept;
}

void Scheduler::flush_member(int32_t slot, SchedulerListener& listener) {
  const GroupMember& m = member(slot);
  Sequence& s = slots_[size_t(slot)];
  s.computed = int32_t(m.base + group_steps_);
  s.generated = int32_t(s.output_tokens - (m.finish - group_steps_));
  if (group_steps_ > m.joined) listener.on_repeated_tokens(s.request_id, int32_t(group_steps_ - m.joined));
}

void Scheduler::end_repeats(SchedulerListener& listener) {
  if (!repeating_) return;
  for (size_t k = 0; k < group_size_; ++k) flush_member(running_[k], listener);
  clear_group();
  repeating_ = false;
}

void Scheduler::grow_member(int32_t slot) {
  GroupMember& m = member(slot);
  Sequence& s = slots_[size_t(slot)];
  kv_.grow_to(s.blocks, m.base + group_steps_ + 1);
  // One block more: the same bucket of the ring, block_size steps on.
  m.next_growth = int64_t(s.blocks.size()) * kv_.block_size() - m.base;
}

void Scheduler::grow_members_from_ring() {
  const int64_t t = group_steps_;
  for (const int32_t slot : growth_ring_[size_t(t % kv_.block_size())])
    if (member(slot).next_growth == t) grow_member(slot);
}

void Scheduler::grow_members_in_plan(IterationPlan& plan) {
  const int64_t t = group_steps_;
  for (size_t k = 0; k < group_size_; ++k) {
    const int32_t slot = running_[k];
    const GroupMember& m = member(slot);
    ScheduledSequence& item = plan.sequences[k];
    if (m.next_growth == t) {
      grow_member(slot);
      item.block_table = std::span<const int32_t>(slots_[size_t(slot)].blocks);
    }
    if (!lazy_repeats_) item.num_cached_tokens = int32_t(m.base + t);
    if (m.prefix) {
      Sequence& s = slots_[size_t(slot)];
      s.computed = int32_t(m.base + t);
      s.generated = int32_t(s.output_tokens - (m.finish - t));
      cache_full_blocks(s, int64_t(s.computed) + 1);
    }
  }
}

bool Scheduler::repeat_step(IterationPlan& plan, SchedulerListener& listener) {
  if (!repeating_) return false;
  const auto n = int64_t(group_size_);
  const int64_t t = group_steps_;
  const bool chunked = config_.policy == SchedulerPolicy::Chunked;
  // The stretch ends where schedule() would make another step: nobody
  // decodes, a prompt sampled out of running order, the decodes exceed the
  // token budget, ...
  bool ends = n == 0 || group_broken_ || (chunked && n > config_.max_num_batched_tokens);
  // ... a decode whose next token starts a block would find no free block
  // (schedule() would preempt; counted only where the free blocks might not
  // hold one for every decode), ...
  if (!ends && kv_.num_free() < n) {
    int64_t growths = 0;
    for (const int32_t slot : growth_ring_[size_t(t % kv_.block_size())])
      growths += member(slot).next_growth == t ? 1 : 0;
    ends = growths > kv_.num_free();
  }
  // ... or, under continuous (which admits in prefill-only steps), a
  // waiting request might be admitted.
  if (!ends && !chunked && !waiting_.empty() && running_.size() < size_t(config_.max_num_seqs))
    ends = could_admit_first_waiting(kv_.num_free());
  if (ends) {
    end_repeats(listener);
    return false;
  }
  sync_plan_with_group(plan);
  ++repeated_steps_;
  // As schedule() does it: continuous orders the queue before its decodes,
  // chunked after them (its decodes may cache blocks a waiting prompt hits).
  if (!chunked) order_waiting_by_prefix_match();
  // The decodes, in running order: blocks grown where the next token starts
  // one, full blocks cached. Where nobody reads the items and no member
  // caches blocks, only the members whose next token starts a block.
  const bool lazy = lazy_repeats_ && prefix_members_ == 0;
  if (lazy) {
    grow_members_from_ring();
  } else {
    grow_members_in_plan(plan);
  }
  // The plan's counts and sums for those decodes; the items that follow
  // count themselves.
  const auto decodes = int32_t(n);
  const int64_t cached = group_base_sum_ + n * t;
  plan.num_prefill_tokens = plan.num_prefill_sequences = plan.num_prefix_hit_tokens = 0;
  plan.num_decode_tokens = plan.num_decode_sequences = plan.num_sampling_sequences = plan.num_sample_rows = decodes;
  plan.prefill_attention = {};
  plan.decode_attention = {cached, cached + n};  // q = 1: c + 1 pairs each
  plan.items_lag = lazy_repeats_;
  repeated_items_ = size_t(n);
  if (chunked) {
    // The prompts' next chunks, then admissions, as schedule_chunked does.
    int64_t budget = config_.max_num_batched_tokens - n;
    schedule_ongoing_prefills(plan, budget, size_t(n), listener);
    order_waiting_by_prefix_match();
    admit_waiting_chunked(plan, budget, false, listener);
  }
  hit_.clear();
  return true;
}

bool Scheduler::could_admit_first_waiting(int64_t free_blocks) const {
  const Sequence& s = slots_[size_t(waiting_.front())];
  // Unsure where a prefix hit or the queue's order (lpm) depends on the
  // cache, which this very step may fill.
  if (uses_prefix_cache(s) || (config_.waiting_order == WaitingOrder::LongestPrefixMatch &&
                               config_.enable_prefix_caching && waiting_.size() > 1))
    return true;
  // Without a hit (hit_ is empty between steps): the whole sequence, as
  // continuous admits it.
  return admission_fits(s, s.total(), free_blocks);
}

void Scheduler::drop_members(std::span<const int32_t> positions) {
  const int64_t block = kv_.block_size();
  for (const int32_t pos : positions) {
    const int32_t slot = running_[size_t(pos)];
    const GroupMember& m = member(slot);
    std::vector<int32_t>& bucket = growth_ring_[size_t(m.next_growth % block)];
    bucket.erase(std::find(bucket.begin(), bucket.end(), slot));
    group_base_sum_ -= m.base;
    prefix_members_ -= m.prefix ? 1 : 0;
  }
  // Freed in running order, as remove_finished_from_running does.
  size_t kept = size_t(positions.front()), p = 0;
  for (size_t i = kept; i < running_.size(); ++i) {
    if (p < positions.size() && size_t(positions[p]) == i) {
      ++p;
      free_slot(running_[i]);
      continue;
    }
    running_[kept++] = running_[i];
  }
  running_.resize(kept);
  group_size_ -= positions.size();
}

void Scheduler::complete_repeat(const IterationPlan& plan, const IterationResult& result,
                                SchedulerListener& listener) {
  // Each decode emitted its one token: its KV now holds the token before.
  const size_t n = repeated_items_;
  const int64_t t = ++group_steps_;
  // The members that emitted their last token, in running order (running_
  // is ordered by when they joined), with their positions.
  finished_in_plan_.clear();
  while (!finish_calendar_.empty() && std::get<0>(finish_calendar_.front()) == t) {
    const auto [finish, order, slot] = finish_calendar_.front();
    std::pop_heap(finish_calendar_.begin(), finish_calendar_.end(), kLater);
    finish_calendar_.pop_back();
    const auto at = std::partition_point(running_.begin(), running_.begin() + std::ptrdiff_t(n),
                                         [&](int32_t other) { return member(other).order < order; });
    finished_in_plan_.push_back(int32_t(at - running_.begin()));
  }
  const size_t members_finished = finished_in_plan_.size();
  // The other items (prompts' chunks) as complete() does, telling the
  // listener of their tokens; then the finished ones, in plan order: the
  // decodes that emitted their last token leave the group (their
  // emissions recorded), then prompts that finished at once.
  std::vector<int32_t>& others_finished = joiners_;  // reused as scratch until the joins below
  others_finished.clear();
  for (size_t k = n; k < plan.sequences.size(); ++k)
    if (apply_item(k, plan.sequences[k], result, listener)) others_finished.push_back(int32_t(k));
  for (size_t i = 0; i < members_finished; ++i) {
    const int32_t slot = running_[size_t(finished_in_plan_[i])];
    flush_member(slot, listener);
    Sequence& s = slots_[size_t(slot)];
    s.finished = true;
    listener.on_finished(s.request_id);
  }
  for (const int32_t k : others_finished) {
    Sequence& s = slots_[size_t(planned_slots_[size_t(k)])];
    s.finished = true;
    listener.on_finished(s.request_id);
    finished_in_plan_.push_back(k);
  }
  if (members_finished > 0) drop_members(std::span<const int32_t>(finished_in_plan_).first(members_finished));
  if (!others_finished.empty()) remove_finished_from_running();
  // Prompts whose last chunk ran join the group, in running order.
  plan_members_ = n;
  joiners_.clear();
  if (!join_sampled_items(plan, n)) group_broken_ = true;
}

}  // namespace servesim
