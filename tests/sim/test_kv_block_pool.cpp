// The paged KV cache's bookkeeping: growth, release, failure atomicity, peak
// tracking and the uniqueness of block ids across live tables.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "sim/errors.h"
#include "sim/kv_block_pool.h"

using servesim::InputError;
using servesim::KvBlockPool;

namespace {

// Every id of every table is in range and no id appears twice; the live
// tables hold exactly the blocks the manager counts as used.
void check_tables(const KvBlockPool& kv, const std::vector<std::vector<int32_t>>& tables) {
  std::set<int32_t> seen;
  size_t total = 0;
  for (const auto& t : tables) {
    for (int32_t id : t) {
      REQUIRE(id >= 0);
      REQUIRE(id < kv.num_blocks());
      seen.insert(id);
    }
    total += t.size();
  }
  REQUIRE(seen.size() == total);  // no block in two tables (or twice in one)
  REQUIRE(int64_t(total) == kv.num_used());
  REQUIRE(kv.num_used() + kv.num_free() == kv.num_blocks());
}

}  // namespace

TEST_CASE("blocks_for rounds up to whole blocks", "[kv]") {
  KvBlockPool kv(100, 16);
  CHECK(kv.block_size() == 16);
  CHECK(kv.num_blocks() == 100);
  CHECK(kv.blocks_for(1) == 1);
  CHECK(kv.blocks_for(15) == 1);
  CHECK(kv.blocks_for(16) == 1);
  CHECK(kv.blocks_for(17) == 2);
  CHECK(kv.blocks_for(32) == 2);
  CHECK(kv.blocks_for(33) == 3);
  CHECK(kv.blocks_for(1000) == 63);  // ceil(1000 / 16) = 62.5 -> 63
}

TEST_CASE("grow_to and release keep the free count in step", "[kv]") {
  KvBlockPool kv(20, 4);
  CHECK(kv.num_free() == 20);
  CHECK(kv.num_used() == 0);

  std::vector<int32_t> a;
  REQUIRE(kv.grow_to(a, 10));  // ceil(10 / 4) = 3 blocks
  CHECK(a.size() == 3);
  CHECK(kv.num_used() == 3);
  CHECK(kv.num_free() == 17);

  // Growing to fewer tokens, or within the last block, takes nothing.
  REQUIRE(kv.grow_to(a, 5));
  REQUIRE(kv.grow_to(a, 12));
  CHECK(a.size() == 3);
  CHECK(kv.num_used() == 3);

  // One token past the last block takes exactly one more; existing ids stay.
  const std::vector<int32_t> before = a;
  REQUIRE(kv.grow_to(a, 13));
  REQUIRE(a.size() == 4);
  CHECK(std::vector<int32_t>(a.begin(), a.begin() + 3) == before);
  CHECK(kv.num_used() == 4);

  // Growing token by token adds a block every block_size tokens.
  std::vector<int32_t> b;
  for (int64_t tokens = 1; tokens <= 24; ++tokens) {
    REQUIRE(kv.grow_to(b, tokens));
    CHECK(int64_t(b.size()) == (tokens + 3) / 4);
  }
  CHECK(kv.num_used() == 4 + 6);
  check_tables(kv, {a, b});

  kv.release(a);
  CHECK(a.empty());
  CHECK(kv.num_used() == 6);
  CHECK(kv.num_free() == 14);
  kv.release(b);
  CHECK(b.empty());
  CHECK(kv.num_used() == 0);
  CHECK(kv.num_free() == 20);
}

TEST_CASE("A failed grow_to changes nothing", "[kv]") {
  KvBlockPool kv(10, 8);
  std::vector<int32_t> a, b;
  REQUIRE(kv.grow_to(a, 8 * 6));  // 6 blocks
  REQUIRE(kv.grow_to(b, 8 * 3));  // 3 blocks: 1 left
  const int64_t peak = kv.peak_used();
  const std::vector<int32_t> b_before = b;

  // b needs 2 more blocks for 5 * 8 tokens; only 1 is free.
  CHECK_FALSE(kv.grow_to(b, 8 * 5));
  CHECK(b == b_before);
  CHECK(kv.num_free() == 1);
  CHECK(kv.num_used() == 9);
  CHECK(kv.peak_used() == peak);

  // A fresh table asking for more than is free gets nothing either.
  std::vector<int32_t> c;
  CHECK_FALSE(kv.grow_to(c, 17));
  CHECK(c.empty());
  CHECK(kv.num_free() == 1);

  // The one free block is still there to take.
  REQUIRE(kv.grow_to(b, 8 * 4));
  CHECK(b.size() == 4);
  CHECK(kv.num_free() == 0);
  check_tables(kv, {a, b, c});
}

