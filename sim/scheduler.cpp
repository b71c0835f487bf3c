#include "sim/scheduler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/block_hashes.h"
#include "sim/errors.h"
#include "sim/kv_capacity.h"

namespace servesim {

SchedulerPolicy parse_scheduler_policy(const std::string& name) {
  if (name == "static") return SchedulerPolicy::Static;
  if (name == "continuous") return SchedulerPolicy::Continuous;
  if (name == "chunked") return SchedulerPolicy::Chunked;
  throw InputError(fmt::format("--scheduler: '{}' is not one of static, continuous, chunked", name));
}

std::string to_string(SchedulerPolicy p) {
  switch (p) {
    case SchedulerPolicy::Static: return "static";
    case SchedulerPolicy::Continuous: return "continuous";
    case SchedulerPolicy::Chunked: return "chunked";
  }
  return "?";
}

WaitingOrder parse_waiting_order(const std::string& name) {
  if (name == "fcfs") return WaitingOrder::Fcfs;
  if (name == "lpm") return WaitingOrder::LongestPrefixMatch;
  throw InputError(fmt::format("--scheduling-policy: '{}' is not one of fcfs, lpm", name));
}

std::string to_string(WaitingOrder o) {
  return o == WaitingOrder::Fcfs ? "fcfs" : "lpm";
}

void SchedulerConfig::validate() const {
  if (max_num_seqs < 1)
    throw InputError(fmt::format("--max-num-seqs must be >= 1 (got {})", max_num_seqs));
  if (max_num_batched_tokens < 1)
    throw InputError(
        fmt::format("--max-num-batched-tokens must be >= 1 (got {})", max_num_batched_tokens));
  if (block_size < 1 || block_size > kMaxBlockSize)
    throw InputError(fmt::format("--block-size must be in 1 .. {} (got {})", kMaxBlockSize, block_size));
  if (num_gpu_blocks < 1)
    throw InputError(fmt::format("--num-gpu-blocks must be >= 1 (got {})", num_gpu_blocks));
  if (max_model_len < 1)
    throw InputError(fmt::format("--max-model-len must be >= 1 (got {})", max_model_len));
  if (num_speculative_tokens < 0 || num_speculative_tokens > 64)
    throw InputError(fmt::format("--num-speculative-tokens must be in 0 .. 64 (got {})", num_speculative_tokens));
  if (speculative_disable_by_batch_size < 0)
    throw InputError(fmt::format("--speculative-disable-by-batch-size must be >= 0 (got {})",
                                 speculative_disable_by_batch_size));
  if (!(watermark >= 0 && watermark < 1))
    throw InputError(fmt::format("KV watermark must be in [0, 1) (got {})", watermark));
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), kv_((config.validate(), config.num_gpu_blocks), config.block_size) {
  watermark_blocks_ = int64_t(std::floor(config_.watermark * double(config_.num_gpu_blocks)));
}

int32_t Scheduler::new_slot() {
  if (!free_slots_.empty()) {
    int32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  slots_.emplace_back();
  return int32_t(slots_.size() - 1);
}

void Scheduler::free_slot(int32_t slot) {
  Sequence& s = slots_[size_t(slot)];
  kv_.release(s.blocks);
  std::vector<int32_t> keep = std::move(s.blocks);  // keep the capacity for reuse
  s = Sequence{};
  s.blocks = std::move(keep);
  free_slots_.push_back(slot);
}

bool Scheduler::abort_request(int64_t request_id) {
  // A stretch's members hold their counters in member_ (only simulations repeat steps; none aborts).
  if (repeating_) throw std::logic_error("Scheduler::abort_request during a stretch of repeated steps");
  auto holds = [&](int32_t slot) { return slots_[size_t(slot)].request_id == request_id; };
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), holds); it != waiting_.end()) {
    const int32_t slot = *it;
    waiting_.erase(it);
    free_slot(slot);
    return true;
  }
  if (auto it = std::find_if(running_.begin(), running_.end(), holds); it != running_.end()) {
    const int32_t slot = *it;
    running_.erase(it);
    free_slot(slot);
    return true;
  }
  return false;
}

