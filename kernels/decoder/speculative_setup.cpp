#include "kernels/decoder/speculative_setup.h"

#include <cmath>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

void check_speculative_setup(const SpeculativeSetup& s, int32_t k, const ModelSpec& target) {
  if (s.draft_model && s.self_draft_layers != 0)
    throw InputError("--draft-model and --self-draft-layers: give one draft, not both");
  if (s.draft_weights_dir && !s.draft_model)
    throw InputError("--draft-weights: needs --draft-model (a self-draft uses the target's own weights)");
  if (s.acceptance_rate && !(*s.acceptance_rate >= 0.0 && *s.acceptance_rate <= 1.0))
    throw InputError(fmt::format("--acceptance-rate must be in [0, 1] (got {})", *s.acceptance_rate));
  if (k <= 0 && s.acceptance_rate && !s.has_draft())
    throw InputError("--acceptance-rate: controlled acceptance needs --num-speculative-tokens >= 1 and a draft "
                     "(--draft-model or --self-draft-layers)");
  // A real run decides acceptance itself: it needs a draft, no acceptance model.
  if (k > 0 && !s.has_draft())
    throw InputError(fmt::format("--num-speculative-tokens {} needs a draft: --draft-model M or --self-draft-layers L",
                                 k));
  // Unlike simulate (whose sweeps may pass draft flags at k = 0), a run
  // would build a draft it never uses.
  if (k <= 0 && s.has_draft())
    throw InputError(fmt::format("{}: a draft needs --num-speculative-tokens >= 1 (got {})",
                                 s.draft_model ? "--draft-model" : "--self-draft-layers", k));
  if (s.draft_model) s.draft_model->validate(s.draft_model->name);
  engine_draft_model(s, target);  // the vocabulary and the self-draft's layers
  // A draft shorter than the target's context still works (rotary positions
  // extrapolate); past its length it only proposes worse tokens, which
  // costs acceptance, never correctness.
}

std::optional<DraftModel> engine_draft_model(const SpeculativeSetup& s, const ModelSpec& target) {
  if (s.draft_model) return make_separate_draft(target, *s.draft_model);
  if (s.self_draft_layers != 0) return make_self_draft(target, s.self_draft_layers);
  return std::nullopt;
}

std::optional<ModelSpec> draft_model_spec(const SpeculativeSetup& s, const ModelSpec& target) {
  const std::optional<DraftModel> d = engine_draft_model(s, target);
  if (!d) return std::nullopt;
  return d->spec;
}

std::string acceptance_mode(const SpeculativeSetup& s, double temperature) {
  if (s.acceptance_rate) return "controlled";
  return temperature == 0.0 ? "exact" : "rejection_sampling";
}

nlohmann::json speculative_setup_to_json(const SpeculativeSetup& s, const SchedulerConfig& c, const ModelSpec& target,
                                         double temperature, const std::string& draft_weights_source,
                                         double draft_weight_bytes) {
  nlohmann::json j = {{"num_speculative_tokens", c.num_speculative_tokens},
                      {"disable_by_batch_size", c.speculative_disable_by_batch_size}};
  if (const std::optional<DraftModel> draft = engine_draft_model(s, target)) {
    j["draft"] = draft_to_json(*draft);
    j["draft"]["weights"] = {{"source", draft_weights_source}, {"bytes", draft_weight_bytes}};
  }
  j["acceptance"] = {{"mode", acceptance_mode(s, temperature)}};
  if (s.acceptance_rate) {
    // The simulator's independent model at the same rate predicts the same
    // tokens per step: (1 - a^(k+1)) / (1 - a), k + 1 at a = 1.
    const double a = *s.acceptance_rate;
    const int32_t k = c.num_speculative_tokens;
    j["acceptance"]["model"] = "independent";
    j["acceptance"]["rate"] = a;
    j["acceptance"]["expected_tokens_per_step"] = a < 1.0 ? (1.0 - std::pow(a, k + 1)) / (1.0 - a) : double(k + 1);
  }
  return j;
}

}  // namespace servesim
