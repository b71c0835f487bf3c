// The real executor of a speculative run: a target and a draft decoder.
// Each iteration runs the draft passes that sim/draft_passes.h prescribes
// (the simulator costs the same passes), then ONE target forward over the
// plan in which every decode item verifies its k' drafts (all k' + 1 rows
// sampled), then the acceptance rule (speculative_sampling.h).
//
// The draft keeps its own paged KV cache with the target's number of blocks
// and block size, addressed by the target's block tables: the scheduler's
// blocks hold both models' K and V of the same positions. Rollback is free:
// after a step that accepted a drafts the scheduler keeps c + a + 1 target
// tokens and the executor remembers how many draft tokens are valid
// (draft_cached_after); entries past those are overwritten later.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/served_executor.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/prompt_tokens.h"
#include "kernels/decoder/speculative_sampling.h"
#include "sim/executor.h"
#include "sim/speculative_stats.h"

namespace servesim {

struct SpeculativeExecutorOptions {
  DecoderExecutorOptions decoding;  // sampling, prompt seed, honor_eos: as a plain run
  int32_t num_speculative_tokens = 1;  // k, the longest k' a plan may ask for
  // Controlled acceptance at this rate; unset: exact (temperature 0) or
  // rejection sampling (temperature > 0).
  std::optional<double> acceptance_rate;
};

class SpeculativeExecutor final : public ServedExecutor {
 public:
  // Both models must share the vocabulary and have the same KV blocks
  // (number and size); std::invalid_argument otherwise.
  SpeculativeExecutor(std::unique_ptr<DecoderModel> target, std::unique_ptr<DecoderModel> draft,
                      const SpeculativeExecutorOptions& options);

  std::string name() const override;
  void execute(const IterationPlan& plan, IterationResult& result) override;
  void on_request_finished(int64_t request_id) override;
  // A client's prompt, sampling and stop rules (`servesim serve`): the
  // drafts, the verification and the stop rules use the request's own
  // settings, the prompt its ids.
  void set_request_input(int64_t request_id, RequestInput input) override;
  // What speculation did so far.
  const SpeculativeStats* speculative_stats() const override { return &stats_; }

  DecoderModel& target() { return *target_; }
  DecoderModel& draft() { return *draft_; }
  const std::vector<int32_t>* tokens_of(int64_t request_id) const override;
  // Tokens of a live request whose K and V are valid in the draft's cache.
  std::optional<int32_t> draft_cached_of(int64_t request_id) const;
  // Every token a request ever generated, kept after it finishes when asked.
  void keep_outputs(bool keep) { keep_outputs_ = keep; }
  const std::unordered_map<int64_t, std::vector<int32_t>>& outputs() const { return outputs_; }
  // The prompt token at `position` of a request without token identity.
  int32_t prompt_token(int64_t request_id, int64_t position) const {
    return prompt_tokens_.of_request(request_id, position);
  }

 private:
  struct Live {
    std::vector<int32_t> tokens;  // prompt, generated; during an iteration also its drafts
    int32_t draft_cached = 0;     // d: tokens in the draft's cache
  };
  void run_draft_passes(const IterationPlan& plan);
  void build_target_layout(const IterationPlan& plan);  // the verification pass, into layout_
  // Decides item i's acceptance from its logits rows; returns the tokens emitted.
  Verification verify(const ScheduledSequence& item, size_t i, std::span<const float> rows);
  const SamplingParams& sampling_of(const RequestInput* input) const {
    return input ? input->sampling : options_.decoding.sampling;
  }
  // Rejection sampling needs the draft's distribution of plan item i.
  bool keeps_draft_probs(size_t i) const {
    return !options_.acceptance_rate && sampling_of(item_inputs_[i]).temperature > 0;
  }

  std::unique_ptr<DecoderModel> target_, draft_;
  SpeculativeExecutorOptions options_;
  PromptTokens prompt_tokens_;
  SpeculativeStats stats_;
  std::unordered_map<int64_t, Live> live_;
  std::unordered_map<int64_t, RequestInput> inputs_;
  bool keep_outputs_ = false;
  std::unordered_map<int64_t, std::vector<int32_t>> outputs_;

  // Per iteration, reused.
  std::vector<Live*> items_;               // the live state of each plan item
  std::vector<const RequestInput*> item_inputs_;  // each plan item's client input, or nullptr
  std::vector<int32_t> draft_cached_;      // d_i of each plan item
  std::vector<IterationPlan> passes_;      // the draft passes
  std::unordered_map<int64_t, size_t> item_of_;  // request id -> plan index
  // Per plan item, the q rows its drafts were drawn from, [k', V] (only for
  // rejection sampling: 8 k' V bytes per item, ~1 MB for k' = 4 at V = 32000).
  std::vector<std::vector<double>> draft_probs_;
  BatchLayout layout_;
};

}  // namespace servesim
