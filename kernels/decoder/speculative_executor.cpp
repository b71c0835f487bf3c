#include "kernels/decoder/speculative_executor.h"

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/decoder/prompt_tokens.h"
#include "sim/draft_passes.h"

namespace servesim {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

SpeculativeExecutor::SpeculativeExecutor(std::unique_ptr<DecoderModel> target, std::unique_ptr<DecoderModel> draft,
                                         const SpeculativeExecutorOptions& options)
    : target_(std::move(target)),
      draft_(std::move(draft)),
      options_(options),
      prompt_tokens_(options.decoding.prompt_seed, target_->spec().vocab_size),
      stats_(options.num_speculative_tokens) {
  options_.decoding.sampling.validate();
  if (target_->spec().vocab_size != draft_->spec().vocab_size)
    throw std::invalid_argument(fmt::format("SpeculativeExecutor: draft {} has vocab_size {}, target {} has {}",
                                            draft_->spec().name, draft_->spec().vocab_size,
                                            target_->spec().name, target_->spec().vocab_size));
  // The draft's cache is addressed by the target's block ids.
  if (target_->kv_num_blocks() != draft_->kv_num_blocks() || target_->kv_block_size() != draft_->kv_block_size())
    throw std::invalid_argument("SpeculativeExecutor: the draft's KV cache must have the target's blocks");
  if (options_.acceptance_rate && !(*options_.acceptance_rate >= 0 && *options_.acceptance_rate <= 1))
    throw std::invalid_argument("SpeculativeExecutor: acceptance rate outside [0, 1]");
}

std::string SpeculativeExecutor::name() const {
  return fmt::format("speculative decoder on {} (draft {})", target_->device(), draft_->spec().name);
}

const std::vector<int32_t>* SpeculativeExecutor::tokens_of(int64_t request_id) const {
  auto it = live_.find(request_id);
  return it == live_.end() ? nullptr : &it->second.tokens;
}

std::optional<int32_t> SpeculativeExecutor::draft_cached_of(int64_t request_id) const {
  auto it = live_.find(request_id);
  if (it == live_.end()) return std::nullopt;
  return it->second.draft_cached;
}

void SpeculativeExecutor::on_request_finished(int64_t request_id) {
  live_.erase(request_id);
  inputs_.erase(request_id);
}

void SpeculativeExecutor::set_request_input(int64_t request_id, RequestInput input) {
  check_request_input(input, target_->spec().vocab_size, "SpeculativeExecutor");
  inputs_[request_id] = std::move(input);
}

void SpeculativeExecutor::run_draft_passes(const IterationPlan& plan) {
  plan_draft_passes(plan, draft_cached_, passes_);
  const int64_t V = target_->spec().vocab_size;
  draft_probs_.resize(plan.sequences.size());
  for (size_t i = 0; i < plan.sequences.size(); ++i)
    draft_probs_[i].resize(keeps_draft_probs(i) ? size_t(proposed_drafts(plan.sequences[i])) * size_t(V) : 0);

  for (size_t p = 0; p < passes_.size(); ++p) {
    layout_.clear();
    for (const ScheduledSequence& s : passes_[p].sequences) {
      const Live& live = *items_[item_of_.at(s.request_id)];
      layout_.add_sequence(std::span<const int32_t>(live.tokens).subspan(size_t(s.num_cached_tokens),
                                                                          size_t(s.num_query_tokens)),
                           s.num_cached_tokens, s.block_table, s.samples);
    }
    const std::vector<float>& logits = draft_->forward(layout_);  // [sampling items of pass p, V]
    size_t row = 0;
    for (const ScheduledSequence& s : passes_[p].sequences) {
      if (!s.samples) continue;
      const size_t i = item_of_.at(s.request_id);
      Live& live = *items_[i];
      // Pass p's sampled row sits at position c + p and proposes draft p + 1
      // for position c + p + 1.
      const int64_t position = int64_t(plan.sequences[i].num_cached_tokens) + int64_t(p) + 1;
      if (int64_t(live.tokens.size()) != position)
        throw std::logic_error(fmt::format("SpeculativeExecutor: request {} proposes position {} holding {} tokens",
                                           s.request_id, position, live.tokens.size()));
      std::span<double> q;
      if (keeps_draft_probs(i)) q = std::span<double>(draft_probs_[i]).subspan(p * size_t(V), size_t(V));
      const RequestInput* input = item_inputs_[i];
      live.tokens.push_back(propose_draft_token(std::span<const float>(logits).subspan(row * size_t(V), size_t(V)),
                                                sampling_of(input), draw_request_id(input, s.request_id), position,
                                                q));
      ++row;
    }
  }
}

void SpeculativeExecutor::build_target_layout(const IterationPlan& plan) {
  layout_.clear();
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& item = plan.sequences[i];
    const std::span<const int32_t> ids = std::span<const int32_t>(items_[i]->tokens)
                                             .subspan(size_t(item.num_cached_tokens), size_t(item.num_query_tokens));
    // A decode item wants every row: row j judges draft j + 1, the last
    // gives the bonus.
    const int32_t samples = item.is_prefill ? (item.samples ? 1 : 0) : item.num_query_tokens;
    layout_.add_sequence_sampling_last(ids, item.num_cached_tokens, item.block_table, samples);
  }
}

