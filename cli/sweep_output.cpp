#include "cli/sweep_output.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim::cli {

std::string status_of(const Point& p) {
  if (!p.outcome.ok) return "error";
  return p.outcome.rank ? "ok" : "infeasible";
}

namespace {

void append_csv_row(std::string& csv, const std::vector<std::string>& cells) {
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) csv += ',';
    csv += csv_cell(cells[i]);
  }
  csv += '\n';
}

}  // namespace

std::string sweep_csv(const std::vector<GridAxis>& axes, const std::vector<Point>& points) {
  std::string csv;
  std::vector<std::string> header;
  for (const GridAxis& a : axes) header.push_back(a.flag);
  header.insert(header.end(), {"status", "rank"});
  for (const MetricColumn& c : metric_columns()) header.push_back(c.name);
  header.push_back("error");
  append_csv_row(csv, header);
  for (const Point& p : points) {
    std::vector<std::string> row = p.values;
    row.push_back(status_of(p));
    row.push_back(p.outcome.rank ? fmt::format("{}", *p.outcome.rank) : std::string());
    for (const MetricColumn& c : metric_columns())
      row.push_back(p.outcome.ok ? metric_cell(p.outcome.summary, c) : std::string());
    row.push_back(p.error);
    append_csv_row(csv, row);
  }
  return csv;
}

nlohmann::json sweep_json(const std::vector<GridAxis>& axes, const std::vector<std::string>& base,
                          const Objective& objective, const std::vector<Constraint>& constraints,
                          const std::vector<Point>& points, const std::vector<size_t>& ranking) {
  nlohmann::json j;
  j["grid"] = nlohmann::json::array();
  for (const GridAxis& a : axes) j["grid"].push_back({{"flag", a.flag}, {"values", a.values}});
  j["base_args"] = base;
  j["objective"] = {{"name", objective.name},
                    {"column", objective.column->name},
                    {"direction", objective.maximize ? "max" : "min"}};
  j["constraints"] = nlohmann::json::array();
  for (const Constraint& c : constraints) j["constraints"].push_back(c.text);
  j["points"] = nlohmann::json::array();
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    nlohmann::json pj;
    pj["index"] = i;
    pj["values"] = nlohmann::json::object();
    for (size_t a = 0; a < axes.size(); ++a) pj["values"][axes[a].flag] = p.values[a];
    pj["args"] = p.args;
    pj["status"] = status_of(p);
    pj["rank"] = p.outcome.rank ? nlohmann::json(*p.outcome.rank) : nlohmann::json();
    if (p.outcome.ok) {
      pj["objective"] = p.outcome.objective ? nlohmann::json(*p.outcome.objective) : nlohmann::json();
      pj["violations"] = p.outcome.violations;
      pj["summary"] = p.outcome.summary;
    } else {
      pj["error"] = p.error;
      pj["exit_code"] = p.exit_code;
    }
    j["points"].push_back(std::move(pj));
  }
  j["ranking"] = ranking;
  j["best"] = ranking.empty() ? nlohmann::json() : nlohmann::json(ranking.front());
  return j;
}

namespace {

// A metric for the table: latencies in ms.
std::string table_value(const MetricColumn& c, std::optional<double> v) {
  if (!v) return "-";
  if (c.seconds) return fmt::format("{:.2f}", *v * 1e3);
  if (c.name == "output_tokens_per_s") return fmt::format("{:.1f}", *v);
  if (c.name.find("requests_per_s") != std::string::npos) return fmt::format("{:.3f}", *v);
  return fmt::format("{:.4g}", *v);
}

std::string column_title(const MetricColumn& c) {
  if (c.name == "output_tokens_per_s") return "output tok/s";
  if (c.name == "requests_per_s") return "req/s";
  if (c.name == "goodput_requests_per_s") return "goodput req/s";
  std::string t = c.name;
  if (c.seconds) t = t.substr(0, t.size() - 2) + " ms";  // drop "_s"
  return t;
}

// With units, for the "best:" line.
std::string describe_value(const MetricColumn& c, double v) {
  if (c.seconds) return fmt::format("{:.2f} ms {}", v * 1e3, c.name.substr(0, c.name.size() - 2));
  return fmt::format("{} {}", table_value(c, v), column_title(c));
}

constexpr size_t kTableRows = 20;

}  // namespace

