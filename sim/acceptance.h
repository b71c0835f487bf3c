// Acceptance models of speculative decoding: how many of the k' draft tokens
// a verification accepts. A step accepts the longest prefix of drafts that
// pass; it then emits accepted + 1 tokens (the target's own next token).
//
//   independent (--acceptance-rate A): every draft is accepted with
//     probability A, independently: P(accepted >= j) = A^j, so the expected
//     tokens per step is (1 - A^(k+1)) / (1 - A) (Leviathan et al. 2023, eq. 1).
//   curve (--acceptance-curve a1,a2,...): draft j is accepted with
//     probability a_j given drafts 1..j-1 were: P(accepted >= j) = a_1 ... a_j.
//     The curve must cover k positions.
//   beta (--acceptance-beta A:B): each request draws its own rate from
//     Beta(A, B) (mean A / (A + B)) when first seen, then accepts
//     independently at that rate: acceptance varies by prompt.
//   histogram (--acceptance-hist FILE): the accepted-length histogram a real
//     run measured (summary.json's speculative.accepted_length_histogram, or
//     a CSV "accepted,count"), turned into its curve
//       a_j = P(accepted >= j) / P(accepted >= j - 1),
//     so a step that proposes fewer drafts than the histogram's k is cut the
//     same way a real one is. The run's k may not exceed the histogram's.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/random.h"

namespace servesim {

enum class AcceptanceKind { Independent, Curve, Beta, Histogram };

class AcceptanceModel {
 public:
  // Each throws InputError naming its flag on a bad value.
  static AcceptanceModel independent(double rate);
  static AcceptanceModel curve(std::vector<double> conditional_rates);
  static AcceptanceModel beta(double a, double b);
  // counts[a] = steps that accepted a drafts out of k = counts.size() - 1.
  static AcceptanceModel histogram(const std::vector<int64_t>& counts, const std::string& source);
  static AcceptanceModel load_histogram(const std::string& path);
  // "0.8" / "0.9,0.8,0.7" / "2:1" as the flags take them.
  static AcceptanceModel parse_curve(const std::string& text);
  static AcceptanceModel parse_beta(const std::string& text);

  AcceptanceKind kind() const { return kind_; }
  // Throws InputError when the model does not cover k drafts (a curve or a
  // histogram shorter than k).
  void require_covers(int32_t k) const;
  // P(draft j accepted | drafts 1..j-1 accepted) for j = 1..k; for beta, the
  // population average P(accepted >= j) / P(accepted >= j - 1) with
  // E[alpha^j] = prod_{i<j} (A + i) / (A + B + i).
  std::vector<double> conditional_rates(int32_t k) const;
  // Expected tokens a step with k drafts emits: 1 + sum_j P(accepted >= j).
  double expected_tokens_per_step(int32_t k) const;

  // Accepted drafts (0..proposed) of one step of `request_id`; draws from
  // `rng` (and, for beta, a per-request rate seeded by (seed, request_id)).
  int32_t sample(int64_t request_id, int32_t proposed, Rng& rng);
  // Drops per-request state (beta's rate) of a finished request.
  void forget(int64_t request_id) { request_rates_.erase(request_id); }
  void set_seed(uint64_t seed) { seed_ = seed; }

  nlohmann::json to_json() const;

 private:
  AcceptanceKind kind_ = AcceptanceKind::Independent;
  double rate_ = 0;              // independent
  std::vector<double> curve_;    // curve, histogram: conditional rates a_1..a_K
  double beta_a_ = 0, beta_b_ = 0;
  std::vector<int64_t> counts_;  // histogram, as given
  std::string source_;
  uint64_t seed_ = 0;
  std::unordered_map<int64_t, double> request_rates_;
};

}  // namespace servesim
