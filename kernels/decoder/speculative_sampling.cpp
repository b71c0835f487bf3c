#include "kernels/decoder/speculative_sampling.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/decoder/prompt_tokens.h"

namespace servesim {
namespace {

void check_shapes(std::span<const int32_t> drafts, std::span<const float> target_logits, int64_t vocab) {
  if (vocab < 1 || target_logits.size() != (drafts.size() + 1) * size_t(vocab))
    throw std::logic_error("speculative verification: target logits must be [k' + 1, V]");
}

std::span<const float> row(std::span<const float> logits, size_t j, int64_t vocab) {
  return logits.subspan(j * size_t(vocab), size_t(vocab));
}

// The target's own token at `position` from its logits row: exactly what a
// plain run's sampler draws there.
int32_t target_sample(std::span<const float> logits_row, const SamplingParams& params, int64_t request_id,
                      int64_t position) {
  return sample_token(logits_row, params, request_id, position);
}

}  // namespace

double speculative_uniform(uint64_t seed, int64_t request_id, int64_t position, DrawPurpose purpose) {
  // The purpose is mixed in after (seed, request, position), so every
  // purpose has its own stream and none collides with sample_token's draw
  // mix(mix(seed ^ mix(request)) ^ position).
  const uint64_t base = splitmix64_finalize(splitmix64_finalize(seed ^ splitmix64_finalize(uint64_t(request_id))) ^
                                            uint64_t(position));
  const uint64_t bits = splitmix64_finalize(base ^ splitmix64_finalize(0xC0FFEEULL * uint64_t(purpose)));
  return double(bits >> 11) * 0x1.0p-53;
}

int32_t draw_from(std::span<const double> probabilities, double u) {
  double cumulative = 0;
  int32_t last_nonzero = -1;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    if (probabilities[i] <= 0.0) continue;
    last_nonzero = int32_t(i);
    cumulative += probabilities[i];
    if (u < cumulative) return int32_t(i);
  }
  if (last_nonzero < 0) throw std::logic_error("draw_from: a distribution without mass");
  return last_nonzero;  // u within rounding of the total
}

int32_t propose_draft_token(std::span<const float> draft_logits, const SamplingParams& params, int64_t request_id,
                            int64_t position, std::span<double> q) {
  if (!q.empty()) sampling_distribution(draft_logits, params, q);
  if (params.temperature == 0.0) return sample_token(draft_logits, params, request_id, position);  // argmax
  std::vector<double> own;
  if (q.empty()) {
    own.resize(draft_logits.size());
    sampling_distribution(draft_logits, params, own);
  }
  return draw_from(q.empty() ? std::span<const double>(own) : std::span<const double>(q.data(), q.size()),
                   speculative_uniform(params.seed, request_id, position, DrawPurpose::DraftToken));
}

Verification verify_greedy(std::span<const int32_t> drafts, std::span<const float> target_logits, int64_t vocab) {
  check_shapes(drafts, target_logits, vocab);
  const SamplingParams greedy;  // temperature 0: sample_token is the argmax, ties to the lowest id
  Verification v;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const int32_t best = sample_token(row(target_logits, j, vocab), greedy, 0, 0);
    v.tokens.push_back(best);
    if (j == drafts.size() || drafts[j] != best) break;  // the bonus, or the first mismatch
    ++v.accepted;
  }
  return v;
}

Verification verify_rejection(std::span<const int32_t> drafts, std::span<const double> draft_probs,
                              std::span<const float> target_logits, int64_t vocab, const SamplingParams& params,
                              int64_t request_id, int64_t first_position) {
  check_shapes(drafts, target_logits, vocab);
  if (draft_probs.size() != drafts.size() * size_t(vocab))
    throw std::logic_error("verify_rejection: draft probabilities must be [k', V]");
  Verification v;
  std::vector<double> p(size_t(vocab), 0.0);
  for (size_t j = 0; j < drafts.size(); ++j) {
    const int64_t position = first_position + int64_t(j);
    const std::span<const double> q = draft_probs.subspan(j * size_t(vocab), size_t(vocab));
    sampling_distribution(row(target_logits, j, vocab), params, p);
    const int32_t x = drafts[j];
    // Accept with probability min(1, p(x) / q(x)): u < p / q, written
    // without the division (q(x) > 0 for a draft drawn from q).
    const double u = speculative_uniform(params.seed, request_id, position, DrawPurpose::Accept);
    if (u * q[size_t(x)] < p[size_t(x)]) {
      v.tokens.push_back(x);
      ++v.accepted;
      continue;
    }
    // Rejected: draw from the residual norm(max(0, p - q)). Its mass is
    // positive whenever a rejection is possible (p(x) < q(x) somewhere means
    // p > q elsewhere); the fallback to p only guards against rounding.
    double mass = 0;
    std::vector<double> residual(p.size());
    for (size_t i = 0; i < residual.size(); ++i) mass += residual[i] = std::max(0.0, p[i] - q[i]);
    if (mass > 0) {
      for (double& r : residual) r /= mass;
    } else {
      residual = p;
    }
    v.tokens.push_back(
        draw_from(residual, speculative_uniform(params.seed, request_id, position, DrawPurpose::Residual)));
    return v;
  }
  v.tokens.push_back(target_sample(row(target_logits, drafts.size(), vocab), params, request_id,
                                   first_position + int64_t(drafts.size())));
  return v;
}

Verification verify_controlled(std::span<const int32_t> drafts, std::span<const float> target_logits,
                               int64_t vocab, const SamplingParams& params, double rate, int64_t request_id,
                               int64_t first_position) {
  check_shapes(drafts, target_logits, vocab);
  Verification v;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const int64_t position = first_position + int64_t(j);
    // u < rate: rate 1 accepts every draft, rate 0 none (u is in [0, 1)).
    if (j < drafts.size() &&
        speculative_uniform(params.seed, request_id, position, DrawPurpose::Controlled) < rate) {
      v.tokens.push_back(drafts[j]);
      ++v.accepted;
      continue;
    }
    v.tokens.push_back(target_sample(row(target_logits, j, vocab), params, request_id, position));
    break;
  }
  return v;
}

}  // namespace servesim