TEST_CASE("peak_used is the most blocks ever held at once", "[kv]") {
  KvBlockPool kv(50, 16);
  std::vector<int32_t> a, b;
  REQUIRE(kv.grow_to(a, 16 * 7));
  REQUIRE(kv.grow_to(b, 16 * 5));
  CHECK(kv.peak_used() == 12);
  kv.release(a);
  CHECK(kv.num_used() == 5);
  CHECK(kv.peak_used() == 12);  // a release never lowers the peak
  REQUIRE(kv.grow_to(a, 16 * 3));
  CHECK(kv.peak_used() == 12);  // 8 in use now: below the old peak
  REQUIRE(kv.grow_to(a, 16 * 10));
  CHECK(kv.num_used() == 15);
  CHECK(kv.peak_used() == 15);
}

TEST_CASE("Released blocks are handed out again and ids stay unique", "[kv]") {
  KvBlockPool kv(12, 2);
  std::vector<int32_t> a, b, c;
  REQUIRE(kv.grow_to(a, 2 * 5));
  REQUIRE(kv.grow_to(b, 2 * 7));
  CHECK(kv.num_free() == 0);  // every block is held
  check_tables(kv, {a, b, c});

  const std::set<int32_t> freed(a.begin(), a.end());
  kv.release(a);
  REQUIRE(kv.grow_to(c, 2 * 5));
  // With nothing else free, c gets exactly the blocks a gave back.
  CHECK(std::set<int32_t>(c.begin(), c.end()) == freed);
  check_tables(kv, {a, b, c});
}

TEST_CASE("Random grow and release never share or leak a block", "[kv]") {
  const int64_t num_blocks = 64;
  KvBlockPool kv(num_blocks, 16);
  std::vector<std::vector<int32_t>> tables(8);
  std::vector<int64_t> tokens(8, 0);
  std::mt19937_64 rng(2024);
  int64_t failures = 0, grows = 0, releases = 0;
  for (int step = 0; step < 5000; ++step) {
    const size_t t = size_t(rng() % tables.size());
    if (rng() % 5 == 0) {
      kv.release(tables[t]);
      tokens[t] = 0;
      ++releases;
    } else {
      const int64_t want = tokens[t] + int64_t(rng() % 100);
      const int64_t free_before = kv.num_free();
      const size_t size_before = tables[t].size();
      const int64_t need = kv.blocks_for(want) - int64_t(size_before);
      if (kv.grow_to(tables[t], want)) {
        tokens[t] = want;
        ++grows;
        REQUIRE(int64_t(tables[t].size()) ==
                std::max<int64_t>(kv.blocks_for(want), int64_t(size_before)));
        REQUIRE(kv.num_free() == free_before - std::max<int64_t>(need, 0));
      } else {
        ++failures;
        REQUIRE(need > free_before);  // it fails only when blocks are short
        REQUIRE(tables[t].size() == size_before);
        REQUIRE(kv.num_free() == free_before);
      }
    }
    check_tables(kv, tables);
    REQUIRE(kv.peak_used() >= kv.num_used());
    REQUIRE(kv.peak_used() <= num_blocks);
  }
  // The walk exercised every path.
  CHECK(failures > 0);
  CHECK(grows > 0);
  CHECK(releases > 0);
  CHECK(kv.peak_used() == num_blocks);
  for (auto& t : tables) kv.release(t);
  CHECK(kv.num_free() == num_blocks);
}

TEST_CASE("KvBlockPool rejects a bad size", "[kv]") {
  CHECK_THROWS_AS(KvBlockPool(0, 16), InputError);
  CHECK_THROWS_AS(KvBlockPool(-5, 16), InputError);
  CHECK_THROWS_AS(KvBlockPool(10, 0), InputError);
  CHECK_THROWS_AS(KvBlockPool(int64_t(1) << 31, 16), InputError);
}