Verification SpeculativeExecutor::verify(const ScheduledSequence& item, size_t i, std::span<const float> rows) {
  const int64_t V = target_->spec().vocab_size;
  const int32_t c = item.num_cached_tokens;
  const std::span<const int32_t> drafts =
      std::span<const int32_t>(items_[i]->tokens).subspan(size_t(c) + 1, size_t(proposed_drafts(item)));
  const RequestInput* input = item_inputs_[i];
  const SamplingParams& params = sampling_of(input);
  const int64_t request = draw_request_id(input, item.request_id);
  if (options_.acceptance_rate)
    return verify_controlled(drafts, rows, V, params, *options_.acceptance_rate, request, c + 1);
  if (params.temperature == 0.0) return verify_greedy(drafts, rows, V);
  return verify_rejection(drafts, draft_probs_[i], rows, V, params, request, c + 1);
}

void SpeculativeExecutor::execute(const IterationPlan& plan, IterationResult& result) {
  const auto start = Clock::now();
  const size_t n = plan.sequences.size();
  items_.assign(n, nullptr);
  item_inputs_.assign(n, nullptr);
  draft_cached_.assign(n, 0);
  item_of_.clear();
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& item = plan.sequences[i];
    Live& live = live_[item.request_id];
    items_[i] = &live;  // unordered_map nodes stay put as others are added
    item_of_[item.request_id] = i;
    const auto in = inputs_.find(item.request_id);
    if (in != inputs_.end()) item_inputs_[i] = &in->second;
    if (item.is_prefill) {
      // Positions not seen before are prompt positions: the scheduler only
      // asks for a generated token's position after it was emitted.
      const int64_t end = int64_t(item.num_cached_tokens) + item.num_query_tokens;
      if (in != inputs_.end()) extend_with_prompt(in->second, item.request_id, end, live.tokens);
      else prompt_tokens_.fill(item, live.tokens, end);
      draft_cached_[i] = item.num_cached_tokens;  // the draft prefills the same chunk
      continue;
    }
    const int32_t k = proposed_drafts(item);
    if (k < 0 || k > options_.num_speculative_tokens)
      throw std::logic_error(fmt::format("SpeculativeExecutor: request {} asks to verify {} drafts (k = {})",
                                         item.request_id, k, options_.num_speculative_tokens));
    // A decode's newest token (position c) is the last one emitted.
    if (live.tokens.size() != size_t(item.num_cached_tokens) + 1)
      throw std::logic_error(fmt::format("SpeculativeExecutor: request {} decodes with {} cached tokens but "
                                         "holds {} tokens", item.request_id, item.num_cached_tokens,
                                         live.tokens.size()));
    draft_cached_[i] = live.draft_cached;
  }

  const auto draft_start = Clock::now();
  run_draft_passes(plan);
  stats_.add_draft_seconds(seconds_since(draft_start));
  build_target_layout(plan);
  const std::vector<float>& logits = target_->forward(layout_);  // [sampled rows, V]

  const int64_t V = target_->spec().vocab_size;
  const bool honor_eos = options_.decoding.honor_eos;
  const bool may_stop = honor_eos || !inputs_.empty();
  result.emitted_tokens.assign(n, 0);
  if (may_stop) result.finished.assign(n, 0);
  size_t row = 0;
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& item = plan.sequences[i];
    Live& live = *items_[i];
    const int32_t c = item.num_cached_tokens;
    Verification v;
    if (item.is_prefill) {
      live.draft_cached = c + item.num_query_tokens;
      if (!item.samples) continue;
      const int64_t position = int64_t(c) + item.num_query_tokens;
      v.tokens.push_back(sample_token(std::span<const float>(logits).subspan(row * size_t(V), size_t(V)),
                                      sampling_of(item_inputs_[i]), draw_request_id(item_inputs_[i], item.request_id),
                                      position));
      ++row;
    } else {
      const int32_t k = proposed_drafts(item);
      v = verify(item, i, std::span<const float>(logits).subspan(row * size_t(V), size_t(k + 1) * size_t(V)));
      row += size_t(k) + 1;
      live.tokens.resize(size_t(c) + 1);  // drop the drafts: the emitted tokens follow
      live.draft_cached = draft_cached_after(item, v.accepted);
      if (k >= 1) stats_.record_step(item.request_id, k, v.accepted);
      else stats_.record_plain_decode();
    }
    // A request ends at its first stop (EOS with --honor-eos, or its
    // client's stop rules), even mid-step: the tokens after it are dropped.
    const RequestInput* input = item_inputs_[i];
    for (const int32_t token : v.tokens) {
      live.tokens.push_back(token);
      prompt_tokens_.record_output(item, token);
      if (keep_outputs_) outputs_[item.request_id].push_back(token);
      ++result.emitted_tokens[i];
      const size_t generated = input ? live.tokens.size() - input->prompt.size() : 0;  // read for inputs only
      if (may_stop && request_stops(input, honor_eos, target_->spec().eos_token_id, token, generated)) {
        result.finished[i] = 1;
        break;
      }
    }
  }
  result.duration_s = seconds_since(start);
}

}  // namespace servesim
