// How a real run speculates: which draft model proposes the tokens and how
// acceptance is decided. The draft length k itself is a scheduler setting
// (SchedulerSettings::num_speculative_tokens).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/draft_model.h"
#include "sim/model_spec.h"
#include "sim/scheduler.h"

namespace servesim {

struct SpeculativeSetup {
  // A separate draft model (--draft-model), with safetensors from
  // draft_weights_dir (--draft-weights) or random weights from
  // draft_weights_seed (--draft-weights-seed).
  std::optional<ModelSpec> draft_model;
  std::optional<std::string> draft_weights_dir;
  uint64_t draft_weights_seed = 0;
  // A self-draft (--self-draft-layers): the target's first L layers with its
  // embedding, final norm and head; 0 = none.
  int32_t self_draft_layers = 0;
  // Controlled acceptance (--acceptance-rate): each draft accepted with this
  // probability. Unset: real acceptance (exact at temperature 0, rejection
  // sampling above).
  std::optional<double> acceptance_rate;

  bool has_draft() const { return draft_model.has_value() || self_draft_layers != 0; }
};

// Refuses inconsistent settings for a target `target` and draft length k,
// with an InputError naming the flags: k > 0 without a draft, a draft (or an
// acceptance rate) with k = 0, both kinds of draft, draft weights with a
// self-draft, a vocabulary that differs from the target's, self-draft
// layers outside 1 .. L - 1, an acceptance rate outside [0, 1].
void check_speculative_setup(const SpeculativeSetup& setup, int32_t num_speculative_tokens,
                             const ModelSpec& target);

// The draft as the simulator describes it (sim/draft_model.h: its shape,
// whether it shares the target's weights), nullopt without a draft. Throws
// InputError for a vocabulary that differs from the target's or self-draft
// layers outside 1 .. L - 1.
std::optional<DraftModel> engine_draft_model(const SpeculativeSetup& setup, const ModelSpec& target);
// Its shape alone.
std::optional<ModelSpec> draft_model_spec(const SpeculativeSetup& setup, const ModelSpec& target);

// "exact" (greedy at temperature 0), "rejection_sampling" or "controlled".
std::string acceptance_mode(const SpeculativeSetup& setup, double temperature);

// summary.json's config.speculative, in the simulator's schema
// (sim/simulation.h's speculative_to_json): num_speculative_tokens,
// disable_by_batch_size, the draft (draft_to_json plus "weights": source and
// bytes as built) and "acceptance": {"mode": exact | rejection_sampling |
// controlled}, with "model": "independent", "rate" and
// "expected_tokens_per_step" when controlled.
nlohmann::json speculative_setup_to_json(const SpeculativeSetup& setup, const SchedulerConfig& scheduler,
                                         const ModelSpec& target, double temperature,
                                         const std::string& draft_weights_source, double draft_weight_bytes);

}  // namespace servesim
