// The engine steps a measured server reported for a bench run (summary.json's
// server_metrics: the change of its vllm:iteration_tokens_total histogram
// and counters, engine/client/server_metrics.h) beside the steps of the
// prediction: how many steps, how many tokens each carried, preemptions.
// Both sides count as vLLM V1 does: a step that emitted tokens, with the
// tokens it emitted and the whole prompts of the requests whose first token
// it emitted (a prefill chunk that emits nothing is not a step there). A
// client's latencies say that a prediction is off; these say whether the
// simulated batching was the server's. Works for any server that exports
// vLLM's histogram (vLLM V1, servesim serve).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/metrics.h"

namespace servesim {

struct ServerStepsComparison {
  double measured_steps = 0, predicted_steps = 0;
  double measured_tokens = 0, predicted_tokens = 0;
  struct Bound {
    double le = 0;                          // tokens (infinity: every step)
    double measured = 0, predicted = 0;     // fraction of steps with at most `le` tokens
  };
  std::vector<Bound> cdf;
  std::optional<double> measured_preemptions;  // where the server counts them
  double predicted_preemptions = 0;
};

// Nullopt where `server_metrics` (summary.json's field) is null or has no
// iteration_tokens. InputError naming `where` and the field when it is
// malformed (counts not finite or negative, buckets not ascending, not
// cumulative up to steps, or not ending at +Inf; counters not an object).
std::optional<ServerStepsComparison> compare_server_steps(const nlohmann::json& server_metrics,
                                                          const RunRecords& predicted, int64_t predicted_preemptions,
                                                          const std::string& where);

// report.json's server_steps: {steps, tokens_per_step_mean, preemptions
// (each {measured, predicted, rel_error}), tokens_per_step_cdf [{le,
// measured, predicted}], meaning}.
nlohmann::json server_steps_json(const ServerStepsComparison& c);
std::string format_server_steps(const ServerStepsComparison& c);

}  // namespace servesim
