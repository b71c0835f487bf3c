// `servesim sweep`'s points and what it writes of them: sweep.csv,
// sweep.json and the table on stdout (docs/outputs.md).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/sweep_grid.h"

namespace servesim::cli {

// One point of the grid: its values, the simulate arguments it runs with,
// and what came of it.
struct Point {
  std::vector<std::string> values;  // one per axis
  std::vector<std::string> args;    // simulate's arguments
  PointOutcome outcome;
  int exit_code = 0;  // simulate's; 1 where it could not start or printed no summary
  std::string error;  // why it failed: the first line simulate wrote to stderr
};

// "ok", "infeasible" or "error".
std::string status_of(const Point& p);

// sweep.csv: one row per point in grid order.
std::string sweep_csv(const std::vector<GridAxis>& axes, const std::vector<Point>& points);
// sweep.json: the grid, the simulate flags, objective, constraints, every
// point's arguments and full summary, and the ranking.
nlohmann::json sweep_json(const std::vector<GridAxis>& axes, const std::vector<std::string>& base,
                          const Objective& objective, const std::vector<Constraint>& constraints,
                          const std::vector<Point>& points, const std::vector<size_t>& ranking);
// The table on stdout: the ranked points best first (at most 20 rows), then
// the best point and where the outputs are.
void print_table(const std::vector<GridAxis>& axes, const Objective& objective,
                 const std::vector<Constraint>& constraints, const std::vector<Point>& points,
                 const std::vector<size_t>& ranking, const std::string& out_dir);
// Throws InputError when the file cannot be written.
void write_file(const std::filesystem::path& path, const std::string& text);

}  // namespace servesim::cli
