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

// One shard of a sweep (--shard I/N): the points whose grid index is I mod N.
struct SweepShard {
  size_t index = 0, count = 1;
  bool holds(size_t point) const { return point % count == index; }
};
// "I/N" with 0 <= I < N (Slurm's SLURM_ARRAY_TASK_ID of --array=0-(N-1));
// InputError naming `flag` otherwise.
SweepShard parse_shard(const std::string& text, const std::string& flag);

// The end of every sweep over the whole grid (one machine, or merged
// shards): ranks `points`, writes sweep.csv and sweep.json into `out_dir`,
// prints the table (or the JSON) and returns the exit status (1 when every
// point failed, else 0).
int finish_sweep(const std::vector<GridAxis>& axes, const std::vector<std::string>& base,
                 const Objective& objective, const std::vector<Constraint>& constraints, std::vector<Point>& points,
                 const std::string& out_dir, bool json);
// A shard's end: its points (with their grid indices) in sweep.json under
// "shard" {index, count, points}, for `servesim sweep merge`; sweep.csv of
// its own points, ranked among themselves.
int finish_shard(const std::vector<GridAxis>& axes, const std::vector<std::string>& base,
                 const Objective& objective, const std::vector<Constraint>& constraints,
                 const std::vector<Point>& grid, const SweepShard& shard, const std::string& out_dir, bool json);

}  // namespace servesim::cli
