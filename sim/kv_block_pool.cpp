#include "sim/kv_block_pool.h"

#include <algorithm>
#include <numeric>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

namespace {

int64_t checked_num_blocks(int64_t num_blocks, int32_t block_size) {
  if (block_size <= 0)
    throw InputError(fmt::format("--block-size must be > 0 (got {})", block_size));
  if (num_blocks <= 0 || num_blocks >= std::numeric_limits<int32_t>::max())
    throw InputError(fmt::format("KV cache must have 1 .. 2^31-2 blocks (got {})", num_blocks));
  return num_blocks;
}

}  // namespace

KvBlockPool::KvBlockPool(int64_t num_blocks, int32_t block_size)
    : num_blocks_(checked_num_blocks(num_blocks, block_size)), block_size_(block_size) {
  // Block 0 at the head: handed out first. The blocks' own records and the
  // key index are made when the first block is given a key (start_keying).
  queue_.resize(size_t(num_blocks));
  std::iota(queue_.begin(), queue_.end(), 0);
  num_free_ = num_blocks;
}

void KvBlockPool::push_back_free(int32_t block) {
  blocks_[size_t(block)].queued_at = queue_base_ + int64_t(queue_.size());
  queue_.push_back(block);
  ++num_free_;
}

void KvBlockPool::take_out_of_queue(int32_t block) {
  blocks_[size_t(block)].queued_at = -1;  // its entry goes stale
  --num_free_;
  // Stale entries past the pool's size: drop them (amortized O(1) a take).
  if (int64_t(queue_.size() - head_) - num_free_ > num_blocks_) compact();
}

inline int32_t KvBlockPool::pop_front_free() {
  for (;; ++head_) {
    const int32_t block = queue_[head_];
    if (blocks_[size_t(block)].queued_at == queue_base_ + int64_t(head_)) {
      ++head_;
      blocks_[size_t(block)].queued_at = -1;
      --num_free_;
      if (head_ > queue_.size() / 2 && head_ >= 4096) compact();
      return block;
    }
  }
}

void KvBlockPool::compact() {
  if (!ever_keyed_) {  // every entry from the head is a free block
    queue_.erase(queue_.begin(), queue_.begin() + std::ptrdiff_t(head_));
    head_ = 0;
    queue_base_ = 0;
    return;
  }
  size_t out = 0;
  for (size_t i = head_; i < queue_.size(); ++i) {
    const int32_t block = queue_[i];
    if (blocks_[size_t(block)].queued_at != queue_base_ + int64_t(i)) continue;
    queue_[out] = block;
    blocks_[size_t(block)].queued_at = int64_t(out);
    ++out;
  }
  queue_.resize(out);
  head_ = 0;
  queue_base_ = 0;
}

int32_t KvBlockPool::ref_count(int32_t block) const {
  if (ever_keyed_) return blocks_[size_t(block)].ref_count;
  const bool free = std::find(queue_.begin() + std::ptrdiff_t(head_), queue_.end(), block) != queue_.end();
  return free ? 0 : 1;
}

std::vector<int32_t> KvBlockPool::free_queue() const {
  if (!ever_keyed_) return std::vector<int32_t>(queue_.begin() + std::ptrdiff_t(head_), queue_.end());
  std::vector<int32_t> out;
  for (size_t i = head_; i < queue_.size(); ++i)
    if (blocks_[size_t(queue_[i])].queued_at == queue_base_ + int64_t(i)) out.push_back(queue_[i]);
  return out;
}

inline void KvBlockPool::drop_key(int32_t block) {
  Block& b = blocks_[size_t(block)];
  const uint64_t key = b.key;
  // The first holder: the next one (if any) takes its place in the index.
  if (by_key_.replace_if(key, block, b.next_same_key)) {
    if (b.next_same_key >= 0) --duplicate_keys_;
  } else {
    // A later holder: unlink it from the chain of holders of its key.
    int32_t h = by_key_.find(key, key_of());
    while (blocks_[size_t(h)].next_same_key != block) h = blocks_[size_t(h)].next_same_key;
    blocks_[size_t(h)].next_same_key = b.next_same_key;
    --duplicate_keys_;
  }
  b.next_same_key = kNoKey;
  ++evicted_blocks_;
}

bool KvBlockPool::grow(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = blocks_for(tokens) - int64_t(table.size());
  if (need > num_free_) return false;
  const size_t first = table.size();
  if (!ever_keyed_) {
    // Anonymous blocks: the queue's next `need` entries, taken at once.
    const auto from = queue_.begin() + std::ptrdiff_t(head_);
    table.insert(table.end(), from, from + need);
    head_ += size_t(need);
    num_free_ -= need;
    if (head_ > queue_.size() / 2 && head_ >= 4096) compact();
    peak_used_ = std::max(peak_used_, num_used());
    return true;
  }
  // Lazy eviction: a slot is reused only now. One pass, pipelined so that
  // memory is loaded ahead and the misses overlap: the queue's next blocks
  // 2 kPrefetchAhead ahead, a taken block's index line as it is taken, and
  // its key dropped kPrefetchAhead blocks later.
  // (A decode's one block needs no pipeline: the lag is at most the blocks taken.)
  const int64_t lag = std::min(need, int64_t(kPrefetchAhead));
  for (int64_t i = 0; i < need + lag; ++i) {
    if (i < need) {
      if (head_ + 2 * kPrefetchAhead < queue_.size())
        __builtin_prefetch(&blocks_[size_t(queue_[head_ + 2 * kPrefetchAhead])]);
      const int32_t block = pop_front_free();
      blocks_[size_t(block)].ref_count = 1;
      table.push_back(block);
      prefetch_held_key(block);
    }
    if (i < lag) continue;
    const int32_t taken = table[first + size_t(i - lag)];
    if (blocks_[size_t(taken)].next_same_key != kNoKey) drop_key(taken);
  }
  peak_used_ = std::max(peak_used_, num_used());
  return true;
}

