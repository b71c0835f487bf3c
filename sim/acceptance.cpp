#include "sim/acceptance.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/input_file.h"

namespace servesim {
namespace {

double parse_probability(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw InputError(fmt::format("{}: '{}' is not a number", flag, text));
  if (!(v >= 0 && v <= 1)) throw InputError(fmt::format("{}: {} is not a probability in [0, 1]", flag, text));
  return v;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.push_back("");
  return parts;
}

}  // namespace

AcceptanceModel AcceptanceModel::independent(double rate) {
  if (!(rate >= 0 && rate <= 1))
    throw InputError(fmt::format("--acceptance-rate: {} is not a probability in [0, 1]", rate));
  AcceptanceModel m;
  m.kind_ = AcceptanceKind::Independent;
  m.rate_ = rate;
  return m;
}

AcceptanceModel AcceptanceModel::curve(std::vector<double> rates) {
  if (rates.empty()) throw InputError("--acceptance-curve: give at least one rate");
  for (double r : rates)
    if (!(r >= 0 && r <= 1)) throw InputError(fmt::format("--acceptance-curve: {} is not a probability in [0, 1]", r));
  AcceptanceModel m;
  m.kind_ = AcceptanceKind::Curve;
  m.curve_ = std::move(rates);
  return m;
}

AcceptanceModel AcceptanceModel::parse_curve(const std::string& text) {
  std::vector<double> rates;
  for (const std::string& part : split(text, ',')) rates.push_back(parse_probability(part, "--acceptance-curve"));
  return curve(std::move(rates));
}

AcceptanceModel AcceptanceModel::beta(double a, double b) {
  if (!(a > 0) || !(b > 0) || !std::isfinite(a) || !std::isfinite(b))
    throw InputError(fmt::format("--acceptance-beta: A and B must be > 0 (got {}:{})", a, b));
  AcceptanceModel m;
  m.kind_ = AcceptanceKind::Beta;
  m.beta_a_ = a;
  m.beta_b_ = b;
  return m;
}

AcceptanceModel AcceptanceModel::parse_beta(const std::string& text) {
  const std::vector<std::string> parts = split(text, ':');
  if (parts.size() != 2) throw InputError(fmt::format("--acceptance-beta: '{}' is not A:B (e.g. 4:1)", text));
  double v[2];
  for (int i = 0; i < 2; ++i) {
    size_t used = 0;
    try {
      v[i] = std::stod(parts[size_t(i)], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != parts[size_t(i)].size())
      throw InputError(fmt::format("--acceptance-beta: '{}' is not A:B with numbers A, B > 0", text));
  }
  return beta(v[0], v[1]);
}

AcceptanceModel AcceptanceModel::histogram(const std::vector<int64_t>& counts, const std::string& source) {
  if (counts.size() < 2)
    throw InputError(fmt::format("{}: an accepted-length histogram needs counts for 0 .. k accepted, k >= 1", source));
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) throw InputError(fmt::format("{}: histogram counts must be >= 0", source));
    total += c;
  }
  if (total == 0) throw InputError(fmt::format("{}: the histogram has no steps", source));
  AcceptanceModel m;
  m.kind_ = AcceptanceKind::Histogram;
  m.counts_ = counts;
  m.source_ = source;
  // at_least[j] = steps that accepted >= j drafts.
  const size_t k = counts.size() - 1;
  std::vector<int64_t> at_least(k + 2, 0);
  for (size_t j = k + 1; j-- > 0;) at_least[j] = at_least[j + 1] + counts[j];
  m.curve_.resize(k);
  for (size_t j = 1; j <= k; ++j)
    m.curve_[j - 1] = at_least[j - 1] > 0 ? double(at_least[j]) / double(at_least[j - 1]) : 0.0;
  return m;
}

