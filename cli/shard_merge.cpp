#include "cli/shard_merge.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include <fmt/format.h>

#include "cli/common_options.h"
#include "sim/errors.h"

namespace servesim::cli {

std::optional<MergeFlags> parse_merge_flags(int argc, const char* const* argv, const std::string& command,
                                            const std::string& outputs, const std::string& default_out) {
  po::options_description o(fmt::format("servesim {0} merge: join the shards of a {0} (`{0} ... --shard I/N`) into "
                                        "the outputs of the whole grid\n\nusage: servesim {0} merge [--out DIR] "
                                        "DIR...\n\nOptions",
                                        command),
                            kHelpWidth);
  o.add_options()
      ("help,h", "show this help")
      ("out", po::value<std::string>()->default_value(default_out), ("write " + outputs + " here").c_str())
      ("json", "print the merged JSON to stdout instead of the table")
      ("shards", po::value<std::vector<std::string>>(), "the shards' --out folders (positional)");
  po::positional_options_description positional;
  positional.add("shards", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(o).positional(positional).style(kFlagStyle).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(e.what());
  }
  if (vm.count("help")) {
    std::cout << o << "\nEvery shard 0 .. N-1 of one " << command
              << " must be given once; shards of another one (other flags or shard count) are refused by name.\n";
    return std::nullopt;
  }
  if (!vm.count("shards")) throw InputError(fmt::format("give the shards' folders: servesim {} merge DIR...", command));
  return MergeFlags{vm["out"].as<std::string>(), vm.count("json") > 0, vm["shards"].as<std::vector<std::string>>()};
}

nlohmann::json read_shard_file(const std::string& dir, const std::string& file, const std::string& what) {
  const std::filesystem::path path = std::filesystem::path(dir) / file;
  std::ifstream in(path);
  if (!in)
    throw InputError(fmt::format("{}: cannot read (a shard's --out folder holds {})", path.string(), file));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
  if (!j.is_object() || !j.contains("shard")) throw InputError(fmt::format("{}: not {}", path.string(), what));
  return j;
}

void check_shard_set(const std::vector<std::string>& dirs, const std::vector<nlohmann::json>& identities,
                     const std::vector<size_t>& indices, size_t count, const std::string& run) {
  std::set<size_t> seen;
  for (size_t i = 0; i < dirs.size(); ++i) {
    for (const auto& [key, value] : identities[0].items())
      if (identities[i][key] != value)
        throw InputError(fmt::format("{} is a shard of another {} than {}: its {} differs ({} vs {})", dirs[i], run,
                                     dirs[0], key, identities[i][key].dump(), value.dump()));
    if (!seen.insert(indices[i]).second)
      throw InputError(fmt::format("shard {}/{} is given twice ({})", indices[i], count, dirs[i]));
  }
  for (size_t k = 0; k < count; ++k)
    if (!seen.count(k))
      throw InputError(fmt::format("shard {}/{} is missing: give every shard 0 .. {} once", k, count, count - 1));
}

}  // namespace servesim::cli
