// What `servesim sweep merge` and `servesim capacity merge` share: their
// flags, reading a shard's folder, and the checks that the shards given are
// one run's, each once.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace servesim::cli {

struct MergeFlags {
  std::string out;
  bool json = false;
  std::vector<std::string> dirs;  // the shards' --out folders
};

// `servesim COMMAND merge [--out DIR] [--json] DIR...`: nullopt after --help.
std::optional<MergeFlags> parse_merge_flags(int argc, const char* const* argv, const std::string& command,
                                            const std::string& outputs, const std::string& default_out);

// DIR/FILE as JSON with a "shard" object (InputError naming the path and
// `what` otherwise: a missing file, bad JSON, no shard).
nlohmann::json read_shard_file(const std::string& dir, const std::string& file, const std::string& what);

// identities[i] is what shard i must share with every other (compared key by
// key: the message names the key); indices[i] its shard index of `count`.
// InputError for a shard of another run, one given twice, or one missing.
void check_shard_set(const std::vector<std::string>& dirs, const std::vector<nlohmann::json>& identities,
                     const std::vector<size_t>& indices, size_t count, const std::string& run);

}  // namespace servesim::cli
