// The one scheduler: decides each iteration's batch, for a simulation and
// for a real run alike. It owns the waiting queue, the running sequences and
// the KV block manager; it knows nothing of costs.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "sim/iteration_plan.h"
#include "sim/kv_block_pool.h"
#include "sim/request.h"

namespace servesim {

enum class SchedulerPolicy {
  // Batches of up to max_num_seqs requests run to completion; nobody joins a
  // running batch. KV blocks for prompt + output are reserved on admission.
  Static,
  // Iteration-level batching as vLLM V0 without chunked prefill: waiting
  // prompts join whenever KV blocks allow, in prefill-only iterations that
  // take priority over decodes; otherwise every running sequence decodes.
  Continuous,
  // Chunked prefill with a token budget per iteration, stall-free as in
  // Sarathi-Serve: running decodes first, then ongoing prefill chunks, then
  // new prompts, until max_num_batched_tokens is spent. A step that had to
  // preempt takes no new prompts (as vLLM's scheduler does).
  Chunked,
};

SchedulerPolicy parse_scheduler_policy(const std::string& name);  // InputError if unknown
std::string to_string(SchedulerPolicy p);

// The order in which waiting requests are considered for admission.
enum class WaitingOrder {
  // First come, first served; preempted sequences go back to the front
  // (vLLM's fcfs).
  Fcfs,
  // Longest prefix match first: before each step's admissions the waiting
  // requests are ordered by how many of their tokens the prefix cache holds
  // (SGLang's lpm), preempted sequences still first. Falls back to FCFS
  // while more than kLpmMaxWaiting wait, as SGLang does, so a long queue
  // costs no lookups.
  LongestPrefixMatch,
};
inline constexpr size_t kLpmMaxWaiting = 128;

WaitingOrder parse_waiting_order(const std::string& name);  // InputError if unknown
std::string to_string(WaitingOrder o);

struct SchedulerConfig {
  SchedulerPolicy policy = SchedulerPolicy::Chunked;
  int32_t max_num_seqs = 256;            // vLLM's default
  int32_t max_num_batched_tokens = 2048; // token budget per iteration
  int32_t block_size = 16;               // tokens per KV block
  int64_t num_gpu_blocks = 0;            // KV capacity in blocks
  int64_t max_model_len = 0;             // longest prompt + output accepted
  // Fraction of the KV blocks kept free when admitting a new prompt, so a
  // fresh admission does not force an immediate preemption (vLLM V0: 0.01).
  double watermark = 0.01;
  // Speculative decoding: each decode proposes up to k draft tokens and asks
  // for k' + 1 query tokens (its newest token and the drafts), k' = min(k,
  // output tokens still to emit - 1, the token budget left - 1); 0 = off.
  int32_t num_speculative_tokens = 0;
  // No speculation (k' = 0) in an iteration that starts with at least this
  // many running sequences (vLLM's disable_by_batch_size); 0 = never.
  int32_t speculative_disable_by_batch_size = 0;
  // Automatic prefix caching (vLLM V1's, on by default there too): full
  // blocks are kept by content and a new prompt reuses those its prefix
  // matches. Requests without token identity take no part.
  bool enable_prefix_caching = true;
  WaitingOrder waiting_order = WaitingOrder::Fcfs;

  // Throws InputError naming the flag of the first bad value.
  void validate() const;
};

// Told about what happens to each request, in time order. The runner
// implements it to record the metrics.
class SchedulerListener {
 public:
  virtual ~SchedulerListener() = default;
  // First time a request is put in a plan (once, before its first iteration).
  virtual void on_first_scheduled(int64_t request_id) = 0;
  // `tokens` output tokens were emitted at the end of the current iteration.
  virtual void on_tokens(int64_t request_id, int32_t tokens) = 0;
  // A repeated decode step's sequence (Scheduler::repeat_step) emitted one
  // token in each of its last `tokens` steps, the last one now. Only a
  // serving loop whose executor allows repeated steps hears of it; the
  // others (real runs) never do.
  virtual void on_repeated_tokens(int64_t request_id, int32_t tokens) { (void)request_id, (void)tokens; }
  virtual void on_finished(int64_t request_id) = 0;
  // Its KV blocks were taken back; it will recompute prompt + generated tokens.
  virtual void on_preempted(int64_t request_id) = 0;
  // A request with token identity was admitted with the prefix cache on: of
  // its `query_tokens` tokens (prompt, plus the generated ones when it was
  // preempted), the first `hit_tokens` were found in the cache. Counted at
  // each admission (vLLM's prefix_cache_queries / prefix_cache_hits);
  // `readmission` tells a preempted request's from a first one.
  virtual void on_prefix_cache_lookup(int64_t request_id, int32_t query_tokens, int32_t hit_tokens,
                                      bool readmission) {
    (void)request_id, (void)query_tokens, (void)hit_tokens, (void)readmission;
  }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  const SchedulerConfig& config() const { return config_; }
  const KvBlockPool& kv() const { return kv_; }

