// The prefix cache's bucketed index against std::unordered_map under random
// inserts, hand-overs and removals, with colliding keys (keys that share
// their low bits share a fingerprint, so the full-key check decides); keys
// that overflow their bucket, wrapping around the table; and the SSE2
// comparison of a bucket against the plain one.
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

namespace {

// Keys whose search starts at bucket `home` of `idx`, found by trying.
std::vector<uint64_t> keys_homed_at(const BlockKeyIndex& idx, size_t home, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys;
  while (keys.size() < count) {
    const uint64_t k = rng();
    if (idx.home(k) == home) keys.push_back(k);
  }
  return keys;
}

}  // namespace

TEST_CASE("Block key index: keys past a full bucket live in the next ones, wrapping around, and stay findable",
          "[prefix]") {
  const int64_t n = 64;
  BlockKeyIndex idx(n);
  REQUIRE(idx.num_buckets() == 16);
  const size_t last = idx.num_buckets() - 1;
  // 40 keys of the last bucket: it holds 15, the first two buckets the rest.
  const std::vector<uint64_t> keys = keys_homed_at(idx, last, 40, 1);
  auto key_of = [&](int32_t b) { return keys[size_t(b)]; };
  for (int32_t b = 0; b < 40; ++b) REQUIRE(idx.insert(keys[size_t(b)], b, key_of) == b);
  CHECK(idx.size() == 40);
  CHECK(idx.overflow_of(last) == 25);  // every key beyond it passed it
  CHECK(idx.overflow_of(0) == 10);     // 15 of those 25 stopped in bucket 0
  CHECK(idx.overflow_of(1) == 0);
  for (int32_t b = 0; b < 40; ++b) CHECK(idx.find(keys[size_t(b)], key_of) == b);
  // An absent key of the same home is searched for through all three.
  const uint64_t absent = keys_homed_at(idx, last, 41, 1)[40];
  CHECK(idx.find(absent, key_of) == -1);
  // Emptying the home bucket's entries keeps the others findable; a new key
  // then fills the room at home.
  for (int32_t b = 0; b < 15; ++b) REQUIRE(idx.replace_if(keys[size_t(b)], b, -1));
  CHECK(idx.overflow_of(last) == 25);  // those stored beyond still passed it
  for (int32_t b = 15; b < 40; ++b) CHECK(idx.find(keys[size_t(b)], key_of) == b);
  for (int32_t b = 0; b < 15; ++b) CHECK(idx.find(keys[size_t(b)], key_of) == -1);
  // Erasing the ones beyond counts them back.
  for (int32_t b = 15; b < 40; ++b) REQUIRE(idx.replace_if(keys[size_t(b)], b, -1));
  CHECK(idx.size() == 0);
  CHECK(idx.overflow_of(last) == 0);
  CHECK(idx.overflow_of(0) == 0);
  // A hand-over keeps the entry where it is: the new holder is found.
  REQUIRE(idx.insert(keys[0], 0, key_of) == 0);
  std::vector<uint64_t> moved = keys;
  moved[5] = keys[0];
  auto moved_key_of = [&](int32_t b) { return moved[size_t(b)]; };
  REQUIRE(idx.replace_if(keys[0], 0, 5));
  CHECK(idx.find(keys[0], moved_key_of) == 5);
  CHECK_FALSE(idx.replace_if(keys[0], 0, -1));  // 0 no longer holds it
}

TEST_CASE("Block key index: agrees with std::unordered_map when a few buckets take every key", "[prefix]") {
  std::mt19937_64 rng(9);
  const int64_t n = 100;  // 16 buckets of 15
  BlockKeyIndex idx(n);
  // 60 keys in two neighbouring buckets and 20 in the last (overflows wrap).
  std::vector<uint64_t> pool = keys_homed_at(idx, 3, 30, 2);
  for (uint64_t k : keys_homed_at(idx, 4, 30, 3)) pool.push_back(k);
  for (uint64_t k : keys_homed_at(idx, idx.num_buckets() - 1, 20, 4)) pool.push_back(k);
  std::unordered_map<uint64_t, int32_t> first;
  std::vector<uint64_t> key(size_t(n), 0);
  std::vector<bool> holds(size_t(n), false);
  auto key_of = [&](int32_t b) { return key[size_t(b)]; };
  for (int step = 0; step < 50000; ++step) {
    const uint64_t k = pool[rng() % pool.size()];
    const int32_t b = int32_t(rng() % uint64_t(n));
    if (rng() % 2 == 0) {
      if (holds[size_t(b)] || first.count(k)) continue;
      key[size_t(b)] = k;
      holds[size_t(b)] = true;
      first[k] = b;
      REQUIRE(idx.insert(k, b, key_of) == b);
    } else if (holds[size_t(b)]) {
      REQUIRE(idx.replace_if(key[size_t(b)], b, -1));
      first.erase(key[size_t(b)]);
      holds[size_t(b)] = false;
    }
    REQUIRE(idx.size() == first.size());
    auto it = first.find(k);
    REQUIRE(idx.find(k, key_of) == (it == first.end() ? -1 : it->second));
  }
  for (const auto& [k, b] : first) CHECK(idx.find(k, key_of) == b);
}

TEST_CASE("Block key index: the SSE2 comparison of a bucket's entries is the plain one", "[prefix]") {
  std::mt19937_64 rng(11);
  for (int t = 0; t < 20000; ++t) {
    std::vector<uint32_t> entries(BlockKeyIndex::kEntries);
    // Few distinct values, so that lanes match often.
    for (uint32_t& e : entries) e = uint32_t(rng() % 4) << (rng() % 2 ? 28 : 0) | uint32_t(rng() % 3);
    const uint32_t mask = rng() % 2 ? ~0u : (rng() % 2 ? 0xFFFu : 0xFFFFF000u);
    const uint32_t value = entries[rng() % entries.size()] & mask;
    REQUIRE(BlockKeyIndex::portable_match_agrees(entries, uint32_t(rng() % 3) * value, mask, value));
  }
}
