#include "cli/capacity_merge.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common_options.h"
#include "cli/sweep_output.h"
#include "engine/capacity_search.h"
#include "sim/errors.h"

namespace servesim::cli {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_shard(const std::string& dir) {
  const fs::path path = fs::path(dir) / "capacity.json";
  std::ifstream in(path);
  if (!in)
    throw InputError(fmt::format("{}: cannot read (a shard's --out folder holds capacity.json)", path.string()));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
  if (!j.is_object() || !j.contains("shard") || !j.contains("search"))
    throw InputError(
        fmt::format("{}: not the capacity.json of a search's shard (`servesim capacity --search --shard I/N`)",
                    path.string()));
  return j;
}

}  // namespace

std::string search_identity(int argc, const char* const* argv) {
  static const char* const kWithValue[] = {"--shard", "--out", "--jobs"};
  static const char* const kSwitches[] = {"--json", "--quiet", "-q"};
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    bool skip = false;
    for (const char* f : kSwitches) skip = skip || arg == f;
    for (const char* f : kWithValue) {
      if (arg == f) {
        skip = true;
        ++i;  // its value
      } else if (arg.rfind(std::string(f) + "=", 0) == 0) {
        skip = true;
      }
    }
    if (!skip) out += (out.empty() ? "" : " ") + arg;
  }
  return out;
}

int capacity_merge_command(int argc, const char* const* argv) {
  po::options_description o("servesim capacity merge: join the shards of a capacity search (`capacity --search "
                            "--shard I/N`) into the outputs of the whole grid\n\nusage: servesim capacity merge "
                            "[--out DIR] DIR...\n\nOptions",
                            kHelpWidth);
  o.add_options()
      ("help,h", "show this help")
      ("out", po::value<std::string>()->default_value("runs/capacity"), "write search.csv and capacity.json here")
      ("json", "print capacity.json to stdout instead of search.csv")
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
    std::cout << o << "\nEvery shard 0 .. N-1 of one search must be given once; shards of different searches "
                      "(other flags) or shard counts are refused.\n";
    return 0;
  }
  if (!vm.count("shards")) throw InputError("give the shards' folders: servesim capacity merge DIR...");
  const auto dirs = vm["shards"].as<std::vector<std::string>>();
  std::vector<nlohmann::json> shards;
  for (const std::string& d : dirs) shards.push_back(read_shard(d));
  const nlohmann::json& first = shards[0]["shard"];
  const size_t count = first["count"].get<size_t>(), total = first["grid_points"].get<size_t>();
  std::set<size_t> seen;
  for (size_t i = 0; i < shards.size(); ++i) {
    const nlohmann::json& s = shards[i]["shard"];
    for (const char* key : {"command", "count", "grid_points"})
      if (s[key] != first[key])
        throw InputError(fmt::format("{} is a shard of another search than {}: its {} differs ({} vs {})", dirs[i],
                                     dirs[0], key, s[key].dump(), first[key].dump()));
    if (shards[i]["attainment_target"] != shards[0]["attainment_target"])
      throw InputError(fmt::format("{} and {} differ in --slo-attainment", dirs[i], dirs[0]));
    if (!seen.insert(s["index"].get<size_t>()).second)
      throw InputError(fmt::format("shard {}/{} is given twice ({})", s["index"].get<size_t>(), count, dirs[i]));
  }
  for (size_t k = 0; k < count; ++k)
    if (!seen.count(k))
      throw InputError(fmt::format("shard {}/{} is missing: give every shard 0 .. {} once", k, count, count - 1));

  std::vector<nlohmann::json> by_index(total);
  for (size_t i = 0; i < shards.size(); ++i)
    for (const nlohmann::json& row : shards[i]["search"]) {
      const size_t index = row["index"].get<size_t>();
      if (index >= total || !by_index[index].is_null())
        throw InputError(fmt::format("{}: point {} is out of the grid or in two shards", dirs[i], index));
      by_index[index] = row;
    }
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < total; ++i) {
    if (by_index[i].is_null()) throw InputError(fmt::format("point {} of {} is in no shard", i, total));
    rows.push_back(std::move(by_index[i]));
  }
  mark_pareto(rows);
  std::ostringstream csv;
  write_search_csv(csv, rows);
  const nlohmann::json j = {{"search", rows}, {"attainment_target", shards[0]["attainment_target"]}};
  const fs::path out = vm["out"].as<std::string>();
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw InputError(fmt::format("--out: cannot create folder '{}': {}", out.string(), ec.message()));
  write_file(out / "search.csv", csv.str());
  write_file(out / "capacity.json", j.dump(2) + "\n");
  if (vm.count("json"))
    std::cout << j.dump(2) << "\n";
  else
    std::cout << "servesim capacity merge: " << shards.size() << " shards, " << total << " points\n" << csv.str();
  return 0;
}

}  // namespace servesim::cli
