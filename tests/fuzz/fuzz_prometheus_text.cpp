// libFuzzer: a server's /metrics answer as `servesim bench` reads it
// (engine/client/prometheus_text.h), then the change between two scrapes
// (engine/client/server_metrics.h) of what it accepts.
#include <stdexcept>

#include "engine/client/prometheus_text.h"
#include "engine/client/server_metrics.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  try {
    const std::vector<PromSample> samples = parse_prometheus_text(fuzz::as_text(data, size));
    for (const PromSample& s : samples) {
      fuzz::require(!s.name.empty(), "a sample without a name");
      for (const auto& [key, value] : s.labels) fuzz::require(!key.empty(), "a label without a name");
    }
    const ServerMetricsDelta d = server_metrics_delta({}, samples);
    fuzz::require(d.steps.has_value() == d.step_tokens.has_value(), "steps without their tokens, or tokens without steps");
    for (size_t i = 1; i < d.step_buckets.size(); ++i)
      fuzz::require(d.step_buckets[i - 1].first < d.step_buckets[i].first, "bucket bounds not ascending");
    (void)server_metrics_json(d, "fuzz").dump();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