AcceptanceModel AcceptanceModel::load_histogram(const std::string& path) {
  const std::string flag = "--acceptance-hist " + path;
  refuse_folder(path, flag, "an acceptance histogram");
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open the file", flag));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw InputError(fmt::format("{}: the file is empty", flag));

  std::vector<int64_t> counts;
  if (text[first] == '{' || text[first] == '[') {
    // summary.json of a speculative run, its "speculative" object, or a bare array.
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: not valid JSON ({})", flag, e.what()));
    }
    const nlohmann::json* h = &j;
    if (j.is_object()) {
      const nlohmann::json& spec = j.contains("speculative") ? j["speculative"] : j;
      if (!spec.is_object() || !spec.contains("accepted_length_histogram"))
        throw InputError(fmt::format("{}: no speculative.accepted_length_histogram (is it the summary.json of a "
                                     "speculative run?)",
                                     flag));
      h = &spec["accepted_length_histogram"];
    }
    if (!h->is_array()) throw InputError(fmt::format("{}: accepted_length_histogram must be an array", flag));
    for (const nlohmann::json& c : *h) {
      if (!c.is_number_integer()) throw InputError(fmt::format("{}: histogram counts must be integers", flag));
      counts.push_back(c.get<int64_t>());
    }
  } else {
    // CSV: header "accepted,count", then one row per accepted length 0..k.
    std::istringstream lines(text);
    std::string line;
    int64_t line_no = 0;
    bool header = false;
    while (std::getline(lines, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      if (!header) {
        if (line != "accepted,count")
          throw InputError(fmt::format("{}:{}: expected the header 'accepted,count'", path, line_no));
        header = true;
        continue;
      }
      const std::vector<std::string> f = split(line, ',');
      long long accepted = -1, count = -1;
      size_t u1 = 0, u2 = 0;
      try {
        if (f.size() == 2) {
          accepted = std::stoll(f[0], &u1);
          count = std::stoll(f[1], &u2);
        }
      } catch (const std::exception&) {
        u1 = 0;
      }
      if (f.size() != 2 || u1 != f[0].size() || u2 != f[1].size() || accepted < 0 || count < 0)
        throw InputError(fmt::format("{}:{}: expected 'accepted,count' with integers >= 0", path, line_no));
      if (accepted != int64_t(counts.size()))
        throw InputError(fmt::format("{}:{}: accepted lengths must be 0, 1, 2, ... in order (got {})", path, line_no,
                                     accepted));
      counts.push_back(count);
    }
    if (!header) throw InputError(fmt::format("{}: expected the header 'accepted,count'", flag));
  }
  return histogram(counts, path);
}

void AcceptanceModel::require_covers(int32_t k) const {
  if ((kind_ == AcceptanceKind::Curve || kind_ == AcceptanceKind::Histogram) && int32_t(curve_.size()) < k)
    throw InputError(fmt::format("{} gives acceptance for {} positions, fewer than --num-speculative-tokens {}",
                                 kind_ == AcceptanceKind::Curve ? "--acceptance-curve" : "--acceptance-hist " + source_,
                                 curve_.size(), k));
}

std::vector<double> AcceptanceModel::conditional_rates(int32_t k) const {
  std::vector<double> rates(size_t(std::max(k, 0)));
  for (int32_t j = 1; j <= k; ++j) {
    switch (kind_) {
      case AcceptanceKind::Independent: rates[size_t(j - 1)] = rate_; break;
      case AcceptanceKind::Curve:
      case AcceptanceKind::Histogram:
        rates[size_t(j - 1)] = size_t(j) <= curve_.size() ? curve_[size_t(j - 1)] : 0.0;
        break;
      case AcceptanceKind::Beta:
        // E[alpha^j] / E[alpha^(j-1)] = (A + j - 1) / (A + B + j - 1).
        rates[size_t(j - 1)] = (beta_a_ + j - 1) / (beta_a_ + beta_b_ + j - 1);
        break;
    }
  }
  return rates;
}

double AcceptanceModel::expected_tokens_per_step(int32_t k) const {
  double tokens = 1, at_least = 1;
  for (double a : conditional_rates(k)) {
    at_least *= a;
    tokens += at_least;
  }
  return tokens;
}

int32_t AcceptanceModel::sample(int64_t request_id, int32_t proposed, Rng& rng) {
  double rate = rate_;
  if (kind_ == AcceptanceKind::Beta) {
    auto it = request_rates_.find(request_id);
    if (it == request_rates_.end()) {
      // The request's own generator: its rate does not depend on the order
      // in which requests are first seen.
      Rng own(splitmix64_finalize(seed_ ^ splitmix64_finalize(uint64_t(request_id))));
      const double x = own.gamma(beta_a_, 1.0), y = own.gamma(beta_b_, 1.0);
      it = request_rates_.emplace(request_id, x + y > 0 ? x / (x + y) : 0.0).first;
    }
    rate = it->second;
  }
  int32_t accepted = 0;
  while (accepted < proposed) {
    const double a = (kind_ == AcceptanceKind::Curve || kind_ == AcceptanceKind::Histogram)
                         ? (size_t(accepted) < curve_.size() ? curve_[size_t(accepted)] : 0.0)
                         : rate;
    if (!(rng.uniform() < a)) break;
    ++accepted;
  }
  return accepted;
}

nlohmann::json AcceptanceModel::to_json() const {
  switch (kind_) {
    case AcceptanceKind::Independent: return {{"model", "independent"}, {"rate", rate_}};
    case AcceptanceKind::Curve: return {{"model", "curve"}, {"conditional_rates", curve_}};
    case AcceptanceKind::Beta:
      return {{"model", "beta"}, {"a", beta_a_}, {"b", beta_b_}, {"mean_rate", beta_a_ / (beta_a_ + beta_b_)}};
    case AcceptanceKind::Histogram:
      return {{"model", "histogram"}, {"source", source_}, {"counts", counts_}, {"conditional_rates", curve_}};
  }
  return {};
}

}  // namespace servesim
