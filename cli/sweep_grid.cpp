#include "cli/sweep_grid.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/units.h"

namespace servesim::cli {
namespace {

// Bounds that catch a mistyped range before it starts a million processes.
constexpr size_t kMaxValuesPerAxis = 10000;
constexpr size_t kMaxPoints = 100000;

// The flags sweep sets on every point itself.
bool reserved_flag(const std::string& flag) {
  return flag == "out" || flag == "json" || flag == "quiet" || flag == "q" || flag == "help" || flag == "h";
}

bool valid_flag_name(const std::string& flag) {
  if (flag.empty() || !(flag[0] >= 'a' && flag[0] <= 'z')) return false;
  return std::all_of(flag.begin(), flag.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

// An optional '-' and at least one digit.
bool is_integer(const std::string& text) {
  const size_t digits = text.rfind('-', 0) == 0 ? 1 : 0;
  return text.size() > digits &&
         std::all_of(text.begin() + long(digits), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// LO..HI or LO..HI:STEP, integers, LO <= HI, STEP >= 1. Only a value of this
// exact shape is a range: "../x.json" or "uniform:16:256" are plain values.
std::optional<std::vector<std::string>> expand_range(const std::string& flag, const std::string& item) {
  const size_t dots = item.find("..");
  if (dots == std::string::npos) return std::nullopt;
  const size_t colon = item.find(':', dots + 2);
  const std::string lo_text = item.substr(0, dots);
  const std::string hi_text = item.substr(dots + 2, colon == std::string::npos ? std::string::npos : colon - dots - 2);
  const std::string step_text = colon == std::string::npos ? "1" : item.substr(colon + 1);
  if (!is_integer(lo_text) || !is_integer(hi_text) || !is_integer(step_text))
    return std::nullopt;
  auto parse = [&](const std::string& text) {
    long long v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || ptr != text.data() + text.size())
      throw InputError(fmt::format("--grid {}: range '{}': '{}' is out of range", flag, item, text));
    return v;
  };
  const long long lo = parse(lo_text), hi = parse(hi_text), step = parse(step_text);
  if (lo > hi)
    throw InputError(fmt::format("--grid {}: range '{}' is empty: LO {} > HI {}", flag, item, lo, hi));
  if (step < 1) throw InputError(fmt::format("--grid {}: range '{}': STEP must be >= 1", flag, item));
  // (hi - lo) / step + 1 without overflow: the parts are bounded by 2^63.
  const unsigned long long count = (static_cast<unsigned long long>(hi) - static_cast<unsigned long long>(lo)) /
                                       static_cast<unsigned long long>(step) + 1;
  if (count > kMaxValuesPerAxis)
    throw InputError(fmt::format("--grid {}: range '{}' has {} values; at most {} per axis", flag, item, count,
                                 kMaxValuesPerAxis));
  std::vector<std::string> values;
  // In unsigned arithmetic, which wraps where lo + i * step would overflow on
  // the way; C++20 converts the in-range result back exactly.
  for (unsigned long long i = 0; i < count; ++i)
    values.push_back(fmt::format("{}", static_cast<long long>(static_cast<unsigned long long>(lo) +
                                                              i * static_cast<unsigned long long>(step))));
  return values;
}

}  // namespace

GridAxis parse_grid_axis(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos)
    throw InputError(fmt::format("--grid '{}': expected FLAG=V1,V2,... (e.g. --grid max-num-seqs=1,8,32)", spec));
  GridAxis axis;
  axis.flag = spec.substr(0, eq);
  if (axis.flag.rfind("--", 0) == 0) axis.flag.erase(0, 2);
  if (!valid_flag_name(axis.flag))
    throw InputError(fmt::format("--grid '{}': '{}' is not a simulate flag name (lowercase letters, digits and "
                                 "'-', e.g. max-num-seqs)",
                                 spec, spec.substr(0, eq)));
  if (reserved_flag(axis.flag))
    throw InputError(fmt::format("--grid '{}': sweep sets --{} of every point itself", spec, axis.flag));
  const std::string list = spec.substr(eq + 1);
  if (list.empty()) throw InputError(fmt::format("--grid '{}': no values after '='", spec));
  const char sep = list.find(';') != std::string::npos ? ';' : ',';
  std::set<std::string> seen;
  for (const std::string& item : split(list, sep)) {
    if (item.empty())
      throw InputError(fmt::format("--grid '{}': an empty value (two '{}' in a row, or one at an end)", spec, sep));
    for (const char c : item)
      if (std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c)))
        throw InputError(fmt::format("--grid '{}': value '{}' holds whitespace or a control character", spec, item));
    const auto range = expand_range(axis.flag, item);
    for (const std::string& value : range ? *range : std::vector<std::string>{item}) {
      if (!seen.insert(value).second)
        throw InputError(fmt::format("--grid {}: value '{}' appears twice", axis.flag, value));
      axis.values.push_back(value);
    }
    if (axis.values.size() > kMaxValuesPerAxis)
      throw InputError(fmt::format("--grid {}: more than {} values", axis.flag, kMaxValuesPerAxis));
  }
  return axis;
}

std::vector<GridAxis> parse_grid(const std::vector<std::string>& specs) {
  if (specs.empty())
    throw InputError("no --grid given: name at least one simulate flag and its values, e.g. "
                     "--grid max-num-seqs=1,8,32");
  std::vector<GridAxis> axes;
  size_t points = 1;
  for (const std::string& spec : specs) {
    GridAxis axis = parse_grid_axis(spec);
    for (const GridAxis& earlier : axes)
      if (earlier.flag == axis.flag)
        throw InputError(fmt::format("--grid {} is given twice; list all its values in one --grid", axis.flag));
    points *= axis.values.size();  // each factor <= kMaxValuesPerAxis: checked before it can overflow
    if (points > kMaxPoints)
      throw InputError(fmt::format("the grid has more than {} points; sweep fewer values", kMaxPoints));
    axes.push_back(std::move(axis));
  }
  return axes;
}

std::vector<std::vector<std::string>> grid_points(const std::vector<GridAxis>& axes) {
  std::vector<std::vector<std::string>> points{{}};
  for (const GridAxis& axis : axes) {
    std::vector<std::vector<std::string>> next;
    next.reserve(points.size() * axis.values.size());
    for (const auto& prefix : points)
      for (const std::string& value : axis.values) {
        next.push_back(prefix);
        next.back().push_back(value);
      }
    points = std::move(next);
  }
  return points;
}

std::string point_label(const std::vector<GridAxis>& axes, const std::vector<std::string>& values) {
  std::string label;
  for (size_t i = 0; i < axes.size(); ++i)
    label += fmt::format("{}{}={}", i ? " " : "", axes[i].flag, values.at(i));
  return label;
}

const std::vector<MetricColumn>& metric_columns() {
  static const std::vector<MetricColumn> columns = [] {
    std::vector<MetricColumn> c = {
        {"requests_submitted", "/requests/submitted"},
        {"requests_completed", "/requests/completed"},
        {"requests_rejected", "/requests/rejected"},
        {"output_tokens", "/tokens/output"},
        {"duration_s", "/duration_s", true},
        {"requests_per_s", "/throughput/requests_per_s"},
        {"output_tokens_per_s", "/throughput/output_tokens_per_s"},
        {"goodput_requests_per_s", "/goodput_requests_per_s", false, true},
        {"slo_requests_met", "/slo/requests_met", false, true},
    };
    for (const char* metric : {"ttft", "tpot", "itl", "e2e", "queueing"})
      for (const char* stat : {"mean", "p50", "p90", "p95", "p99"})
        c.push_back({fmt::format("{}_{}_s", metric, stat), fmt::format("/{}_s/{}", metric, stat), true});
    c.push_back({"preemptions", "/preemptions"});
    c.push_back({"iterations", "/iterations"});
    c.push_back({"mean_batch_sequences", "/mean_batch/sequences"});
    c.push_back({"mean_batch_tokens", "/mean_batch/tokens"});
    c.push_back({"kv_peak_utilization", "/kv_cache/peak_utilization"});
    // Present only in runs with speculative decoding.
    c.push_back({"speculative_mean_accepted_tokens_per_step", "/speculative/mean_accepted_tokens_per_step"});
    c.push_back({"speculative_draft_acceptance_rate", "/speculative/draft_acceptance_rate"});
    return c;
  }();
  return columns;
}

const MetricColumn* find_metric_column(const std::string& name) {
  for (const MetricColumn& c : metric_columns())
    if (c.name == name) return &c;
  return nullptr;
}

namespace {

const nlohmann::json* lookup(const nlohmann::json& summary, const MetricColumn& column) {
  const nlohmann::json::json_pointer pointer(column.pointer);
  if (!summary.contains(pointer)) return nullptr;
  const nlohmann::json& v = summary.at(pointer);
  return v.is_number() ? &v : nullptr;
}

}  // namespace

std::optional<double> metric_value(const nlohmann::json& summary, const MetricColumn& column) {
  const nlohmann::json* v = lookup(summary, column);
  if (!v) return std::nullopt;
  return v->get<double>();
}

std::string metric_cell(const nlohmann::json& summary, const MetricColumn& column) {
  // dump() writes the number as summary.json does (shortest round-trip text),
  // so a cell parses back to exactly the summary's double.
  const nlohmann::json* v = lookup(summary, column);
  return v ? v->dump() : std::string();
}

namespace {

// "min-tpot-p90" -> "tpot_p90_s"; nullopt for anything else.
std::optional<std::string> latency_objective_column(const std::string& text) {
  for (const char* metric : {"ttft", "tpot", "itl", "e2e"})
    for (const char* stat : {"mean", "p50", "p90", "p95", "p99"})
      if (text == fmt::format("min-{}-{}", metric, stat)) return fmt::format("{}_{}_s", metric, stat);
  return std::nullopt;
}

}  // namespace

std::string objectives_help() {
  return "max-throughput (output tokens/s, the default) | max-request-throughput (requests/s) | "
         "max-goodput (requests/s meeting the SLOs; needs --slo-ttft, --slo-tpot or --slo-e2e in the "
         "simulate flags) | min-METRIC-STAT with METRIC in ttft, tpot, itl, e2e and STAT in mean, p50, "
         "p90, p95, p99 (e.g. min-tpot-p50) | max:COLUMN or min:COLUMN for any metric column of "
         "sweep.csv (e.g. min:queueing_p99_s)";
}

Objective parse_objective(const std::string& text) {
  Objective o;
  o.name = text;
  std::string column;
  if (text == "max-throughput") {
    column = "output_tokens_per_s";
  } else if (text == "max-request-throughput") {
    column = "requests_per_s";
  } else if (text == "max-goodput") {
    column = "goodput_requests_per_s";
  } else if (const auto latency = latency_objective_column(text)) {
    column = *latency;
    o.maximize = false;
  } else if (text.rfind("max:", 0) == 0 || text.rfind("min:", 0) == 0) {
    column = text.substr(4);
    o.maximize = text[1] == 'a';
    if (!find_metric_column(column))
      throw InputError(fmt::format("--objective {}: '{}' is not a metric column of sweep.csv", text, column));
  } else {
    throw InputError(fmt::format("--objective: unknown objective '{}'; one of: {}", text, objectives_help()));
  }
  o.column = find_metric_column(column);
  return o;
}

bool Constraint::holds(double value) const {
  if (op == "<=") return value <= bound;
  if (op == "<") return value < bound;
  if (op == ">=") return value >= bound;
  return value > bound;
}

Constraint parse_constraint(const std::string& text) {
  Constraint c;
  c.text = text;
  const size_t at = text.find_first_of("<>");
  if (at == std::string::npos)
    throw InputError(fmt::format("--constraint '{}': expected COLUMN<=VALUE, COLUMN<VALUE, COLUMN>=VALUE or "
                                 "COLUMN>VALUE (e.g. tpot_p90_s<=50ms)",
                                 text));
  c.op = text.substr(at, at + 1 < text.size() && text[at + 1] == '=' ? 2 : 1);
  const std::string name = text.substr(0, at);
  const std::string value = text.substr(at + c.op.size());
  c.column = find_metric_column(name);
  if (!c.column)
    throw InputError(fmt::format("--constraint '{}': '{}' is not a metric column of sweep.csv (e.g. "
                                 "tpot_p90_s, ttft_p99_s, requests_per_s, requests_completed)",
                                 text, name));
  if (c.column->seconds) {
    // A duration column takes a unit like the --slo-* flags (plain: seconds).
    c.bound = parse_duration_s(value, fmt::format("--constraint '{}'", text));
    return c;
  }
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, c.bound);
  if (value.empty() || ec != std::errc() || ptr != end || !std::isfinite(c.bound))
    throw InputError(fmt::format("--constraint '{}': '{}' is not a number", text, value));
  return c;
}

std::vector<size_t> rank_points(std::vector<PointOutcome>& points, const Objective& objective,
                                const std::vector<Constraint>& constraints) {
  std::vector<size_t> feasible;
  for (size_t i = 0; i < points.size(); ++i) {
    PointOutcome& p = points[i];
    p.violations.clear();
    p.objective.reset();
    p.rank.reset();
    if (!p.ok) continue;
    for (const Constraint& c : constraints) {
      const auto v = metric_value(p.summary, *c.column);
      // A metric the summary lacks cannot be shown to meet the constraint.
      if (!v || !c.holds(*v)) p.violations.push_back(c.text);
    }
    p.objective = metric_value(p.summary, *objective.column);
    if (p.violations.empty() && p.objective) feasible.push_back(i);
  }
  // Stable: equal objective values keep grid order.
  std::stable_sort(feasible.begin(), feasible.end(), [&](size_t a, size_t b) {
    return objective.maximize ? *points[a].objective > *points[b].objective
                              : *points[a].objective < *points[b].objective;
  });
  for (size_t r = 0; r < feasible.size(); ++r) points[feasible[r]].rank = r + 1;
  return feasible;
}

std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace servesim::cli
