// The draft model of a speculative run, as the simulator sees it: its shape
// (for its cost and its KV cache) and whether it owns weights.
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "sim/acceptance.h"
#include "sim/model_spec.h"

namespace servesim {

struct DraftModel {
  ModelSpec spec;
  // A self-draft runs the target's first layers with its embedding and LM
  // head: no weights of its own. Its KV cache is its own (the engine keeps
  // one per model), so it is counted either way.
  bool shares_target_weights = false;
  int32_t self_draft_layers = 0;  // > 0 for a self-draft
};

// The target's first `layers` layers (1 .. layers - 1 of the target), named
// "<target>[:<layers> layers]". Throws InputError naming --self-draft-layers.
DraftModel make_self_draft(const ModelSpec& target, int32_t layers);
// A separate model; throws InputError naming --draft-model when its
// vocabulary differs from the target's (drafts are target token ids).
DraftModel make_separate_draft(const ModelSpec& target, const ModelSpec& draft);

// Weight bytes the draft adds to the device (0 for a self-draft).
double draft_weight_bytes(const DraftModel& draft);

// The speculative settings together, checked: k > 0 needs a draft and an
// acceptance model (simulator) -- and neither may be given with k = 0.
// Throws InputError naming the flags.
void check_speculative_flags(int32_t k, bool has_draft, bool has_acceptance, bool acceptance_needed);

nlohmann::json draft_to_json(const DraftModel& draft);

}  // namespace servesim
