// The prefix cache's open-addressing index against std::unordered_map under
// random inserts, replacements and removals, with colliding keys (keys that
// share their low bits probe the same run).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "sim/block_key_index.h"

using servesim::BlockKeyIndex;

TEST_CASE("Block key index: agrees with std::unordered_map under random use", "[prefix]") {
  std::mt19937_64 rng(5);
  for (int64_t n : {1, 7, 100, 1000}) {
    BlockKeyIndex idx(n);
    std::unordered_map<uint64_t, int32_t> ref;
    std::vector<uint64_t> keys;
    for (int step = 0; step < 20000; ++step) {
      // Few distinct low bits: long probe runs, wrap-around, backward shifts.
      const uint64_t key = (rng() % 64) | (uint64_t(rng() % 8) << 40);
      const int32_t block = int32_t(rng() % uint64_t(n));
      switch (rng() % 3) {
        case 0:
          if (int64_t(ref.size()) < n) {
            auto [it, inserted] = ref.try_emplace(key, block);
            REQUIRE(idx.insert(key, block) == it->second);
          }
          break;
        case 1: {
          auto it = ref.find(key);
          const bool stored = it != ref.end() && it->second == block;
          const int32_t next = rng() % 2 ? -1 : int32_t(rng() % uint64_t(n));
          REQUIRE(idx.replace_if(key, block, next) == stored);
          if (stored) {
            if (next < 0) ref.erase(it);
            else it->second = next;
          }
          break;
        }
        default: {
          auto it = ref.find(key);
          REQUIRE(idx.find(key) == (it == ref.end() ? -1 : it->second));
        }
      }
      REQUIRE(idx.size() == ref.size());
    }
    for (const auto& [k, b] : ref) CHECK(idx.find(k) == b);
  }
}
