// Speculative decoding's acceptance rules, as pure functions of logits and
// seeded uniforms (testable on a vocabulary of a few tokens).
//
// A decode item verifies k' draft tokens x_1 .. x_k' proposed for positions
// c + 1 .. c + k'. The target's forward pass over its k' + 1 query tokens
// (positions c .. c + k') gives k' + 1 logit rows: row j (0-based) predicts
// position c + 1 + j, so rows 0 .. k' - 1 judge the drafts and row k' gives
// the bonus token. Every rule returns the accepted prefix length a and the
// a + 1 tokens emitted: the accepted drafts, then one token of the target's
// (at the first rejection, or the bonus after all k' were accepted).
//
// Every random draw is seeded by (seed, request, position, purpose), like
// sampler.h's, so a sequence's tokens do not depend on its batch, and a
// position's draws are independent of the draws that decided earlier
// positions. The bonus and every "target's own sample" use sample_token
// itself, so a speculative run's plain decodes draw exactly as a plain run.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/decoder/sampler.h"

namespace servesim {

// What a verification decided.
struct Verification {
  int32_t accepted = 0;         // a: drafts accepted, 0 .. k'
  std::vector<int32_t> tokens;  // the a + 1 tokens emitted, in position order
};

// Why a uniform is drawn: each purpose has its own stream at every position.
enum class DrawPurpose : uint64_t {
  DraftToken = 1,  // the draft model sampling its proposal
  Accept = 2,      // rejection sampling's accept test
  Residual = 3,    // rejection sampling's draw from norm(max(0, p - q))
  Controlled = 4,  // controlled acceptance's accept test
};

// A uniform on [0, 1) determined by (seed, request, position, purpose).
double speculative_uniform(uint64_t seed, int64_t request_id, int64_t position, DrawPurpose purpose);

// The index at which `u` (in [0, 1)) falls in the cumulative sum of
// `probabilities` (which sum to ~1); the last non-zero entry if rounding
// leaves u beyond the total.
int32_t draw_from(std::span<const double> probabilities, double u);

// The draft model's proposal for `position` from its logits row [V]: the
// argmax at temperature 0, otherwise a draw from q = sampling_distribution
// (logits, params) with the DraftToken uniform. When `q` is not empty
// ([V]) it receives q, which rejection sampling needs later.
int32_t propose_draft_token(std::span<const float> draft_logits, const SamplingParams& params,
                            int64_t request_id, int64_t position, std::span<double> q);

// Temperature 0: accept x_j while it equals the target's argmax at its
// position; emit the accepted drafts and then the target's argmax at the
// first mismatch (or the bonus argmax). target_logits: [k' + 1, V].
Verification verify_greedy(std::span<const int32_t> drafts, std::span<const float> target_logits, int64_t vocab);

// Temperature > 0: the rejection sampling of Leviathan et al. (2023),
// which leaves the emitted tokens distributed exactly as the target's
// sampling distribution p (after temperature and top-p). Accept x_j with
// probability min(1, p_j(x_j) / q_j(x_j)); at the first rejection emit a
// draw from norm(max(0, p_j - q_j)); after k' acceptances the bonus is
// sample_token of row k'. draft_probs: [k', V], the q_j the drafts were
// drawn from; first_position = c + 1, the position of x_1.
Verification verify_rejection(std::span<const int32_t> drafts, std::span<const double> draft_probs,
                              std::span<const float> target_logits, int64_t vocab, const SamplingParams& params,
                              int64_t request_id, int64_t first_position);

// Controlled acceptance (what-if at a chosen rate): accept each draft with
// probability `rate`, independently, stopping at the first rejection; the
// token emitted there (or the bonus) is the target's own sample_token at
// that position. Draws use params.seed.
Verification verify_controlled(std::span<const int32_t> drafts, std::span<const float> target_logits,
                               int64_t vocab, const SamplingParams& params, double rate, int64_t request_id,
                               int64_t first_position);

}  // namespace servesim