  // Queues a request that has arrived. Returns the reason when it can never
  // be served (too long for the model or for the whole KV cache, or for one
  // iteration's token budget under a policy that cannot chunk); it is then
  // not queued.
  std::optional<std::string> add_request(const Request& request);

  // Fills `plan` (cleared first) with the next iteration's batch. The plan is
  // empty only when nothing is waiting or running.
  void schedule(IterationPlan& plan, SchedulerListener& listener);

  // Applies the executed iteration: advances each sequence's cache, emits its
  // tokens, retires finished sequences and frees their blocks.
  void complete(const IterationPlan& plan, const IterationResult& result,
                SchedulerListener& listener);

  // Repeated decode steps: the serving loop's shortcut through stretches in
  // which the running decodes each take one token a step. After complete()
  // of a step, begin_repeats(plan) says whether the next steps may be made
  // this way: every decode took one query token, without speculation (not
  // under the static policy), and the running sequences are the step's
  // sampled ones, in their order, then prompts still prefilling. Those
  // that sampled form the stretch's decode group. Each repeat_step(plan,
  // listener) then turns `plan` into the next step, exactly what schedule()
  // would make: the group's decodes (finished sequences dropped, prompts
  // whose last chunk ran joined, blocks grown and full blocks cached, in
  // running order), then under chunked the prompts' next chunks and the
  // waiting prompts admitted, as schedule_chunked does. Where the next
  // step would differ (the free blocks would not hold every decode's next
  // block, a decode would not fit the token budget, a joining prompt is not
  // next in running order, or under continuous a waiting request might be
  // admitted) it ends the stretch and returns false; schedule() then makes
  // the step. After the executor ran a repeated step, complete_repeat()
  // applies it as complete() would: the group's decodes by counters, not
  // per sequence, the other items as complete() does. The listener hears of
  // each group member's tokens when it leaves (it emitted its last token:
  // on_repeated_tokens, then on_finished) or when the stretch ends
  // (end_repeats); the caller adds the repeated decodes' inter-token gaps
  // (MetricsRecorder::on_repeated_step over num_repeated_sequences()).
  bool begin_repeats(const IterationPlan& plan);
  bool repeat_step(IterationPlan& plan, SchedulerListener& listener);
  void complete_repeat(const IterationPlan& plan, const IterationResult& result, SchedulerListener& listener);
  // Ends a stretch (the last emission of each group member is now).
  void end_repeats(SchedulerListener& listener);
  bool repeating() const { return repeating_; }
  // The last repeated step's group decodes: its plan's first items.
  int64_t num_repeated_sequences() const { return int64_t(repeated_items_); }
  // Lazy repeats: the executor reads only the plan's counts and sums
  // (Executor::needs_plan_items), so a repeated step keeps only the number
  // of the group's items, not their contents (IterationPlan::items_lag).
  void set_lazy_repeats(bool lazy) { lazy_repeats_ = lazy; }

  // Drops a request that is waiting or running (its client went away):
  // frees its KV blocks (full blocks keep their prefix-cache keys) and
  // forgets it. Call between iterations (not between schedule() and
  // complete()). Returns false when the scheduler does not hold it.
  bool abort_request(int64_t request_id);

  // Prompt tokens of `request` this scheduler's prefix cache holds now: what
  // its admission would find (0 without caching or token identity). What a
  // prefix-aware router asks of each replica.
  int32_t cached_prefix_tokens(const Request& request) const;

  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  int64_t num_preemptions() const { return preemptions_; }
  int64_t num_repeated_steps() const { return repeated_steps_; }  // repeat_step's, so far

