#include "kernels/decoder/decoder_executor.h"

#include <chrono>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/decoder/prompt_tokens.h"

namespace servesim {

DecoderExecutor::DecoderExecutor(std::unique_ptr<DecoderModel> model, const DecoderExecutorOptions& options)
    : model_(std::move(model)), options_(options), prompt_tokens_(options.prompt_seed, model_->spec().vocab_size) {
  options_.sampling.validate();
}

const std::vector<int32_t>* DecoderExecutor::tokens_of(int64_t request_id) const {
  auto it = tokens_.find(request_id);
  return it == tokens_.end() ? nullptr : &it->second;
}

void DecoderExecutor::execute(const IterationPlan& plan, IterationResult& result) {
  const auto start = std::chrono::steady_clock::now();
  layout_.clear();
  for (const ScheduledSequence& item : plan.sequences) {
    // A block past the cache would write another's memory: refuse it.
    for (int32_t block : item.block_table)
      if (block < 0 || block >= model_->kv_num_blocks())
        throw std::logic_error(fmt::format("DecoderExecutor: request {} names KV block {}, the cache holds {}",
                                           item.request_id, block, model_->kv_num_blocks()));
    std::vector<int32_t>& tokens = tokens_[item.request_id];
    const int64_t end = int64_t(item.num_cached_tokens) + item.num_query_tokens;
    // Positions not seen before are prompt positions: the scheduler only
    // asks for a generated token's position after we have sampled it.
    prompt_tokens_.fill(item, tokens, end);
    layout_.add_sequence(std::span<const int32_t>(tokens).subspan(size_t(item.num_cached_tokens),
                                                                   size_t(item.num_query_tokens)),
                         item.num_cached_tokens, item.block_table, item.samples);
  }
  // The tokens of the sampling rows: chosen on the device where the decoder
  // can, else sampled here from the logits.
  uniforms_.clear();
  for (const ScheduledSequence& item : plan.sequences)
    if (item.samples)
      uniforms_.push_back(sampling_uniform(options_.sampling, item.request_id,
                                           int64_t(item.num_cached_tokens) + item.num_query_tokens));
  if (!model_->forward_select(layout_, options_.sampling, uniforms_, chosen_)) {
    const std::vector<float>& logits = model_->forward(layout_);
    const int64_t vocab = model_->spec().vocab_size;
    chosen_.clear();
    for (const ScheduledSequence& item : plan.sequences) {
      if (!item.samples) continue;
      const size_t row = chosen_.size();
      chosen_.push_back(sample_token(std::span<const float>(logits).subspan(row * size_t(vocab), size_t(vocab)),
                                     options_.sampling, item.request_id,
                                     int64_t(item.num_cached_tokens) + item.num_query_tokens));
    }
  }

  if (options_.honor_eos) result.finished.assign(plan.sequences.size(), 0);
  size_t row = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& item = plan.sequences[i];
    if (!item.samples) continue;
    const int32_t token = chosen_[row++];
    tokens_[item.request_id].push_back(token);
    prompt_tokens_.record_output(item, token);
    if (keep_outputs_) outputs_[item.request_id].push_back(token);
    if (options_.honor_eos && token == model_->spec().eos_token_id) result.finished[i] = 1;
  }
  result.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace servesim
