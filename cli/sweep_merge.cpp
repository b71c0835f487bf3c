// `servesim sweep merge DIR...`: joins the folders of a sweep's shards
// (`sweep --shard I/N`, one per cluster task) into the sweep.csv and
// sweep.json that one machine running the whole grid writes, byte for byte:
// the points are put back in grid order and ranked over all of them.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/sweep_output.h"
#include "sim/errors.h"

namespace servesim::cli {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_shard(const std::string& dir) {
  const fs::path path = fs::path(dir) / "sweep.json";
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot read (a shard's --out folder holds sweep.json)", path.string()));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
  if (!j.is_object() || !j.contains("shard") || !j.contains("points") || !j.contains("grid"))
    throw InputError(fmt::format("{}: not the sweep.json of a shard (`servesim sweep --shard I/N`)", path.string()));
  return j;
}

// What every shard of one sweep shares: the grid, the simulate flags, the objective and constraints.
nlohmann::json identity(const nlohmann::json& j) {
  return {{"grid", j["grid"]}, {"base_args", j["base_args"]}, {"objective", j["objective"]},
          {"constraints", j["constraints"]}, {"count", j["shard"]["count"]},
          {"grid_points", j["shard"]["grid_points"]}};
}

}  // namespace

int sweep_merge_command(int argc, const char* const* argv) {
  po::options_description o("servesim sweep merge: join the shards of a sweep (`sweep --shard I/N`) into "
                            "the outputs of the whole grid\n\nusage: servesim sweep merge [--out DIR] DIR...\n\n"
                            "Options", kHelpWidth);
  o.add_options()
      ("help,h", "show this help")
      ("out", po::value<std::string>()->default_value("runs/sweep"), "write sweep.csv and sweep.json here")
      ("json", "print sweep.json to stdout instead of the table")
      ("shards", po::value<std::vector<std::string>>(), "the shards' --out folders (positional)");
  po::positional_options_description positional;
  positional.add("shards", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(o).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(e.what());
  }
  if (vm.count("help")) {
    std::cout << o << "\nEvery shard 0 .. N-1 of one sweep must be given once; shards of different grids, "
                      "simulate flags, objectives or shard counts are refused by name.\n";
    return 0;
  }
  if (!vm.count("shards")) throw InputError("give the shards' folders: servesim sweep merge DIR...");
  const auto dirs = vm["shards"].as<std::vector<std::string>>();

  std::vector<nlohmann::json> shards;
  for (const std::string& d : dirs) shards.push_back(read_shard(d));
  const nlohmann::json first = identity(shards[0]);
  const size_t count = first["count"].get<size_t>(), total = first["grid_points"].get<size_t>();
  std::set<size_t> seen_shards;
  for (size_t i = 0; i < shards.size(); ++i) {
    const nlohmann::json mine = identity(shards[i]);
    for (const char* key : {"grid", "base_args", "objective", "constraints", "count", "grid_points"})
      if (mine[key] != first[key])
        throw InputError(fmt::format("{} is a shard of another sweep than {}: its {} differs ({} vs {})", dirs[i],
                                     dirs[0], key, mine[key].dump(), first[key].dump()));
    const size_t index = shards[i]["shard"]["index"].get<size_t>();
    if (!seen_shards.insert(index).second)
      throw InputError(fmt::format("shard {}/{} is given twice ({})", index, count, dirs[i]));
  }
  for (size_t k = 0; k < count; ++k)
    if (!seen_shards.count(k))
      throw InputError(fmt::format("shard {}/{} is missing: give every shard 0 .. {} once", k, count, count - 1));

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
  return finish_sweep(axes, base, objective, constraints, points, vm["out"].as<std::string>(), vm.count("json") > 0);
}

}  // namespace servesim::cli