void print_table(const std::vector<GridAxis>& axes, const Objective& objective,
                 const std::vector<Constraint>& constraints, const std::vector<Point>& points,
                 const std::vector<size_t>& ranking, const std::string& out_dir) {
  std::vector<const MetricColumn*> shown = {objective.column};
  const bool slo = std::any_of(points.begin(), points.end(), [](const Point& p) {
    return p.outcome.ok && p.outcome.summary.contains("goodput_requests_per_s");
  });
  std::vector<std::string> extra = {"output_tokens_per_s", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s",
                                    "tpot_p90_s"};
  if (slo) extra.insert(extra.begin() + 1, "goodput_requests_per_s");
  for (const std::string& name : extra)
    if (name != objective.column->name) shown.push_back(find_metric_column(name));

  // Ranked points best first, then the infeasible and the failed ones in grid
  // order; only the first kTableRows of those are shown.
  std::vector<size_t> order = ranking;
  for (size_t i = 0; i < points.size(); ++i)
    if (!points[i].outcome.rank) order.push_back(i);
  if (order.size() > kTableRows) order.erase(order.begin() + kTableRows, order.end());

  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"rank"};
  for (const GridAxis& a : axes) header.push_back(a.flag);
  for (const MetricColumn* c : shown) header.push_back(column_title(*c));
  header.push_back("status");
  rows.push_back(header);
  for (const size_t i : order) {
    const Point& p = points[i];
    std::vector<std::string> row = {p.outcome.rank ? fmt::format("{}", *p.outcome.rank) : "-"};
    for (const std::string& v : p.values) row.push_back(v);
    for (const MetricColumn* c : shown)
      row.push_back(table_value(*c, p.outcome.ok ? metric_value(p.outcome.summary, *c) : std::nullopt));
    std::string status = status_of(p);
    if (!p.outcome.ok) status += ": " + p.error;
    if (!p.outcome.violations.empty()) {
      status += ": violates";
      for (const std::string& v : p.outcome.violations) status += " " + v;
    }
    row.push_back(status);
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());

  std::string text = fmt::format("servesim sweep: {} points over", points.size());
  for (size_t a = 0; a < axes.size(); ++a)
    text += fmt::format("{} {} ({} values)", a ? " x" : "", axes[a].flag, axes[a].values.size());
  text += fmt::format("; objective {} ({}, {} is better)", objective.name, objective.column->name,
                      objective.maximize ? "higher" : "lower");
  if (!constraints.empty()) {
    text += "; constraints";
    for (const Constraint& c : constraints) text += " " + c.text;
  }
  text += "\n";
  for (const auto& row : rows) {
    std::string line = " ";
    // Every column right-aligned but the last (status), which is free text.
    for (size_t c = 0; c + 1 < row.size(); ++c) line += fmt::format(" {:>{}}", row[c], width[c]);
    line += "  " + row.back();
    text += line + "\n";
  }
  if (order.size() < points.size())
    text += fmt::format("  ... {} more points in {}/sweep.csv\n", points.size() - order.size(), out_dir);
  if (ranking.empty()) {
    text += "best: none: no point succeeded and met every constraint\n";
  } else {
    const Point& best = points[ranking.front()];
    text += fmt::format("best: {} -> {}\n", point_label(axes, best.values),
                        describe_value(*objective.column, *best.outcome.objective));
  }
  text += fmt::format("outputs {}/{{sweep.csv,sweep.json}}\n", out_dir);
  std::cout << text;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw InputError(fmt::format("{}: cannot write", path.string()));
}

