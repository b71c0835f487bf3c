#include "sim/speculative_stats.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

SpeculativeStats::SpeculativeStats(int32_t k)
    : k_(k), attempts_(size_t(std::max(k, 0)), 0), accepts_(size_t(std::max(k, 0)), 0),
      histogram_(size_t(std::max(k, 0)) + 1, 0) {
  if (k < 1) throw std::logic_error(fmt::format("SpeculativeStats: k must be >= 1 (got {})", k));
}

void SpeculativeStats::record_step(int64_t request_id, int32_t proposed, int32_t accepted) {
  if (proposed < 1 || proposed > k_ || accepted < 0 || accepted > proposed)
    throw std::logic_error(fmt::format("SpeculativeStats: step with {} proposed, {} accepted (k = {})", proposed,
                                       accepted, k_));
  ++steps_;
  emitted_ += accepted + 1;
  proposed_ += proposed;
  accepted_ += accepted;
  // Positions 1..accepted were accepted; position accepted + 1 (if proposed)
  // was attempted and rejected.
  for (int32_t j = 0; j < std::min(accepted + 1, proposed); ++j) ++attempts_[size_t(j)];
  for (int32_t j = 0; j < accepted; ++j) ++accepts_[size_t(j)];
  if (proposed == k_) ++histogram_[size_t(accepted)];
  SpeculativeRequestStats& r = per_request_[request_id];
  ++r.steps;
  r.proposed += proposed;
  r.accepted += accepted;
}

void SpeculativeStats::merge(const SpeculativeStats& other) {
  if (other.k_ != k_)
    throw std::logic_error(fmt::format("SpeculativeStats: merging k = {} into k = {}", other.k_, k_));
  steps_ += other.steps_;
  emitted_ += other.emitted_;
  proposed_ += other.proposed_;
  accepted_ += other.accepted_;
  plain_decodes_ += other.plain_decodes_;
  draft_seconds_ += other.draft_seconds_;
  for (size_t j = 0; j < attempts_.size(); ++j) attempts_[j] += other.attempts_[j], accepts_[j] += other.accepts_[j];
  for (size_t a = 0; a < histogram_.size(); ++a) histogram_[a] += other.histogram_[a];
  for (const auto& [id, r] : other.per_request_) {
    SpeculativeRequestStats& mine = per_request_[id];
    mine.steps += r.steps;
    mine.proposed += r.proposed;
    mine.accepted += r.accepted;
  }
}

double SpeculativeStats::mean_accepted_tokens_per_step() const {
  return steps_ > 0 ? double(emitted_) / double(steps_) : 0.0;
}

double SpeculativeStats::draft_acceptance_rate() const {
  return proposed_ > 0 ? double(accepted_) / double(proposed_) : 0.0;
}

std::vector<double> SpeculativeStats::acceptance_rate_per_position() const {
  std::vector<double> rates(attempts_.size(), 0.0);
  for (size_t j = 0; j < rates.size(); ++j)
    if (attempts_[j] > 0) rates[j] = double(accepts_[j]) / double(attempts_[j]);
  return rates;
}

nlohmann::json SpeculativeStats::to_json() const {
  return {{"num_speculative_tokens", k_},
          {"steps", steps_},
          {"plain_decodes", plain_decodes_},
          {"mean_accepted_tokens_per_step", mean_accepted_tokens_per_step()},
          {"draft_acceptance_rate", draft_acceptance_rate()},
          {"acceptance_rate_per_position", acceptance_rate_per_position()},
          {"attempts_per_position", attempts_},
          {"accepts_per_position", accepts_},
          {"accepted_length_histogram", histogram_},
          {"draft_seconds", draft_seconds_}};
}

void SpeculativeStats::write_requests_csv(const std::string& path) const {
  std::vector<int64_t> ids;
  ids.reserve(per_request_.size());
  for (const auto& [id, r] : per_request_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::ofstream out(path);
  if (!out) throw InputError(fmt::format("cannot write {}", path));
  out << "request_id,steps,proposed,accepted,acceptance_rate,tokens_per_step\n";
  for (int64_t id : ids) {
    const SpeculativeRequestStats& r = per_request_.at(id);
    out << fmt::format("{},{},{},{},{:.6f},{:.6f}\n", id, r.steps, r.proposed, r.accepted,
                       r.proposed > 0 ? double(r.accepted) / double(r.proposed) : 0.0,
                       r.steps > 0 ? double(r.accepted + r.steps) / double(r.steps) : 0.0);
  }
  if (!out) throw InputError(fmt::format("cannot write {}", path));
}

}  // namespace servesim
