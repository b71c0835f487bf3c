// The block pool's prefix-cache rules (vLLM V1's block_pool.py): one free
// queue, new blocks from its head, freed blocks to its tail in reverse order,
// reference counts, lazy eviction, duplicate keys.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "sim/kv_block_pool.h"

using servesim::KvBlockPool;

TEST_CASE("Block pool: blocks come from the head of the free queue and go back to its tail, last block first",
          "[prefix][kv]") {
  KvBlockPool kv(6, 4);
  CHECK(kv.free_queue() == std::vector<int32_t>{0, 1, 2, 3, 4, 5});
  std::vector<int32_t> a, b;
  REQUIRE(kv.grow_to(a, 12));  // 0 1 2
  REQUIRE(kv.grow_to(b, 5));   // 3 4
  CHECK(a == std::vector<int32_t>{0, 1, 2});
  CHECK(b == std::vector<int32_t>{3, 4});
  kv.release(a);
  CHECK(kv.free_queue() == std::vector<int32_t>{5, 2, 1, 0});
  std::vector<int32_t> c;
  REQUIRE(kv.grow_to(c, 8));
  CHECK(c == std::vector<int32_t>{5, 2});
}

TEST_CASE("Block pool: a freed cached block stays findable until its slot is reused", "[prefix][kv]") {
  KvBlockPool kv(4, 4);
  std::vector<int32_t> a;
  REQUIRE(kv.grow_to(a, 8));  // 0 1
  kv.cache(a[0], 100);
  kv.cache(a[1], 101);
  CHECK(kv.num_cached() == 2);
  kv.release(a);  // queue: 2 3 1 0
  CHECK(kv.num_used() == 0);  // usage leaves free cached blocks out
  std::vector<int32_t> hit;
  kv.find_cached_prefix(std::vector<uint64_t>{100, 101, 102}, 3, hit);
  CHECK(hit == std::vector<int32_t>{0, 1});
  hit.clear();
  kv.find_cached_prefix(std::vector<uint64_t>{100, 101}, 1, hit);  // capped
  CHECK(hit == std::vector<int32_t>{0});

  // Two new blocks take 2 and 3 (never cached): nothing evicted.
  std::vector<int32_t> b;
  REQUIRE(kv.grow_to(b, 8));
  CHECK(kv.evicted_blocks() == 0);
  // The next takes 1 (the chain's last block): evicted, 0 survives.
  REQUIRE(kv.grow_to(b, 12));
  CHECK(b.back() == 1);
  CHECK(kv.evicted_blocks() == 1);
  CHECK_FALSE(kv.holds_key(1));
  hit.clear();
  kv.find_cached_prefix(std::vector<uint64_t>{100, 101}, 2, hit);
  CHECK(hit == std::vector<int32_t>{0});
}

TEST_CASE("Block pool: taking cached blocks counts references and takes free ones out of the queue",
          "[prefix][kv]") {
  KvBlockPool kv(5, 4);
  std::vector<int32_t> a;
  REQUIRE(kv.grow_to(a, 8));
  kv.cache(a[0], 7);
  kv.cache(a[1], 8);
  // A second sequence shares both while the first still holds them.
  std::vector<int32_t> b;
  CHECK(kv.count_free(a) == 0);
  kv.take_cached(a, b);
  CHECK(kv.ref_count(a[0]) == 2);
  CHECK(kv.num_used() == 2);
  kv.release(a);
  CHECK(kv.ref_count(b[0]) == 1);
  CHECK(kv.num_free() == 3);  // still held by b
  kv.release(b);
  CHECK(kv.num_free() == 5);
  // Now both are free and cached: taking them uses two free blocks.
  std::vector<int32_t> c;
  CHECK(kv.count_free(std::vector<int32_t>{0, 1}) == 2);
  kv.take_cached(std::vector<int32_t>{0, 1}, c);
  CHECK(kv.num_free() == 3);
  CHECK(kv.free_queue() == std::vector<int32_t>{2, 3, 4});
  kv.release(c);
}

