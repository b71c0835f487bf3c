#include "sim/draft_model.h"

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/config_json.h"

namespace servesim {

DraftModel make_self_draft(const ModelSpec& target, int32_t layers) {
  if (layers < 1 || layers >= target.num_hidden_layers)
    throw InputError(fmt::format("--self-draft-layers must be in 1 .. {} (the target {} has {} layers; got {})",
                                 target.num_hidden_layers - 1, target.name, target.num_hidden_layers, layers));
  DraftModel d;
  d.spec = target;
  d.spec.num_hidden_layers = layers;
  d.spec.name = fmt::format("{}[:{} layers]", target.name, layers);
  d.shares_target_weights = true;
  d.self_draft_layers = layers;
  return d;
}

DraftModel make_separate_draft(const ModelSpec& target, const ModelSpec& draft) {
  if (draft.vocab_size != target.vocab_size)
    throw InputError(fmt::format("--draft-model {} has a vocabulary of {} tokens, the target {} of {}: a draft must "
                                 "propose the target's token ids",
                                 draft.name, draft.vocab_size, target.name, target.vocab_size));
  DraftModel d;
  d.spec = draft;
  return d;
}

double draft_weight_bytes(const DraftModel& draft) {
  return draft.shares_target_weights ? 0.0 : draft.spec.weight_bytes();
}

void check_speculative_flags(int32_t k, bool has_draft, bool has_acceptance, bool acceptance_needed) {
  if (k > 0 && !has_draft)
    throw InputError(fmt::format("--num-speculative-tokens {} needs a draft: --draft-model M or --self-draft-layers L",
                                 k));
  if (k > 0 && acceptance_needed && !has_acceptance)
    throw InputError(fmt::format("--num-speculative-tokens {} needs an acceptance model: --acceptance-rate A, "
                                 "--acceptance-curve a1,a2,..., --acceptance-beta A:B or --acceptance-hist FILE",
                                 k));
  if (k == 0 && has_draft)
    throw InputError("a draft (--draft-model / --self-draft-layers) needs --num-speculative-tokens >= 1");
  if (k == 0 && has_acceptance)
    throw InputError("the --acceptance-* flags need --num-speculative-tokens >= 1");
}

nlohmann::json draft_to_json(const DraftModel& draft) {
  nlohmann::json j = model_to_json(draft.spec);
  j["shares_target_weights"] = draft.shares_target_weights;
  if (draft.self_draft_layers > 0) j["self_draft_layers"] = draft.self_draft_layers;
  return j;
}

}  // namespace servesim
