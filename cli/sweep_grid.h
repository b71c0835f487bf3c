// `servesim sweep`'s pure parts: the grid (--grid), the metric columns
// flattened from a point's summary.json, the objective, the constraints and
// the ranking. No processes, no files: sweep_command.cpp does those.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace servesim::cli {

// One --grid axis: a simulate flag (without its dashes) and its values, as
// text, in the order given.
struct GridAxis {
  std::string flag;
  std::vector<std::string> values;
};

// "FLAG=V1,V2,..." (a leading "--" on FLAG is allowed). Values are separated
// by commas, or by semicolons where any contains a comma (an
// --acceptance-curve); an integer range LO..HI or LO..HI:STEP stands for
// LO, LO+STEP, ... up to HI. Throws InputError naming the problem.
GridAxis parse_grid_axis(const std::string& spec);

// Every --grid, in order: at least one, no flag twice, a bounded product.
std::vector<GridAxis> parse_grid(const std::vector<std::string>& specs);

// The Cartesian product of the axes' values, first axis outermost (the last
// axis varies fastest, as nested loops in the order of the --grid flags).
std::vector<std::vector<std::string>> grid_points(const std::vector<GridAxis>& axes);

// "rate=2 max-num-seqs=8".
std::string point_label(const std::vector<GridAxis>& axes, const std::vector<std::string>& values);

// A column of sweep.csv read from a point's summary.json.
struct MetricColumn {
  std::string name;     // e.g. "tpot_p90_s"
  std::string pointer;  // JSON pointer into summary.json, e.g. "/tpot_s/p90"
  bool seconds = false; // a duration (shown in ms; a constraint may say "50ms")
  bool needs_slo = false;  // present only when simulate got an --slo-* flag
};

// Every metric column, in sweep.csv's order.
const std::vector<MetricColumn>& metric_columns();
// The column named `name`, or nullptr.
const MetricColumn* find_metric_column(const std::string& name);

// The column's number in `summary`, or nullopt where summary.json lacks it
// (no SLO given, no speculative decoding) or holds null.
std::optional<double> metric_value(const nlohmann::json& summary, const MetricColumn& column);
// The CSV cell: the number exactly as summary.json writes it, or "".
std::string metric_cell(const nlohmann::json& summary, const MetricColumn& column);

// What --objective ranks by.
struct Objective {
  std::string name;  // as given, e.g. "min-tpot-p90"
  const MetricColumn* column = nullptr;
  bool maximize = true;
};

// max-throughput | max-request-throughput | max-goodput |
// min-{ttft,tpot,itl,e2e}-{mean,p50,p90,p95,p99} | max:COLUMN | min:COLUMN.
Objective parse_objective(const std::string& text);
// The --help text listing the objectives.
std::string objectives_help();

// One --constraint: COLUMN<=VALUE (also <, >=, >).
struct Constraint {
  std::string text;
  const MetricColumn* column = nullptr;
  std::string op;  // "<=", "<", ">=", ">"
  double bound = 0;

  bool holds(double value) const;
};

Constraint parse_constraint(const std::string& text);

// How a point ended, and where it ranks.
struct PointOutcome {
  bool ok = false;                      // simulate succeeded and printed its summary
  nlohmann::json summary;               // when ok
  std::vector<std::string> violations;  // constraints it breaks (when ok)
  std::optional<double> objective;      // its objective value (when ok)
  std::optional<size_t> rank;           // 1 = best; none for failed or infeasible points
};

// Fills violations, objective and rank of every point: a point is feasible
// when it is ok, meets every constraint and has an objective value; feasible
// points rank by the objective, ties by grid order. Returns the indices of
// the feasible points, best first.
std::vector<size_t> rank_points(std::vector<PointOutcome>& points, const Objective& objective,
                                const std::vector<Constraint>& constraints);

// A CSV cell: quoted (and inner quotes doubled) where it holds a comma, a
// quote or a line break.
std::string csv_cell(const std::string& text);

}  // namespace servesim::cli
