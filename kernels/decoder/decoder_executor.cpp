#include "kernels/decoder/decoder_executor.h"

#include <algorithm>
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

void DecoderExecutor::set_request_input(int64_t request_id, RequestInput input) {
  check_request_input(input, model_->spec().vocab_size, "DecoderExecutor");
  inputs_[request_id] = std::move(input);
}

double DecoderExecutor::uniform_of(const ScheduledSequence& item, const RequestInput* input) const {
  const int64_t position = int64_t(item.num_cached_tokens) + item.num_query_tokens;
  return sampling_uniform(sampling_of(input), draw_request_id(input, item.request_id), position);
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
    if (const auto in = inputs_.find(item.request_id); in != inputs_.end())
      extend_with_prompt(in->second, item.request_id, end, tokens);
    else
      prompt_tokens_.fill(item, tokens, end);
    layout_.add_sequence(std::span<const int32_t>(tokens).subspan(size_t(item.num_cached_tokens),
                                                                   size_t(item.num_query_tokens)),
                         item.num_cached_tokens, item.block_table, item.samples);
  }
  // The tokens of the sampling rows: chosen on the device where the decoder
  // can (every row with the same temperature and top-p), else sampled here
  // from the logits, each row with its request's settings.
  uniforms_.clear();
  row_inputs_.clear();
  bool same_settings = true;
  for (const ScheduledSequence& item : plan.sequences) {
    if (!item.samples) continue;
    const auto in = inputs_.find(item.request_id);
    const RequestInput* input = in == inputs_.end() ? nullptr : &in->second;
    row_inputs_.push_back(input);
    uniforms_.push_back(uniform_of(item, input));
    const SamplingParams& first = sampling_of(row_inputs_.front()), &mine = sampling_of(input);
    same_settings = same_settings && first.temperature == mine.temperature && first.top_p == mine.top_p;
  }
  const SamplingParams& batch_sampling = row_inputs_.empty() ? options_.sampling : sampling_of(row_inputs_.front());
  if (!same_settings || !model_->forward_select(layout_, batch_sampling, uniforms_, chosen_)) {
    const std::vector<float>& logits = model_->forward(layout_);
    const int64_t vocab = model_->spec().vocab_size;
    chosen_.clear();
    for (const ScheduledSequence& item : plan.sequences) {
      if (!item.samples) continue;
      const size_t row = chosen_.size();
      const RequestInput* input = row_inputs_[row];
      SamplingParams params = sampling_of(input);
      // sample_token draws sampling_uniform(params, request, position), as uniform_of.
      chosen_.push_back(sample_token(std::span<const float>(logits).subspan(row * size_t(vocab), size_t(vocab)),
                                     params, draw_request_id(input, item.request_id),
                                     int64_t(item.num_cached_tokens) + item.num_query_tokens));
    }
  }

  const bool may_stop = options_.honor_eos || !inputs_.empty();
  if (may_stop) result.finished.assign(plan.sequences.size(), 0);
  size_t row = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& item = plan.sequences[i];
    if (!item.samples) continue;
    const RequestInput* input = row_inputs_[row];
    const int32_t token = chosen_[row++];
    std::vector<int32_t>& tokens = tokens_[item.request_id];
    tokens.push_back(token);
    prompt_tokens_.record_output(item, token);
    if (keep_outputs_) outputs_[item.request_id].push_back(token);
    const size_t generated = input ? tokens.size() - input->prompt.size() : 0;  // stops() reads it for inputs only
    if (may_stop && request_stops(input, options_.honor_eos, model_->spec().eos_token_id, token, generated))
      result.finished[i] = 1;
  }
  result.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace servesim