void KvBlockPool::free_one(int32_t block) {
  Block& b = blocks_[size_t(block)];
  if (b.ref_count <= 0) throw std::logic_error(fmt::format("KvBlockPool: block {} freed twice", block));
  if (--b.ref_count == 0) push_back_free(block);
}

void KvBlockPool::shrink_to(std::vector<int32_t>& table, int64_t tokens) {
  const size_t keep = size_t(std::max<int64_t>(blocks_for(tokens), 0));
  if (!ever_keyed_ && table.size() > keep) {
    // Anonymous blocks: to the queue's tail, last block first, as free_one would.
    if (num_free_ + int64_t(table.size() - keep) > num_blocks_)
      throw std::logic_error("KvBlockPool: more blocks freed than were handed out");
    queue_.insert(queue_.end(), table.rbegin(), table.rend() - std::ptrdiff_t(keep));
    num_free_ += int64_t(table.size() - keep);
    table.resize(keep);
    return;
  }
  while (table.size() > keep) {
    free_one(table.back());
    table.pop_back();
  }
}

void KvBlockPool::release(std::vector<int32_t>& table) {
  if (!ever_keyed_) {
    // Anonymous blocks: to the queue's tail at once, last block first.
    if (num_free_ + int64_t(table.size()) > num_blocks_)
      throw std::logic_error("KvBlockPool: more blocks freed than were handed out");
    queue_.insert(queue_.end(), table.rbegin(), table.rend());
    num_free_ += int64_t(table.size());
    table.clear();
    return;
  }
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_one(*it);
  table.clear();
}

void KvBlockPool::find_cached_prefix(std::span<const uint64_t> hashes, int64_t max_blocks,
                                     std::vector<int32_t>& hit) const {
  if (!ever_keyed_) return;  // no block holds a key
  const size_t n = size_t(std::clamp<int64_t>(max_blocks, 0, int64_t(hashes.size())));
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) by_key_.prefetch(hashes[i + kPrefetchAhead]);
    const int32_t block = by_key_.find(hashes[i], key_of());
    if (block < 0) return;
    hit.push_back(block);
  }
}

int64_t KvBlockPool::count_free(std::span<const int32_t> blocks) const {
  if (!ever_keyed_) {
    int64_t n = 0;
    for (int32_t b : blocks) n += ref_count(b) == 0;
    return n;
  }
  int64_t n = 0;
  for (int32_t b : blocks) n += blocks_[size_t(b)].ref_count == 0;
  return n;
}

void KvBlockPool::take_cached(std::span<const int32_t> blocks, std::vector<int32_t>& table) {
  if (!ever_keyed_ && !blocks.empty()) throw std::logic_error("KvBlockPool: blocks taken as cached before any holds a key");
  for (int32_t block : blocks) {
    Block& b = blocks_[size_t(block)];
    if (b.next_same_key == kNoKey)
      throw std::logic_error(fmt::format("KvBlockPool: block {} taken as cached holds no key", block));
    if (b.ref_count++ == 0) take_out_of_queue(block);
    table.push_back(block);
  }
  peak_used_ = std::max(peak_used_, num_used());
}

void KvBlockPool::start_keying() {
  // The blocks' reference counts and queue positions, which anonymous
  // blocks go without: held once, or free where the queue holds them.
  blocks_.assign(size_t(num_blocks_), Block{});
  for (Block& b : blocks_) {
    b.ref_count = 1;
    b.queued_at = -1;
  }
  for (size_t i = head_; i < queue_.size(); ++i) {
    Block& b = blocks_[size_t(queue_[i])];
    b.ref_count = 0;
    b.queued_at = queue_base_ + int64_t(i);
  }
  by_key_ = BlockKeyIndex(num_blocks_);
  ever_keyed_ = true;
}

inline void KvBlockPool::cache_one(int32_t block, uint64_t hash) {
  if (!ever_keyed_) start_keying();
  Block& b = blocks_[size_t(block)];
  if (b.ref_count <= 0) throw std::logic_error(fmt::format("KvBlockPool: block {} cached while free", block));
  if (b.next_same_key != kNoKey) return;  // a hit block: already cached under its key
  b.key = hash;
  b.next_same_key = -1;
  const int32_t first = by_key_.insert(hash, block, key_of());
  if (first != block) append_holder(first, block);
}

void KvBlockPool::append_holder(int32_t first, int32_t block) {
  int32_t h = first;  // the end of the chain: older holders are found first
  while (blocks_[size_t(h)].next_same_key >= 0) h = blocks_[size_t(h)].next_same_key;
  blocks_[size_t(h)].next_same_key = block;
  ++duplicate_keys_;
}

void KvBlockPool::cache(int32_t block, uint64_t hash) { cache_one(block, hash); }

void KvBlockPool::cache(std::span<const int32_t> blocks, std::span<const uint64_t> keys) {
  if (blocks.size() != keys.size()) throw std::logic_error("KvBlockPool::cache: one key a block");
  if (!ever_keyed_ && !blocks.empty()) start_keying();
  for (size_t i = 0; i < blocks.size(); ++i) {
    // The index's cache lines are loaded a few blocks ahead (their misses overlap).
    if (i + kPrefetchAhead < blocks.size()) by_key_.prefetch(keys[i + kPrefetchAhead]);
    cache_one(blocks[i], keys[i]);
  }
}

}  // namespace servesim
