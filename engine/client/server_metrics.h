// What a server's own /metrics says of a `servesim bench` run: the change
// of its vLLM series between a scrape before the first request and one after
// the last. The client measures latencies; these are what only the server
// sees: how many engine steps it ran and how many tokens each carried
// (vLLM V1's vllm:iteration_tokens_total histogram), preemptions, tokens,
// prefix-cache hits. `validate --measured` puts the steps beside the
// prediction's.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/client/prometheus_text.h"

namespace servesim {

struct ServerMetricsDelta {
  // vLLM counters, each summed over its label sets: vllm:prompt_tokens_total,
  // vllm:generation_tokens_total, vllm:num_preemptions_total,
  // vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,
  // vllm:request_success_total; only those the server exports.
  std::map<std::string, double> counters;
  // vllm:iteration_tokens_total, where exported: steps, their tokens and
  // the cumulative count at each bucket bound (le, ascending; +Inf last).
  std::optional<double> steps, step_tokens;
  std::vector<std::pair<double, double>> step_buckets;
  // What was left out: a counter that went down, a histogram that is not
  // whole or went down (a server restarted between the scrapes).
  std::vector<std::string> notes;
};

// The counters and the histogram after minus before (a series missing
// before counts from 0). A counter that fell is left out; so is the
// histogram where any of its series fell, or its buckets do not end at
// +Inf with the count of steps.
ServerMetricsDelta server_metrics_delta(const std::vector<PromSample>& before, const std::vector<PromSample>& after);

// summary.json's server_metrics: {source, counters {name: delta},
// iteration_tokens {steps, tokens, mean, buckets [{le, count}]} or null,
// notes, meaning}.
nlohmann::json server_metrics_json(const ServerMetricsDelta& d, const std::string& source);

}  // namespace servesim
