// The prefix cache's open-addressing index against std::unordered_map under
// random inserts, hand-overs and removals, with colliding keys (keys that
// share their low bits probe the same run, and some share all 32 low bits,
// so the full-key check decides).
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
    std::unordered_map<uint64_t, int32_t> first;  // key -> first holder, as the pool keeps it
    std::vector<uint64_t> key(size_t(n), 0);      // each block's key (what the pool's blocks keep)
    std::vector<bool> holds(size_t(n), false);
    auto key_of = [&](int32_t b) { return key[size_t(b)]; };
    for (int step = 0; step < 20000; ++step) {
      // Few distinct low bits: long probe runs, wrap-around, backward shifts;
      // high bits that differ behind equal low bits.
      const uint64_t k = (rng() % 64) | (uint64_t(rng() % 8) << 40);
      const int32_t b = int32_t(rng() % uint64_t(n));
      switch (rng() % 3) {
        case 0:  // a block without a key gets one and is offered to the index
          if (!holds[size_t(b)]) {
            key[size_t(b)] = k;
            holds[size_t(b)] = true;
            auto [it, inserted] = first.try_emplace(k, b);
            REQUIRE(idx.insert(k, b, key_of) == it->second);
            if (!inserted) holds[size_t(b)] = false;  // a duplicate: the pool chains it; here dropped
          }
          break;
        case 1: {  // a holder leaves: removed, or handed over to a free block
          if (!holds[size_t(b)]) break;
          const uint64_t kb = key[size_t(b)];
          const bool stored = first.at(kb) == b;
          REQUIRE(stored);
          int32_t next = -1;
          if (rng() % 2)
            for (int32_t c = 0; c < int32_t(n); ++c)
              if (!holds[size_t(c)]) {
                next = c;
                break;
              }
          REQUIRE(idx.replace_if(kb, b, next));
          holds[size_t(b)] = false;
          if (next >= 0) {
            key[size_t(next)] = kb;
            holds[size_t(next)] = true;
            first[kb] = next;
          } else {
            first.erase(kb);
          }
          // Not the holder: nothing happens.
          CHECK_FALSE(idx.replace_if(kb, b, -1));
          break;
        }
        default: {
          auto it = first.find(k);
          REQUIRE(idx.find(k, key_of) == (it == first.end() ? -1 : it->second));
        }
      }
      REQUIRE(idx.size() == first.size());
    }
    for (const auto& [k, b] : first) CHECK(idx.find(k, key_of) == b);
  }
}
