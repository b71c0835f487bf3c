// The paged KV cache's blocks: handed to sequences as they grow, taken back
// when they finish or are preempted, and -- with automatic prefix caching --
// kept by content after they are freed, so a later prompt with the same
// prefix reuses them instead of recomputing them.
//
// The rules are vLLM V1's (docs/design/prefix_caching.md; vllm/v1/core/
// block_pool.py and kv_cache_utils.py), and docs/prefix-caching.md cites each:
// - a block's key is a chained hash of its parent's key and its tokens; only
//   full blocks get one (cache());
// - reference counts: a block shared by several sequences is freed when the
//   last lets it go;
// - one free queue: new blocks come from its head; a sequence's blocks are
//   freed in reverse order to its tail, so a chain's last block is evicted
//   first and its shared head survives longest;
// - eviction is lazy: a freed block keeps its key, and is findable, until
//   its slot is handed out again (evicted_blocks() counts those).
// With caching off, or for sequences that never call cache(), it is a plain
// paged allocator with the same free queue.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/block_key_index.h"

namespace servesim {

class KvBlockPool {
 public:
  KvBlockPool(int64_t num_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  // Blocks in the free queue, cached ones included: what an allocation may
  // take. KV usage (num_used) therefore leaves free cached blocks out, as
  // vLLM's kv_cache_usage does.
  int64_t num_free() const { return num_free_; }
  int64_t num_used() const { return num_blocks_ - num_free_; }
  int64_t peak_used() const { return peak_used_; }
  // Cached blocks whose key was dropped because their slot was reused.
  int64_t evicted_blocks() const { return evicted_blocks_; }
  // Blocks that currently hold a key (in use or free).
  int64_t num_cached() const { return int64_t(by_key_.size()) + duplicate_keys_; }

  // Blocks needed to hold `tokens` tokens: ceil(tokens / block_size).
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Grows `table` so it holds at least `tokens` tokens, with blocks from the
  // head of the free queue (evicting the key a block still holds). Returns
  // false, and changes nothing, when there are not enough free blocks.
  bool grow_to(std::vector<int32_t>& table, int64_t tokens) {
    // Most calls (a decode token inside its last block) need nothing: tested
    // inline, with a multiplication (a decode step calls this for every
    // sequence).
    return tokens <= int64_t(table.size()) * block_size_ || grow(table, tokens);
  }
  // Frees the blocks of `table` beyond those `tokens` tokens need (the room a
  // speculative step reserved for drafts that were rejected).
  void shrink_to(std::vector<int32_t>& table, int64_t tokens);
  // Frees every block of `table`, last block first, and clears it.
  void release(std::vector<int32_t>& table);

  // --- prefix cache
  // The blocks holding the longest run of keys hashes[0], hashes[1], ...
  // (at most max_blocks of them), appended to `hit`; stops at the first key
  // no block holds.
  void find_cached_prefix(std::span<const uint64_t> hashes, int64_t max_blocks, std::vector<int32_t>& hit) const;
  // How many of `blocks` sit in the free queue (reference count 0): taking
  // them uses up free blocks as a new allocation would.
  int64_t count_free(std::span<const int32_t> blocks) const;
  // Appends cached `blocks` (from find_cached_prefix) to `table`, taking a
  // reference to each; a free one leaves the free queue.
  void take_cached(std::span<const int32_t> blocks, std::vector<int32_t>& table);
  // Gives `block` (held, full) the key `hash`. A block keeps one key; another
  // block may hold the same key (two sequences computed the same content at
  // once), and a lookup finds the older one first.
  void cache(int32_t block, uint64_t hash);
  // cache(blocks[i], keys[i]) for each i, with the index's memory loaded
  // ahead.
  void cache(std::span<const int32_t> blocks, std::span<const uint64_t> keys);

  // For tests: the reference count and key of a block, and the free queue
  // from head to tail.
  int32_t ref_count(int32_t block) const;
  bool holds_key(int32_t block) const { return ever_keyed_ && blocks_[size_t(block)].next_same_key != kNoKey; }
  std::vector<int32_t> free_queue() const;

 private:
  static constexpr int32_t kNoKey = -2;
  struct Block {
    int64_t queued_at = -1;  // position of its entry in the free queue, -1: not free
    int32_t ref_count = 0;
    // kNoKey; or it holds `key` and this is the next block holding
    // the same key (-1: none).
    int32_t next_same_key = kNoKey;
    uint64_t key = 0;  // when it holds one (beside the rest: one cache line per block)
  };
  // The free queue is an array read from its head and appended to at its
  // tail (sequential, unlike a linked list's pointer chase). A free block
  // taken by a cache hit leaves a stale entry behind, recognised by its
  // position and skipped; compact() drops them once they are many.
  void push_back_free(int32_t block);
  void take_out_of_queue(int32_t block);
  bool grow(std::vector<int32_t>& table, int64_t tokens);  // grow_to's allocating part
  int32_t pop_front_free();
  void compact();
  // How many blocks ahead a batch loads the index's cache lines (and grow_to
  // the queue's blocks, twice as far): enough to overlap their misses, few
  // enough that the loads are not dropped. 8 and 32 were slower.
  static constexpr size_t kPrefetchAhead = 16;
  void prefetch_held_key(int32_t block) const {
    if (blocks_[size_t(block)].next_same_key != kNoKey) by_key_.prefetch(blocks_[size_t(block)].key);
  }
  void drop_key(int32_t block);  // eviction of a block that holds a key
  void cache_one(int32_t block, uint64_t hash);
  void append_holder(int32_t first, int32_t block);  // a duplicate key: to the end of its chain
  void free_one(int32_t block);
  // The full key of a block that holds one, for the index.
  auto key_of() const {
    return [this](int32_t block) { return blocks_[size_t(block)].key; };
  }

  int64_t num_blocks_;
  int32_t block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> queue_;     // free queue entries; queue_[head_] is the oldest
  size_t head_ = 0;
  int64_t queue_base_ = 0;         // position of queue_[0]
  int64_t num_free_ = 0;           // valid entries
  int64_t peak_used_ = 0;
  int64_t evicted_blocks_ = 0;
  int64_t duplicate_keys_ = 0;     // keys held by a block other than the first with that key
  // Until a block is given a key, blocks are anonymous: none is shared and
  // no queue entry goes stale, so the queue alone says which are free and
  // the blocks' reference counts and queue positions are left unkept
  // (start_keying() sets them then).
  bool ever_keyed_ = false;
  void start_keying();
  BlockKeyIndex by_key_;           // key -> first block holding it
};

}  // namespace servesim