SweepShard parse_shard(const std::string& text, const std::string& flag) {
  const size_t slash = text.find('/');
  size_t index = 0, count = 0, used_i = 0, used_n = 0;
  bool ok = slash != std::string::npos && slash > 0 && slash + 1 < text.size();
  if (ok) {
    try {
      index = std::stoul(text.substr(0, slash), &used_i);
      count = std::stoul(text.substr(slash + 1), &used_n);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  ok = ok && used_i == slash && used_n == text.size() - slash - 1 && text[0] != '-' && text[slash + 1] != '-';
  if (!ok || count < 1 || index >= count)
    throw InputError(fmt::format("{} '{}': expected I/N with 0 <= I < N (shard I of N, as Slurm's "
                                 "SLURM_ARRAY_TASK_ID of --array=0-(N-1))",
                                 flag, text));
  return SweepShard{index, count};
}

namespace {

// The points' profiles whose calibration met the host in two states, each
// once: "PROFILE: SENTENCE" from the summaries' config.cost_model (the
// points' own stderr, where simulate says it, is not shown).
std::set<std::string> unsteady_calibrations(const std::vector<Point>& points) {
  std::set<std::string> found;
  using Pointer = nlohmann::json::json_pointer;
  for (const Point& p : points) {
    if (!p.outcome.ok) continue;
    // Just the two strings, not a copy of each point's whole config.
    const nlohmann::json warning =
        p.outcome.summary.value(Pointer("/config/cost_model/calibration_warning"), nlohmann::json());
    if (!warning.is_string()) continue;
    const nlohmann::json profile = p.outcome.summary.value(Pointer("/config/cost_model/profile"), nlohmann::json());
    found.insert((profile.is_string() ? profile.get<std::string>() : "the profile") + ": " +
                 warning.get<std::string>());
  }
  return found;
}

}  // namespace

int finish_sweep(const std::vector<GridAxis>& axes, const std::vector<std::string>& base,
                 const Objective& objective, const std::vector<Constraint>& constraints, std::vector<Point>& points,
                 const std::string& out_dir, bool json) {
  std::vector<PointOutcome> outcomes;
  for (Point& p : points) outcomes.push_back(std::move(p.outcome));
  const std::vector<size_t> ranking = rank_points(outcomes, objective, constraints);
  for (size_t i = 0; i < points.size(); ++i) points[i].outcome = std::move(outcomes[i]);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw InputError(fmt::format("--out: cannot create folder '{}': {}", out_dir, ec.message()));
  const nlohmann::json report = sweep_json(axes, base, objective, constraints, points, ranking);
  write_file(std::filesystem::path(out_dir) / "sweep.csv", sweep_csv(axes, points));
  write_file(std::filesystem::path(out_dir) / "sweep.json", report.dump(2) + "\n");
  if (json)
    std::cout << report.dump(2) << "\n";
  else
    print_table(axes, objective, constraints, points, ranking, out_dir);
  std::cout.flush();
  for (const std::string& unsteady : unsteady_calibrations(points))
    std::fprintf(stderr, "sweep: warning: %s\n", unsteady.c_str());

  const size_t failed =
      size_t(std::count_if(points.begin(), points.end(), [](const Point& p) { return !p.outcome.ok; }));
  if (failed == points.size()) {
    // Not bad input (the first point would have said so): every run failed.
    std::fprintf(stderr, "servesim sweep: error: every point failed; the first: %s\n", points[0].error.c_str());
    return 1;
  }
  if (failed > 0)
    std::fprintf(stderr, "sweep: %zu of %zu points failed; see the error column of %s/sweep.csv\n", failed,
                 points.size(), out_dir.c_str());
  return 0;
}

int finish_shard(const std::vector<GridAxis>& axes, const std::vector<std::string>& base,
                 const Objective& objective, const std::vector<Constraint>& constraints,
                 const std::vector<Point>& grid, const SweepShard& shard, const std::string& out_dir, bool json) {
  std::vector<Point> mine;
  std::vector<size_t> indices;
  for (size_t i = 0; i < grid.size(); ++i)
    if (shard.holds(i)) {
      mine.push_back(grid[i]);
      indices.push_back(i);
    }
  std::vector<PointOutcome> outcomes;
  for (Point& p : mine) outcomes.push_back(std::move(p.outcome));
  const std::vector<size_t> ranking = rank_points(outcomes, objective, constraints);
  for (size_t i = 0; i < mine.size(); ++i) mine[i].outcome = std::move(outcomes[i]);
  nlohmann::json report = sweep_json(axes, base, objective, constraints, mine, ranking);
  for (size_t i = 0; i < mine.size(); ++i) report["points"][i]["index"] = indices[i];
  report["shard"] = {{"index", shard.index},
                     {"count", shard.count},
                     {"grid_points", grid.size()},
                     {"points", indices},
                     {"meaning", "one shard of a sweep: `servesim sweep merge` joins every shard's folder into "
                                 "the sweep.csv and sweep.json of the whole grid; ranking here is within the "
                                 "shard"}};
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw InputError(fmt::format("--out: cannot create folder '{}': {}", out_dir, ec.message()));
  write_file(std::filesystem::path(out_dir) / "sweep.csv", sweep_csv(axes, mine));
  write_file(std::filesystem::path(out_dir) / "sweep.json", report.dump(2) + "\n");
  if (json) std::cout << report.dump(2) << "\n";
  else
    std::cout << fmt::format("sweep: shard {}/{}: {} of {} points; join the shards with `servesim sweep merge "
                             "DIR...` (this one: {})\n",
                             shard.index, shard.count, mine.size(), grid.size(), out_dir);
  const bool all_failed = std::none_of(mine.begin(), mine.end(), [](const Point& p) { return p.outcome.ok; });
  return !mine.empty() && all_failed ? 1 : 0;
}

}  // namespace servesim::cli