std::optional<std::string> Scheduler::add_request(const Request& r) {
  // Reasons name the limit, not the request, so a run has few distinct ones.
  const int64_t longest = int64_t(r.prompt_tokens) + r.output_tokens;
  if (r.prompt_tokens < 1 || r.output_tokens < 1) return "empty prompt or output";
  if (longest > config_.max_model_len)
    return fmt::format("prompt + output longer than the max model length ({} tokens)",
                       config_.max_model_len);
  // A preempted sequence is readmitted with up to prompt + output tokens, and
  // admissions keep the watermark free: both must fit in an empty cache.
  const int64_t usable = kv_.num_blocks() - watermark_blocks_;
  if (kv_.blocks_for(longest) > usable)
    return fmt::format("prompt + output needs more KV blocks than the cache admits ({} blocks of {} tokens)",
                       usable, kv_.block_size());
  // Without chunking a whole prompt must fit one iteration: under static the
  // prompt (never preempted), under continuous a recompute of up to
  // prompt + output - 1 tokens.
  const int64_t whole_prefill =
      config_.policy == SchedulerPolicy::Static ? int64_t(r.prompt_tokens) : longest - 1;
  if (config_.policy != SchedulerPolicy::Chunked && whole_prefill > config_.max_num_batched_tokens)
    return fmt::format("{} longer than --max-num-batched-tokens ({}), which the {} policy cannot split",
                       config_.policy == SchedulerPolicy::Static ? "prompt" : "prompt + output - 1 (a recompute)",
                       config_.max_num_batched_tokens, to_string(config_.policy));

  const int32_t slot = new_slot();
  Sequence& s = slots_[size_t(slot)];
  s.request_id = r.id;
  s.prompt_tokens = r.prompt_tokens;
  s.output_tokens = r.output_tokens;
  s.tokens = r.tokens;
  waiting_.push_back(slot);
  return std::nullopt;
}

int32_t Scheduler::find_prefix_hit(Sequence& s) {
  hit_.clear();
  if (!uses_prefix_cache(s) || s.computed > 0 || !s.blocks.empty()) return 0;
  // Room for the keys of every block the sequence may fill, at once (a
  // power of two, as push_back would grow it: the allocator reuses those).
  s.block_keys.reserve(std::bit_ceil(size_t(kv_.blocks_for(int64_t(s.prompt_tokens) + s.output_tokens))));
  // vLLM's get_computed_blocks: the longest run of cached full blocks, but
  // at most (num_tokens - 1) / block_size of them, so that at least one
  // token is computed and yields the logits to sample from.
  extend_block_keys(s.tokens, s.total(), kv_.block_size(), s.block_keys);
  const int64_t max_blocks = (int64_t(s.total()) - 1) / kv_.block_size();
  kv_.find_cached_prefix(s.block_keys, max_blocks, hit_);
  return int32_t(int64_t(hit_.size()) * kv_.block_size());
}

int32_t Scheduler::cached_prefix_tokens(const Request& request) const {
  if (!config_.enable_prefix_caching || request.tokens.empty() || request.prompt_tokens < 2) return 0;
  std::vector<uint64_t> keys;
  extend_block_keys(request.tokens, request.prompt_tokens, kv_.block_size(), keys);
  std::vector<int32_t> hit;
  kv_.find_cached_prefix(keys, (int64_t(request.prompt_tokens) - 1) / kv_.block_size(), hit);
  return int32_t(int64_t(hit.size()) * kv_.block_size());
}

bool Scheduler::admission_fits(const Sequence& s, int64_t tokens, int64_t free_blocks) const {
  // Hit blocks nobody holds sit in the free queue: taking them uses up free
  // blocks as a new allocation does (vLLM's allocate_slots counts them as
  // num_evictable_computed_blocks).
  const int64_t need = kv_.blocks_for(tokens) - int64_t(s.blocks.size()) - int64_t(hit_.size());
  return free_blocks - kv_.count_free(hit_) - need >= watermark_blocks_;
}

