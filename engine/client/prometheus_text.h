// Reading a Prometheus text exposition (what a server's GET /metrics
// answers: https://prometheus.io/docs/instrumenting/exposition_formats/),
// the part `servesim bench` needs: every sample's name, labels and value.
// Comments (# HELP, # TYPE) are skipped; a timestamp after the value is
// ignored.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace servesim {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;  // +Inf, -Inf and NaN as the format writes them
};

// Throws std::invalid_argument naming the line (1-based) and what is wrong:
// a name that is not a metric name, labels that do not close, a label value
// without quotes, a value that is not a number.
std::vector<PromSample> parse_prometheus_text(std::string_view text);

// One number as the format writes it (a sample value, or a label value such
// as a histogram's le): +Inf, -Inf, NaN or a decimal float. Throws
// std::invalid_argument naming it otherwise.
double parse_prometheus_number(std::string_view v);

}  // namespace servesim
