// How far a decoder at a lower precision strays from a reference one (the
// same weights in fp32): both are fed the reference's own greedy
// continuation of a prompt (teacher forcing, so that one disagreement does
// not derail the steps after it), and each step's logits are compared.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/decoder/decoder_model.h"

namespace servesim {

struct PrecisionAgreement {
  double max_rel_diff = 0;  // max over steps of max |logit - reference logit| / max |reference logit|
  double greedy_agree = 0;  // share of steps whose greedy token is the reference's
  int steps = 0;
};

// Runs `steps` steps of one sequence starting with `prompt` through both
// decoders, in blocks 0 .. ceil((prompt + steps) / block size) - 1 of each
// (their caches must hold them).
PrecisionAgreement precision_agreement(DecoderModel& reference, DecoderModel& other, std::span<const int32_t> prompt,
                                       int steps);

}  // namespace servesim
