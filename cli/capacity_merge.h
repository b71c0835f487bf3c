// `servesim capacity merge DIR...`: joins the folders of a capacity search's
// shards (`capacity --search --shard I/N`) into the search.csv and
// capacity.json that one machine searching the whole grid writes, byte for
// byte (the Pareto fronts recomputed over every point).
#pragma once

#include <string>

namespace servesim::cli {

int capacity_merge_command(int argc, const char* const* argv);

// The arguments of `capacity` that decide its results, as one string: argv
// without --shard, --out, --json, --quiet and --jobs (and their values).
// Shards of one search have the same.
std::string search_identity(int argc, const char* const* argv);

}  // namespace servesim::cli