 private:
  struct Sequence {
    int64_t request_id = 0;
    int32_t prompt_tokens = 0;
    int32_t output_tokens = 0;
    int32_t generated = 0;  // output tokens emitted so far
    int32_t computed = 0;   // tokens whose KV is in the cache
    bool ever_scheduled = false;
    bool finished = false;
    std::vector<int32_t> blocks;
    TokenIdentity tokens;             // empty: no identity, no prefix caching
    std::vector<uint64_t> block_keys; // prefix-cache key of each full block so far
    int32_t cached_blocks = 0;        // blocks[0 .. cached_blocks) hold their key
    // Tokens the sequence holds: prompt, then every generated token. Its KV
    // is complete when computed == total() - 1 (the newest token is the next
    // decode's query) or, during a prefill, grows to total().
    int32_t total() const { return prompt_tokens + generated; }
    int32_t remaining() const { return total() - computed; }
    bool in_prefill() const { return remaining() > 1 || generated == 0; }
  };

  // Whether the sequence's blocks have room for `tokens` tokens.
  bool holds(const Sequence& s, int64_t tokens) const {
    return tokens <= int64_t(s.blocks.size()) * kv_.block_size();
  }
  int32_t new_slot();
  void free_slot(int32_t slot);
  void add_to_plan(IterationPlan& plan, int32_t slot, int32_t query_tokens,
                   SchedulerListener& listener, int32_t prefix_hit_tokens = 0);
  void preempt(int32_t slot, SchedulerListener& listener);
  // schedule_chunked's admissions: waiting prompts FCFS while the budget,
  // sequence slots and free blocks allow (after a preemption, only where
  // nothing runs).
  void admit_waiting_chunked(IterationPlan& plan, int64_t& budget, bool preempted, SchedulerListener& listener);
  // Applies plan item k's step to its sequence (complete()'s bookkeeping,
  // the listener told of its tokens); true where the sequence has ended.
  bool apply_item(size_t k, const ScheduledSequence& item, const IterationResult& result,
                  SchedulerListener& listener);
  // Frees the sequences marked finished and drops them from running_.
  void remove_finished_from_running();

  // Admission of a waiting sequence (s.computed == 0), in three steps:
  // look its prefix up (hit_ holds the blocks; returns the tokens they
  // cover), check that `tokens` tokens fit, then take the hit blocks and
  // report the lookup.
  bool uses_prefix_cache(const Sequence& s) const {
    return config_.enable_prefix_caching && !s.tokens.empty();
  }
  int32_t find_prefix_hit(Sequence& s);
  bool admission_fits(const Sequence& s, int64_t tokens, int64_t free_blocks) const;  // with free_blocks free
  void take_prefix_hit(Sequence& s, SchedulerListener& listener);
  // Gives the blocks that the first `tokens` tokens fill their keys, so
  // later prompts (in this very step too) can find them.
  void cache_full_blocks(Sequence& s, int64_t tokens);
  void order_waiting_by_prefix_match();

  void schedule_static(IterationPlan& plan, SchedulerListener& listener);
  void schedule_continuous(IterationPlan& plan, SchedulerListener& listener);
  void schedule_chunked(IterationPlan& plan, SchedulerListener& listener);
  // Draft tokens running[i]'s decode may propose this iteration (k' of
  // SchedulerConfig::num_speculative_tokens) within `budget` query tokens.
  int32_t speculative_drafts(const Sequence& s, int64_t budget) const;
  // Decode step for running[i] with `query_tokens` (1 + drafts): grows its
  // blocks to hold them. Without the blocks, it first drops the drafts
  // (query_tokens becomes 1), then preempts the newest running sequences
  // while blocks are short. Returns false if the sequence preempted itself.
  bool reserve_decode_slot(size_t i, int32_t& query_tokens, SchedulerListener& listener) {
    // Most steps stay inside the sequence's last block: nothing to grow.
    const Sequence& s = slots_[size_t(running_[i])];
    return holds(s, int64_t(s.computed) + query_tokens) || grow_decode_slot(i, query_tokens, listener);
  }
  bool grow_decode_slot(size_t i, int32_t& query_tokens, SchedulerListener& listener);
  // Whether the next continuous step could admit the first waiting request
  // with `free_blocks` free blocks then (true where unsure); for repeat_step.
  bool could_admit_first_waiting(int64_t free_blocks) const;