void Scheduler::take_prefix_hit(Sequence& s, SchedulerListener& listener) {
  if (!uses_prefix_cache(s)) return;
  const int32_t hit_tokens = int32_t(int64_t(hit_.size()) * kv_.block_size());
  kv_.take_cached(hit_, s.blocks);
  s.computed = hit_tokens;
  s.cached_blocks = int32_t(hit_.size());
  listener.on_prefix_cache_lookup(s.request_id, s.total(), hit_tokens, s.ever_scheduled);
  hit_.clear();
}

void Scheduler::cache_full_blocks(Sequence& s, int64_t tokens) {
  if (!uses_prefix_cache(s)) return;
  // Only tokens the sequence holds: a speculative step's drafts are not
  // known yet (vLLM caches min(computed + new, num_tokens)).
  const int64_t full = std::min<int64_t>(tokens, s.total()) / kv_.block_size();
  if (full <= s.cached_blocks) return;
  extend_block_keys(s.tokens, full * kv_.block_size(), kv_.block_size(), s.block_keys);
  const size_t first = size_t(s.cached_blocks), n = size_t(full) - first;
  kv_.cache(std::span<const int32_t>(s.blocks).subspan(first, n),
            std::span<const uint64_t>(s.block_keys).subspan(first, n));
  s.cached_blocks = int32_t(full);
}

void Scheduler::order_waiting_by_prefix_match() {
  if (config_.waiting_order != WaitingOrder::LongestPrefixMatch || waiting_.size() < 2 ||
      waiting_.size() > kLpmMaxWaiting || !config_.enable_prefix_caching)
    return;
  // Preempted sequences keep their place at the front; the rest are ordered
  // by cached tokens, most first, ties by arrival (a stable sort).
  auto first_new = std::find_if(waiting_.begin(), waiting_.end(),
                                [&](int32_t slot) { return !slots_[size_t(slot)].ever_scheduled; });
  std::vector<std::pair<int32_t, int32_t>> keyed;  // (hit tokens, slot)
  for (auto it = first_new; it != waiting_.end(); ++it) keyed.emplace_back(find_prefix_hit(slots_[size_t(*it)]), *it);
  hit_.clear();
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  auto out = first_new;
  for (const auto& k : keyed) *out++ = k.second;
}

void Scheduler::add_to_plan(IterationPlan& plan, int32_t slot, int32_t query_tokens,
                            SchedulerListener& listener, int32_t prefix_hit_tokens) {
  Sequence& s = slots_[size_t(slot)];
  if (!s.ever_scheduled) {
    s.ever_scheduled = true;
    listener.on_first_scheduled(s.request_id);
  }
  ScheduledSequence& item = plan.append();
  item.request_id = s.request_id;
  item.num_query_tokens = query_tokens;
  item.num_cached_tokens = s.computed;
  item.is_prefill = s.in_prefill();
  // A prefill samples once its last chunk is in; a decode always (its
  // query tokens run past total() by the drafts it verifies).
  item.samples = s.computed + query_tokens >= s.total();
  item.num_sample_rows = !item.samples ? 0 : item.is_prefill ? 1 : query_tokens;
  item.block_table = std::span<const int32_t>(s.blocks);
  item.prefix_hit_tokens = prefix_hit_tokens;
  item.tokens = s.tokens.empty() ? nullptr : &s.tokens;
  plan.count_last();
  planned_slots_.push_back(slot);
  // Cached when scheduled, as vLLM does: a prompt admitted later in this
  // step may reuse blocks this step computes, since every layer writes the
  // whole batch's K and V before any attention reads them.
  cache_full_blocks(s, int64_t(s.computed) + query_tokens);
}

