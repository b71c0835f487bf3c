// The real executor: serves each IterationPlan with a built-in decoder and
// reports the wall time it took. It keeps every live request's tokens
// (prompt ids from its token identity or a seed, then the sampled ones) and
// nothing else: which sequences run, and with which KV blocks -- prefix-cache
// hits included, whose KV an earlier request wrote -- is the scheduler's choice.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/prompt_tokens.h"
#include "kernels/decoder/sampler.h"
#include "kernels/decoder/served_executor.h"

namespace servesim {

struct DecoderExecutorOptions {
  SamplingParams sampling;
  uint64_t prompt_seed = 0;  // prompt token ids are a hash of (seed, source or request, position)
  bool honor_eos = false;    // stop a request at the model's eos_token_id
};

class DecoderExecutor final : public ServedExecutor {
 public:
  DecoderExecutor(std::unique_ptr<DecoderModel> model, const DecoderExecutorOptions& options);

  std::string name() const override { return "decoder on " + model_->device(); }
  void execute(const IterationPlan& plan, IterationResult& result) override;
  void on_request_finished(int64_t request_id) override {
    tokens_.erase(request_id);
    inputs_.erase(request_id);
  }
  void set_request_input(int64_t request_id, RequestInput input) override;

  DecoderModel& model() { return *model_; }
  const std::vector<int32_t>* tokens_of(int64_t request_id) const override;
  // Every token a request ever generated, kept after it finishes when asked.
  void keep_outputs(bool keep) { keep_outputs_ = keep; }
  const std::unordered_map<int64_t, std::vector<int32_t>>& outputs() const { return outputs_; }
  // The prompt token at `position` of a request without token identity.
  int32_t prompt_token(int64_t request_id, int64_t position) const {
    return prompt_tokens_.of_request(request_id, position);
  }

 private:
  std::unique_ptr<DecoderModel> model_;
  DecoderExecutorOptions options_;
  PromptTokens prompt_tokens_;
  std::unordered_map<int64_t, std::vector<int32_t>> tokens_;
  std::unordered_map<int64_t, RequestInput> inputs_;
  bool keep_outputs_ = false;
  std::unordered_map<int64_t, std::vector<int32_t>> outputs_;
  BatchLayout layout_;
  std::vector<double> uniforms_;  // [S] each sampling row's draw
  std::vector<int32_t> chosen_;   // [S] each sampling row's token
  std::vector<const RequestInput*> row_inputs_;  // [S] each sampling row's client input, or nullptr

  const SamplingParams& sampling_of(const RequestInput* input) const {
    return input ? input->sampling : options_.sampling;
  }
  double uniform_of(const ScheduledSequence& item, const RequestInput* input) const;
};

}  // namespace servesim
