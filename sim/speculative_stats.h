// What speculative decoding did in a run, simulated or real: how many draft
// tokens each verification proposed and how many the target accepted.
// Filled by the executor that decides acceptance (the simulator's
// SpeculativeCostModel, the real engine's speculative executor); written to
// summary.json's "speculative" and to speculative_requests.csv.
//
// Conventions (as vLLM's spec-decode metrics):
//   a step is one speculative decode item: a sequence that proposed k' >= 1
//     draft tokens and verified them in one target pass;
//   accepted a in 0..k' is the length of the accepted prefix; the step emits
//     a + 1 tokens (the target's own next token -- the bonus -- included);
//   position j (1-based) is attempted when j <= k' and drafts 1..j-1 were all
//     accepted; acceptance_rate_per_position[j-1] = accepts / attempts, the
//     estimate of P(accept j | 1..j-1 accepted);
//   accepted_length_histogram[a] counts the steps with k' = k (the run's full
//     draft length) that accepted a drafts: steps cut short near a request's
//     end would bias it, the per-position rates are not biased by them.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace servesim {

struct SpeculativeRequestStats {
  int64_t steps = 0;     // verifications with k' >= 1
  int64_t proposed = 0;  // draft tokens proposed, sum of k'
  int64_t accepted = 0;  // draft tokens accepted, sum of a
};

class SpeculativeStats {
 public:
  // k: the run's --num-speculative-tokens (>= 1).
  explicit SpeculativeStats(int32_t num_speculative_tokens);

  int32_t num_speculative_tokens() const { return k_; }
  // One verification of `proposed` (1..k) drafts of which the first
  // `accepted` (0..proposed) were accepted. Throws std::logic_error outside
  // those ranges.
  void record_step(int64_t request_id, int32_t proposed, int32_t accepted);
  // A decode item of a speculative run that proposed nothing (disabled by
  // batch size, or one token left to emit).
  void record_plain_decode() { ++plain_decodes_; }
  // Seconds spent in draft passes (measured or predicted), for the report.
  void add_draft_seconds(double s) { draft_seconds_ += s; }
  // Adds another run's statistics of the same k (another replica's: its
  // requests are others). std::logic_error for another k.
  void merge(const SpeculativeStats& other);

  int64_t steps() const { return steps_; }
  int64_t proposed_tokens() const { return proposed_; }  // sum of k' over every step
  int64_t accepted_tokens() const { return accepted_; }  // sum of a over every step
  int64_t plain_decodes() const { return plain_decodes_; }
  double draft_seconds() const { return draft_seconds_; }
  const std::vector<int64_t>& attempts_per_position() const { return attempts_; }
  const std::vector<int64_t>& accepts_per_position() const { return accepts_; }
  const std::vector<int64_t>& accepted_length_histogram() const { return histogram_; }
  const std::unordered_map<int64_t, SpeculativeRequestStats>& per_request() const { return per_request_; }

  // Tokens emitted per step, bonus included: (sum of (a + 1)) / steps; 0
  // without steps.
  double mean_accepted_tokens_per_step() const;
  // Draft tokens accepted / proposed over every step.
  double draft_acceptance_rate() const;
  // accepts / attempts per position (NaN-free: 0 where never attempted).
  std::vector<double> acceptance_rate_per_position() const;

  // summary.json's "speculative" object: num_speculative_tokens, steps,
  // plain_decodes, mean_accepted_tokens_per_step, draft_acceptance_rate,
  // acceptance_rate_per_position, attempts_per_position,
  // accepts_per_position, accepted_length_histogram, draft_seconds.
  nlohmann::json to_json() const;
  // One row per request that took a step: request_id, steps, proposed,
  // accepted, acceptance_rate, tokens_per_step. Throws InputError if the
  // file cannot be written.
  void write_requests_csv(const std::string& path) const;

 private:
  int32_t k_;
  int64_t steps_ = 0, emitted_ = 0, proposed_ = 0, accepted_ = 0, plain_decodes_ = 0;
  double draft_seconds_ = 0;
  std::vector<int64_t> attempts_, accepts_, histogram_;
  std::unordered_map<int64_t, SpeculativeRequestStats> per_request_;
};

}  // namespace servesim