void Scheduler::preempt(int32_t slot, SchedulerListener& listener) {
  Sequence& s = slots_[size_t(slot)];
  kv_.release(s.blocks);
  s.computed = 0;  // recompute: prompt and generated tokens are prefilled again
  s.cached_blocks = 0;  // its keys stay: a readmission may find its own blocks
  ++preemptions_;
  listener.on_preempted(s.request_id);
  auto it = std::find(running_.begin(), running_.end(), slot);
  running_.erase(it);
  waiting_.push_front(slot);
}

int32_t Scheduler::speculative_drafts(const Sequence& s, int64_t budget) const {
  if (!speculate_this_iteration_) return 0;
  // No draft beyond the last token the request emits: a step emits at most
  // drafts + 1 tokens. Within the chunked policy's budget, drafts are query tokens.
  const int64_t drafts = std::min<int64_t>({config_.num_speculative_tokens,
                                            int64_t(s.output_tokens) - s.generated - 1, budget - 1});
  return int32_t(std::max<int64_t>(drafts, 0));
}

bool Scheduler::grow_decode_slot(size_t i, int32_t& query_tokens, SchedulerListener& listener) {
  const int32_t slot = running_[i];
  Sequence& s = slots_[size_t(slot)];
  if (query_tokens > 1 && !kv_.grow_to(s.blocks, int64_t(s.computed) + query_tokens)) query_tokens = 1;
  while (!kv_.grow_to(slots_[size_t(slot)].blocks, slots_[size_t(slot)].computed + query_tokens)) {
    const int32_t victim = running_.back();  // the newest admission goes first (vLLM)
    preempt(victim, listener);
    if (victim == slot) return false;
  }
  return true;
}

void Scheduler::schedule(IterationPlan& plan, SchedulerListener& listener) {
  if (repeating_) end_repeats(listener);
  plan.clear();
  planned_slots_.clear();
  speculate_this_iteration_ =
      config_.num_speculative_tokens > 0 && (config_.speculative_disable_by_batch_size == 0 ||
                                             int64_t(running_.size()) < config_.speculative_disable_by_batch_size);
  switch (config_.policy) {
    case SchedulerPolicy::Static: schedule_static(plan, listener); break;
    case SchedulerPolicy::Continuous: schedule_continuous(plan, listener); break;
    case SchedulerPolicy::Chunked: schedule_chunked(plan, listener); break;
  }
  if (plan.empty() && has_unfinished())
    throw std::logic_error(fmt::format(
        "scheduler stalled with {} waiting and {} running sequences", waiting_.size(),
        running_.size()));
}

void Scheduler::schedule_static(IterationPlan& plan, SchedulerListener& listener) {
  if (running_.empty()) {
    // Form the next batch: FCFS, up to max_num_seqs, prompts within the token
    // budget, each with blocks reserved for its whole lifetime.
    int64_t tokens = 0;
    order_waiting_by_prefix_match();
    std::vector<int32_t> hit_tokens_of;  // per running_ entry admitted now
    while (!waiting_.empty() && running_.size() < size_t(config_.max_num_seqs)) {
      Sequence& s = slots_[size_t(waiting_.front())];
      const int32_t hit = find_prefix_hit(s);
      if (tokens + s.remaining() - hit > config_.max_num_batched_tokens) break;
      const int64_t lifetime = int64_t(s.prompt_tokens) + s.output_tokens;
      // No watermark: nobody joins a running static batch.
      if (kv_.num_free() - kv_.count_free(hit_) < kv_.blocks_for(lifetime) - int64_t(hit_.size())) break;
      take_prefix_hit(s, listener);
      kv_.grow_to(s.blocks, lifetime);
      tokens += s.remaining();
      running_.push_back(waiting_.front());
      waiting_.pop_front();
      hit_tokens_of.push_back(hit);
    }
    hit_.clear();
    // Those admitted now come last in running_; their plan items carry their hits.
    const size_t first_admitted = running_.size() - hit_tokens_of.size();
    for (size_t i = 0; i < running_.size(); ++i) {
      const Sequence& s = slots_[size_t(running_[i])];
      const int32_t query = s.in_prefill() ? s.remaining()
                                           : 1 + speculative_drafts(s, std::numeric_limits<int32_t>::max());
      add_to_plan(plan, running_[i], query, listener, i >= first_admitted ? hit_tokens_of[i - first_admitted] : 0);
    }
    return;
  }
  // Blocks for the whole lifetime are reserved, so drafts always fit.
  for (int32_t slot : running_) {
    const Sequence& s = slots_[size_t(slot)];
    const int32_t query = s.in_prefill() ? s.remaining()
                                         : 1 + speculative_drafts(s, std::numeric_limits<int32_t>::max());
    add_to_plan(plan, slot, query, listener);
  }
}