  SchedulerConfig config_;
  KvBlockPool kv_;
  std::vector<Sequence> slots_;  // sequence storage, reused to keep block vectors' capacity
  std::vector<int32_t> free_slots_;
  std::deque<int32_t> waiting_;  // FCFS; preempted sequences go back to the front
  std::vector<int32_t> running_; // admission order: the last one is preempted first
  std::vector<int32_t> planned_slots_;  // slot of each sequence in the current plan
  std::vector<int32_t> hit_;  // blocks of the last find_prefix_hit
  int64_t watermark_blocks_ = 0;
  bool speculate_this_iteration_ = false;  // k > 0 and not disabled by batch size
  int64_t preemptions_ = 0;
  std::vector<int32_t> finished_in_plan_;  // positions in the last plan of the sequences it finished

  // The decode group of a stretch of repeated steps: running_[0, n), the
  // first n items of each repeated step's plan. Their Sequence's computed
  // and generated are brought up to date only when they leave or the
  // stretch ends (flush_member); until then a member's numbers are offsets
  // from group_steps_, so that a step moves them all at once: only the
  // members whose next token starts a block (growth_ring_) and those that
  // emit their last one (finish_calendar_) are visited.
  struct GroupMember {
    int64_t base = 0;         // cached tokens before the next step: base + group_steps_
    int64_t next_growth = 0;  // the group_steps_ at which they fill the blocks: blocks x block_size - base
    int64_t finish = 0;       // the group_steps_ once it has emitted its last token
    int64_t joined = 0;       // group_steps_ when it joined
    int64_t order = 0;        // when it joined, counted: running order
    bool prefix = false;      // caches its full blocks (uses_prefix_cache)
  };
  GroupMember& member(int32_t slot) { return member_[size_t(slot)]; }
  // Joins the sampled, unfinished items of `plan` from position `from` on
  // (begin_repeats: all; complete_repeat: the prompts whose last chunk ran)
  // while each is next in running_; false where one is not.
  bool join_sampled_items(const IterationPlan& plan, size_t from);
  // The plan of the last step as the group's decodes: finished items
  // dropped, joiners turned into decodes, the others dropped.
  void sync_plan_with_group(IterationPlan& plan);
  void flush_member(int32_t slot, SchedulerListener& listener);
  // schedule_chunked's ongoing prefills of running_[from, end).
  void schedule_ongoing_prefills(IterationPlan& plan, int64_t& budget, size_t from, SchedulerListener& listener);
  // The group's growths in the step at group_steps_, in running order:
  // from its ring bucket (lazy), or every member with its plan item
  // brought up to date.
  void grow_members_from_ring();
  void grow_members_in_plan(IterationPlan& plan);
  void grow_member(int32_t slot);
  // Drops the members that left from running_[0, n) (positions in
  // `positions`, ascending) and from the growth ring.
  void drop_members(std::span<const int32_t> positions);
  void clear_group();
  std::vector<GroupMember> member_;  // by slot
  size_t group_size_ = 0;
  std::vector<std::vector<int32_t>> growth_ring_;  // block_size buckets of slots, by next_growth, in running order
  // (finish, order, slot) of every member, earliest first.
  std::vector<std::tuple<int64_t, int64_t, int32_t>> finish_calendar_;
  int64_t group_base_sum_ = 0;  // sum of the members' base
  int64_t next_order_ = 0;
  int32_t prefix_members_ = 0;
  std::vector<int32_t> joiners_;  // positions in the last plan of the items that joined the group after it
  size_t plan_members_ = 0;       // the last plan's first items that were group decodes
  int64_t group_steps_ = 0;       // repeated steps completed
  bool repeating_ = false;
  bool group_broken_ = false;     // a prompt sampled out of running order: the stretch ends
  bool lazy_repeats_ = false;
  size_t repeated_items_ = 0;  // the last repeat_step's group decodes: its plan's first items
  int64_t repeated_steps_ = 0;
};

}  // namespace servesim
