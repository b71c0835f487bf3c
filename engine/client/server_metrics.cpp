#include "engine/client/server_metrics.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace servesim {
namespace {

const char* const kCounters[] = {"vllm:prompt_tokens_total",        "vllm:generation_tokens_total",
                                 "vllm:num_preemptions_total",      "vllm:prefix_cache_queries_total",
                                 "vllm:prefix_cache_hits_total",    "vllm:request_success_total"};
constexpr const char* kStepTokens = "vllm:iteration_tokens_total";

struct Totals {
  std::map<std::string, double> counters;
  std::optional<double> steps, step_tokens;
  std::map<double, double> buckets;  // le -> cumulative count
};

Totals totals_of(const std::vector<PromSample>& samples) {
  Totals t;
  const std::string bucket = std::string(kStepTokens) + "_bucket", sum = std::string(kStepTokens) + "_sum",
                    count = std::string(kStepTokens) + "_count";
  for (const PromSample& s : samples) {
    if (!std::isfinite(s.value)) continue;
    if (std::find(std::begin(kCounters), std::end(kCounters), s.name) != std::end(kCounters)) {
      t.counters[s.name] += s.value;
    } else if (s.name == count) {
      t.steps = t.steps.value_or(0) + s.value;
    } else if (s.name == sum) {
      t.step_tokens = t.step_tokens.value_or(0) + s.value;
    } else if (s.name == bucket) {
      const auto le = s.labels.find("le");
      if (le == s.labels.end()) continue;
      double bound = INFINITY;
      if (le->second != "+Inf") {
        try {
          bound = parse_prometheus_number(le->second);
        } catch (const std::invalid_argument&) {
          continue;
        }
        if (!std::isfinite(bound)) continue;
      }
      t.buckets[bound] += s.value;
    }
  }
  return t;
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

ServerMetricsDelta server_metrics_delta(const std::vector<PromSample>& before, const std::vector<PromSample>& after) {
  const Totals b = totals_of(before), a = totals_of(after);
  ServerMetricsDelta d;
  for (const auto& [name, value] : a.counters) {
    const auto old = b.counters.find(name);
    const double change = value - (old == b.counters.end() ? 0.0 : old->second);
    if (change >= 0)
      d.counters[name] = change;
    else
      d.notes.push_back(name + " went down during the run (a restarted server?): left out");
  }
  if (a.steps && a.step_tokens) {
    std::vector<std::pair<double, double>> buckets;
    bool reset = *a.steps < b.steps.value_or(0) || *a.step_tokens < b.step_tokens.value_or(0);
    double last = 0;
    for (const auto& [le, count] : a.buckets) {
      const auto old = b.buckets.find(le);
      const double change = count - (old == b.buckets.end() ? 0.0 : old->second);
      reset = reset || change < last;  // cumulative counts never fall
      last = change;
      buckets.emplace_back(le, change);
    }
    const double steps = *a.steps - b.steps.value_or(0);
    if (reset || buckets.empty() || !std::isinf(buckets.back().first) || buckets.back().second != steps) {
      d.notes.push_back(std::string(kStepTokens) +
                        " is not a whole histogram that grew during the run (a restarted server?): left out");
    } else {
      d.steps = steps;
      d.step_tokens = *a.step_tokens - b.step_tokens.value_or(0);
      d.step_buckets = std::move(buckets);
    }
  }
  return d;
}

nlohmann::json server_metrics_json(const ServerMetricsDelta& d, const std::string& source) {
  nlohmann::json counters = nlohmann::json::object();
  for (const auto& [name, value] : d.counters) counters[name] = value;
  nlohmann::json steps = nullptr;
  if (d.steps && d.step_tokens) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const auto& [le, count] : d.step_buckets)
      buckets.push_back({{"le", std::isinf(le) ? nlohmann::json("+Inf") : nlohmann::json(le)}, {"count", count}});
    steps = {{"steps", *d.steps},
             {"tokens", *d.step_tokens},
             {"mean", *d.steps > 0 ? finite_or_null(*d.step_tokens / *d.steps) : nlohmann::json(nullptr)},
             {"buckets", buckets}};
  }
  return {{"source", source},
          {"counters", counters},
          {"iteration_tokens", steps},
          {"notes", d.notes},
          {"meaning",
           "the server's own /metrics, scraped before the first request and after the last: each vLLM counter's "
           "change (summed over label sets) and the change of vllm:iteration_tokens_total, the tokens of each engine "
           "step (buckets cumulative, as Prometheus keeps them); another client's traffic in between counts too"}};
}

}  // namespace servesim
