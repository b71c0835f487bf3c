#include "kernels/decoder/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/random.h"

namespace servesim {
namespace {

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

void SamplingParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw InputError(fmt::format("--temperature must be >= 0 (got {})", temperature));
  if (!(top_p > 0 && top_p <= 1))
    throw InputError(fmt::format("--top-p must be in (0, 1] (got {})", top_p));
}

void sampling_distribution(std::span<const float> logits, const SamplingParams& p,
                           std::span<double> probs) {
  std::fill(probs.begin(), probs.end(), 0.0);
  if (p.temperature == 0.0) {
    probs[size_t(argmax(logits))] = 1.0;
    return;
  }
  const double m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += probs[i] = std::exp((logits[i] - m) / p.temperature);
  for (double& x : probs) x /= sum;
  if (p.top_p >= 1.0) return;
  // Nucleus: the most probable tokens until their mass reaches top_p.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return probs[size_t(a)] > probs[size_t(b)]; });
  double mass = 0;
  size_t keep = 0;
  while (keep < order.size() && mass < p.top_p) mass += probs[size_t(order[keep++])];
  for (size_t k = keep; k < order.size(); ++k) probs[size_t(order[k])] = 0.0;
  for (size_t k = 0; k < keep; ++k) probs[size_t(order[k])] /= mass;
}

double sampling_uniform(const SamplingParams& p, int64_t request_id, int64_t position) {
  const uint64_t bits =
      splitmix64_finalize(splitmix64_finalize(p.seed ^ splitmix64_finalize(uint64_t(request_id))) ^ uint64_t(position));
  return double(bits >> 11) * 0x1.0p-53;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, int64_t request_id,
                     int64_t position) {
  if (p.temperature == 0.0) return argmax(logits);
  std::vector<double> probs(logits.size());
  sampling_distribution(logits, p, probs);
  const double u = sampling_uniform(p, request_id, position);
  double cumulative = 0;
  int32_t last_nonzero = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) continue;
    last_nonzero = int32_t(i);
    cumulative += probs[i];
    if (u < cumulative) return int32_t(i);
  }
  return last_nonzero;  // u within rounding of 1
}

}  // namespace servesim
