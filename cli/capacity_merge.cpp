#include "cli/capacity_merge.h"

#include <filesystem>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/shard_merge.h"
#include "cli/sweep_output.h"
#include "engine/capacity_search.h"
#include "sim/errors.h"

namespace servesim::cli {
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
  const std::optional<MergeFlags> flags =
      parse_merge_flags(argc, argv, "capacity", "search.csv and capacity.json", "runs/capacity");
  if (!flags) return 0;
  const std::vector<std::string>& dirs = flags->dirs;
  std::vector<nlohmann::json> shards, identities;
  std::vector<size_t> indices;
  for (const std::string& d : dirs) {
    shards.push_back(read_shard_file(d, "capacity.json",
                                     "the capacity.json of a search's shard (`servesim capacity --search --shard I/N`)"));
    const nlohmann::json& s = shards.back()["shard"];
    identities.push_back({{"command", s["command"]}, {"count", s["count"]}, {"grid_points", s["grid_points"]},
                          {"attainment_target", shards.back()["attainment_target"]}});
    indices.push_back(s["index"].get<size_t>());
  }
  const size_t count = identities[0]["count"].get<size_t>(), total = identities[0]["grid_points"].get<size_t>();
  check_shard_set(dirs, identities, indices, count, "search");

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
  const std::filesystem::path out = flags->out;
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw InputError(fmt::format("--out: cannot create folder '{}': {}", out.string(), ec.message()));
  write_file(out / "search.csv", csv.str());
  write_file(out / "capacity.json", j.dump(2) + "\n");
  if (flags->json)
    std::cout << j.dump(2) << "\n";
  else
    std::cout << "servesim capacity merge: " << shards.size() << " shards, " << total << " points\n" << csv.str();
  return 0;
}

}  // namespace servesim::cli
