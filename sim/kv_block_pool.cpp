#include "sim/kv_block_pool.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

KvBlockPool::KvBlockPool(int64_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  if (block_size <= 0)
    throw InputError(fmt::format("--block-size must be > 0 (got {})", block_size));
  if (num_blocks <= 0 || num_blocks >= std::numeric_limits<int32_t>::max())
    throw InputError(fmt::format("KV cache must have 1 .. 2^31-2 blocks (got {})", num_blocks));
  blocks_.resize(size_t(num_blocks) + 1);
  const int32_t sentinel = int32_t(num_blocks);
  blocks_[size_t(sentinel)].prev = blocks_[size_t(sentinel)].next = sentinel;
  // Block 0 at the head: handed out first.
  for (int32_t b = 0; b < sentinel; ++b) push_back_free(b);
}

void KvBlockPool::push_back_free(int32_t block) {
  const int32_t sentinel = int32_t(num_blocks_);
  Block& s = blocks_[size_t(sentinel)];
  Block& b = blocks_[size_t(block)];
  b.prev = s.prev;
  b.next = sentinel;
  blocks_[size_t(s.prev)].next = block;
  s.prev = block;
  ++num_free_;
}

void KvBlockPool::unlink_free(int32_t block) {
  Block& b = blocks_[size_t(block)];
  blocks_[size_t(b.prev)].next = b.next;
  blocks_[size_t(b.next)].prev = b.prev;
  b.prev = b.next = -1;
  --num_free_;
}

std::vector<int32_t> KvBlockPool::free_queue() const {
  std::vector<int32_t> out;
  const int32_t sentinel = int32_t(num_blocks_);
  for (int32_t b = blocks_[size_t(sentinel)].next; b != sentinel; b = blocks_[size_t(b)].next) out.push_back(b);
  return out;
}

void KvBlockPool::drop_key(int32_t block) {
  Block& b = blocks_[size_t(block)];
  if (!b.has_key) return;
  auto it = by_hash_.find(b.key);
  if (it != by_hash_.end() && it->second == block) {
    if (b.next_same_key >= 0) {
      it->second = b.next_same_key;  // the next holder becomes the first
      --duplicate_keys_;
    } else {
      by_hash_.erase(it);
    }
  } else {
    // A later holder: unlink it from the chain of holders of its key.
    int32_t h = it->second;
    while (blocks_[size_t(h)].next_same_key != block) h = blocks_[size_t(h)].next_same_key;
    blocks_[size_t(h)].next_same_key = b.next_same_key;
    --duplicate_keys_;
  }
  b.has_key = false;
  b.next_same_key = -1;
  ++evicted_blocks_;
}

bool KvBlockPool::grow_to(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = blocks_for(tokens) - int64_t(table.size());
  if (need <= 0) return true;
  if (need > num_free_) return false;
  const int32_t sentinel = int32_t(num_blocks_);
  for (int64_t i = 0; i < need; ++i) {
    const int32_t block = blocks_[size_t(sentinel)].next;
    unlink_free(block);
    drop_key(block);  // lazy eviction: the slot is reused only now
    blocks_[size_t(block)].ref_count = 1;
    table.push_back(block);
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
  while (table.size() > keep) {
    free_one(table.back());
    table.pop_back();
  }
}

void KvBlockPool::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_one(*it);
  table.clear();
}

void KvBlockPool::find_cached_prefix(std::span<const uint64_t> hashes, int64_t max_blocks,
                                     std::vector<int32_t>& hit) const {
  const size_t n = size_t(std::clamp<int64_t>(max_blocks, 0, int64_t(hashes.size())));
  for (size_t i = 0; i < n; ++i) {
    auto it = by_hash_.find(hashes[i]);
    if (it == by_hash_.end()) return;
    hit.push_back(it->second);
  }
}

int64_t KvBlockPool::count_free(std::span<const int32_t> blocks) const {
  int64_t n = 0;
  for (int32_t b : blocks) n += blocks_[size_t(b)].ref_count == 0;
  return n;
}

void KvBlockPool::take_cached(std::span<const int32_t> blocks, std::vector<int32_t>& table) {
  for (int32_t block : blocks) {
    Block& b = blocks_[size_t(block)];
    if (!b.has_key) throw std::logic_error(fmt::format("KvBlockPool: block {} taken as cached holds no key", block));
    if (b.ref_count++ == 0) unlink_free(block);
    table.push_back(block);
  }
  peak_used_ = std::max(peak_used_, num_used());
}

void KvBlockPool::cache(int32_t block, uint64_t hash) {
  Block& b = blocks_[size_t(block)];
  if (b.ref_count <= 0) throw std::logic_error(fmt::format("KvBlockPool: block {} cached while free", block));
  if (b.has_key) return;  // a hit block: already cached under its key
  b.has_key = true;
  b.key = hash;
  b.next_same_key = -1;
  auto [it, inserted] = by_hash_.try_emplace(hash, block);
  if (inserted) return;
  int32_t h = it->second;  // append to the chain: older holders are found first
  while (blocks_[size_t(h)].next_same_key >= 0) h = blocks_[size_t(h)].next_same_key;
  blocks_[size_t(h)].next_same_key = block;
  ++duplicate_keys_;
}

}  // namespace servesim