TEST_CASE("Block pool: two blocks may hold one key, a lookup finds the older, eviction keeps the other",
          "[prefix][kv]") {
  KvBlockPool kv(4, 4);
  std::vector<int32_t> a, b;
  REQUIRE(kv.grow_to(a, 4));  // 0
  REQUIRE(kv.grow_to(b, 4));  // 1
  kv.cache(a[0], 55);
  kv.cache(b[0], 55);  // the same content computed twice at once
  CHECK(kv.num_cached() == 2);
  std::vector<int32_t> hit;
  kv.find_cached_prefix(std::vector<uint64_t>{55}, 1, hit);
  CHECK(hit == std::vector<int32_t>{0});
  kv.release(a);  // queue: 2 3 0
  std::vector<int32_t> c;
  REQUIRE(kv.grow_to(c, 12));  // takes 2 3 0: evicts 0's key
  CHECK(kv.evicted_blocks() == 1);
  hit.clear();
  kv.find_cached_prefix(std::vector<uint64_t>{55}, 1, hit);
  CHECK(hit == std::vector<int32_t>{1});  // the duplicate still holds it
  CHECK(kv.num_cached() == 1);
}

TEST_CASE("Block pool: caching a batch of blocks is caching each in turn", "[prefix][kv]") {
  // 40 blocks (more than the batch loads ahead), some keys twice, some
  // blocks already holding a key; two pools, one cached block by block.
  KvBlockPool batch(48, 4), each(48, 4);
  std::vector<int32_t> ta, tb;
  REQUIRE(batch.grow_to(ta, 160));
  REQUIRE(each.grow_to(tb, 160));
  REQUIRE(ta == tb);
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 40; ++i) keys.push_back(i % 7 == 3 ? 1000 + i / 2 : 1000 + i);
  batch.cache(ta[5], keys[5]);
  each.cache(tb[5], keys[5]);
  batch.cache(ta, keys);
  for (size_t i = 0; i < tb.size(); ++i) each.cache(tb[i], keys[i]);
  CHECK(batch.num_cached() == each.num_cached());
  for (uint64_t k : keys) {
    std::vector<int32_t> hit_batch, hit_each;
    batch.find_cached_prefix(std::vector<uint64_t>{k}, 1, hit_batch);
    each.find_cached_prefix(std::vector<uint64_t>{k}, 1, hit_each);
    CHECK(hit_batch == hit_each);
  }
  std::vector<uint64_t> short_keys(keys.begin(), keys.begin() + 3);
  CHECK_THROWS_AS(batch.cache(ta, short_keys), std::logic_error);  // one key a block
}

TEST_CASE("Block pool: misuse is a logic error, not silent corruption", "[prefix][kv]") {
  KvBlockPool kv(3, 4);
  std::vector<int32_t> a;
  REQUIRE(kv.grow_to(a, 4));
  std::vector<int32_t> copy = a;
  kv.release(a);
  CHECK_THROWS_AS(kv.release(copy), std::logic_error);    // freed twice
  CHECK_THROWS_AS(kv.cache(copy[0], 1), std::logic_error); // cached while free
  std::vector<int32_t> t;
  CHECK_THROWS_AS(kv.take_cached(copy, t), std::logic_error);  // holds no key
}

TEST_CASE("Block pool: anonymous blocks take their counts and queue places when the first one is cached",
          "[prefix][kv]") {
  // Until a block holds a key the pool keeps only its free queue (no block
  // is shared); caching the first one sets every block's reference count
  // and queue position from it, and the rules go on from there.
  KvBlockPool kv(8, 4);
  std::vector<int32_t> a, b, c;
  REQUIRE(kv.grow_to(a, 8));   // 0 1
  REQUIRE(kv.grow_to(b, 12));  // 2 3 4
  kv.release(a);
  kv.shrink_to(b, 8);  // 4 goes back
  CHECK(kv.free_queue() == std::vector<int32_t>{5, 6, 7, 1, 0, 4});
  CHECK(kv.num_free() == 6);
  CHECK(kv.ref_count(0) == 0);
  CHECK(kv.ref_count(2) == 1);
  kv.cache(b[0], 42);  // keys from now on
  CHECK(kv.ref_count(2) == 1);
  CHECK(kv.ref_count(4) == 0);
  CHECK(kv.free_queue() == std::vector<int32_t>{5, 6, 7, 1, 0, 4});
  REQUIRE(kv.grow_to(c, 4));  // 5
  kv.release(b);              // 3, then 2 (cached) to the tail
  CHECK(kv.free_queue() == std::vector<int32_t>{6, 7, 1, 0, 4, 3, 2});
  std::vector<int32_t> hit;
  kv.find_cached_prefix(std::vector<uint64_t>{42}, 1, hit);
  CHECK(hit == std::vector<int32_t>{2});
  std::vector<int32_t> d;
  kv.take_cached(hit, d);
  CHECK(kv.ref_count(2) == 1);
  CHECK(kv.free_queue() == std::vector<int32_t>{6, 7, 1, 0, 4, 3});
}