void Scheduler::schedule_continuous(IterationPlan& plan, SchedulerListener& listener) {
  // Prefills first: admit waiting prompts FCFS while they fit.
  order_waiting_by_prefix_match();
  int64_t tokens = 0;
  while (!waiting_.empty() && running_.size() < size_t(config_.max_num_seqs)) {
    const int32_t slot = waiting_.front();
    Sequence& s = slots_[size_t(slot)];
    const int32_t hit = find_prefix_hit(s);
    if (tokens + s.remaining() - hit > config_.max_num_batched_tokens) break;
    if (!admission_fits(s, s.total(), kv_.num_free())) break;
    take_prefix_hit(s, listener);
    kv_.grow_to(s.blocks, s.total());
    tokens += s.remaining();
    waiting_.pop_front();
    running_.push_back(slot);
    add_to_plan(plan, slot, s.remaining(), listener, hit);
  }
  hit_.clear();
  if (!plan.empty()) return;  // prefill-only iteration

  // Otherwise every running sequence decodes one token (or verifies drafts).
  for (size_t i = 0; i < running_.size(); ++i) {
    int32_t query = 1 + speculative_drafts(slots_[size_t(running_[i])], std::numeric_limits<int32_t>::max());
    if (!reserve_decode_slot(i, query, listener)) break;
    add_to_plan(plan, running_[i], query, listener);
  }
}

void Scheduler::schedule_chunked(IterationPlan& plan, SchedulerListener& listener) {
  const int64_t preemptions_before = preemptions_;
  for (;;) {
    int64_t budget = config_.max_num_batched_tokens;
    // 1. Running decodes, one token each (1 + drafts when speculating),
    //    preempting the newest if blocks run out.
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      if (slots_[size_t(running_[i])].in_prefill()) continue;
      int32_t query = 1 + speculative_drafts(slots_[size_t(running_[i])], budget);
      if (!reserve_decode_slot(i, query, listener)) break;
      add_to_plan(plan, running_[i], query, listener);
      budget -= query;
    }
    // 2. Ongoing prefills, as much of each as budget and free blocks allow.
    schedule_ongoing_prefills(plan, budget, 0, listener);
    // 3. New prompts, FCFS, while budget, sequence slots and blocks allow --
    //    but not in a step that preempted (vLLM's rule: the blocks a
    //    preemption freed go to the running sequences, and the preempted
    //    one is not readmitted at once), unless nothing runs at all.
    const bool preempted = preemptions_ > preemptions_before;
    if (!preempted || running_.empty()) order_waiting_by_prefix_match();
    admit_waiting_chunked(plan, budget, preempted, listener);
    if (!plan.empty() || running_.empty()) return;
    // Every running sequence is a prefill stuck without blocks: free the
    // newest one's blocks so the others can go on.
    preempt(running_.back(), listener);
  }
}

