// `servesim sweep merge DIR...`: joins the folders of a sweep's shards
// (`sweep --shard I/N`, one per cluster task) into the sweep.csv and
// sweep.json that one machine running the whole grid writes, byte for byte:
// the points are put back in grid order and ranked over all of them.

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/shard_merge.h"
#include "cli/sweep_output.h"
#include "sim/errors.h"

namespace servesim::cli {
namespace {

// What every shard of one sweep shares: the grid, the simulate flags, the
// objective and constraints, the shard count.
nlohmann::json identity(const nlohmann::json& j) {
  return {{"grid", j["grid"]}, {"base_args", j["base_args"]}, {"objective", j["objective"]},
          {"constraints", j["constraints"]}, {"count", j["shard"]["count"]},
          {"grid_points", j["shard"]["grid_points"]}};
}

}  // namespace

int sweep_merge_command(int argc, const char* const* argv) {
  const std::optional<MergeFlags> flags =
      parse_merge_flags(argc, argv, "sweep", "sweep.csv and sweep.json", "runs/sweep");
  if (!flags) return 0;
  const std::vector<std::string>& dirs = flags->dirs;
  std::vector<nlohmann::json> shards, identities;
  std::vector<size_t> indices;
  for (const std::string& d : dirs) {
    shards.push_back(read_shard_file(d, "sweep.json", "the sweep.json of a shard (`servesim sweep --shard I/N`)"));
    if (!shards.back().contains("points") || !shards.back().contains("grid"))
      throw InputError(fmt::format("{}/sweep.json: not the sweep.json of a shard", d));
    identities.push_back(identity(shards.back()));
    indices.push_back(shards.back()["shard"]["index"].get<size_t>());
  }
  const nlohmann::json& first = identities[0];
  const size_t count = first["count"].get<size_t>(), total = first["grid_points"].get<size_t>();
  check_shard_set(dirs, identities, indices, count, "sweep");

  std::vector<GridAxis> axes;
  for (const auto& a : first["grid"]) axes.push_back({a["flag"].get<std::string>(),
                                                     a["values"].get<std::vector<std::string>>()});
  const Objective objective = parse_objective(first["objective"]["name"].get<std::string>());
  std::vector<Constraint> constraints;
  for (const auto& c : first["constraints"]) constraints.push_back(parse_constraint(c.get<std::string>()));
  const auto base = first["base_args"].get<std::vector<std::string>>();

  std::vector<Point> points(total);
  std::vector<bool> filled(total, false);
  for (size_t i = 0; i < shards.size(); ++i)
    for (const auto& pj : shards[i]["points"]) {
      const size_t index = pj["index"].get<size_t>();
      if (index >= total || filled[index])
        throw InputError(fmt::format("{}: point {} is out of the grid or in two shards", dirs[i], index));
      filled[index] = true;
      Point& p = points[index];
      for (const GridAxis& a : axes) p.values.push_back(pj["values"][a.flag].get<std::string>());
      p.args = pj["args"].get<std::vector<std::string>>();
      if (pj.contains("summary")) {
        p.outcome.ok = true;
        p.outcome.summary = pj["summary"];
      } else {
        p.error = pj.value("error", std::string());
        p.exit_code = pj.value("exit_code", 1);
      }
    }
  for (size_t i = 0; i < total; ++i)
    if (!filled[i]) throw InputError(fmt::format("point {} of {} is in no shard", i, total));
  return finish_sweep(axes, base, objective, constraints, points, flags->out, flags->json);
}

}  // namespace servesim::cli