void Scheduler::schedule_ongoing_prefills(IterationPlan& plan, int64_t& budget, size_t from,
                                          SchedulerListener& listener) {
  for (size_t i = from; i < running_.size() && budget > 0; ++i) {
    const int32_t slot = running_[i];
    Sequence& s = slots_[size_t(slot)];
    if (!s.in_prefill()) continue;
    const int64_t room = (int64_t(s.blocks.size()) + kv_.num_free()) * kv_.block_size() - s.computed;
    const int64_t chunk = std::min({int64_t(s.remaining()), budget, room});
    if (chunk <= 0) continue;
    kv_.grow_to(s.blocks, s.computed + chunk);
    add_to_plan(plan, slot, int32_t(chunk), listener);
    budget -= chunk;
  }
}

void Scheduler::admit_waiting_chunked(IterationPlan& plan, int64_t& budget, bool preempted,
                                      SchedulerListener& listener) {
  while (budget > 0 && !waiting_.empty() && running_.size() < size_t(config_.max_num_seqs) &&
         (!preempted || running_.empty())) {
    const int32_t slot = waiting_.front();
    Sequence& s = slots_[size_t(slot)];
    const int32_t hit = find_prefix_hit(s);
    const int64_t chunk = std::min(int64_t(s.remaining()) - hit, budget);
    if (!admission_fits(s, int64_t(hit) + chunk, kv_.num_free())) break;
    take_prefix_hit(s, listener);
    kv_.grow_to(s.blocks, s.computed + chunk);
    waiting_.pop_front();
    running_.push_back(slot);
    add_to_plan(plan, slot, int32_t(chunk), listener, hit);
    budget -= chunk;
  }
  hit_.clear();
}

void Scheduler::complete(const IterationPlan& plan, const IterationResult& result,
                         SchedulerListener& listener) {
  if (planned_slots_.size() != plan.sequences.size())
    throw std::logic_error("Scheduler::complete called with a plan it did not make");
  bool any_finished = false;
  finished_in_plan_.clear();
  for (size_t k = 0; k < plan.sequences.size(); ++k) {
    Sequence& s = slots_[size_t(planned_slots_[k])];
    if (!apply_item(k, plan.sequences[k], result, listener)) continue;
    s.finished = true;
    any_finished = true;
    finished_in_plan_.push_back(int32_t(k));
    listener.on_finished(s.request_id);
  }
  if (any_finished) remove_finished_from_running();
}

bool Scheduler::apply_item(size_t k, const ScheduledSequence& item, const IterationResult& result,
                           SchedulerListener& listener) {
  Sequence& s = slots_[size_t(planned_slots_[k])];
  if (!item.samples) {
    s.computed += item.num_query_tokens;
    return false;
  }
  int32_t emitted = result.emitted_tokens.empty() ? 1 : result.emitted_tokens[k];
  // A prefill emits one token; a decode at most its query tokens (the
  // accepted drafts and the target's own next token).
  if (emitted < 1 || emitted > (item.is_prefill ? 1 : item.num_query_tokens))
    throw std::logic_error(fmt::format("executor emitted {} tokens for request {} with {} query tokens{}", emitted,
                                       s.request_id, item.num_query_tokens, item.is_prefill ? " (prefill)" : ""));
  emitted = std::min(emitted, s.output_tokens - s.generated);
  // A prefill's KV is complete; a decode keeps the KV of the tokens it
  // emitted: its newest token and the accepted drafts. The bonus token is
  // the next query; the rejected drafts' KV is rolled back by handing back
  // the blocks only they used.
  s.computed += item.is_prefill ? item.num_query_tokens : emitted;
  s.generated += emitted;
  if (!item.is_prefill && item.num_query_tokens > 1 && config_.policy != SchedulerPolicy::Static)
    kv_.shrink_to(s.blocks, s.total());
  listener.on_tokens(s.request_id, emitted);
  const bool eos = !result.finished.empty() && result.finished[k];
  return s.generated >= s.output_tokens || eos;
}

void Scheduler::remove_finished_from_running() {
  auto done = std::remove_if(running_.begin(), running_.end(), [&](int32_t slot) {
    if (!slots_[size_t(slot)].finished) return false;
    free_slot(slot);
    return true;
  });
  running_.erase(done, running_.end());
}

}  // namespace servesim
