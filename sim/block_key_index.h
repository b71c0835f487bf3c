// The prefix cache's index: block key -> the first block holding it. A
// fixed-capacity open-addressing table (linear probing, backward-shift
// deletion) instead of std::unordered_map: every block holds at most one
// key, so the table never holds more keys than the pool has blocks and is
// sized once, at twice that, never rehashing. A slot is 8 bytes -- the key's
// low 32 bits and the block -- so the table of a GPU's worth of blocks stays
// in the CPU's cache; a match on the low bits is confirmed against the full
// key, which the block itself keeps (`key_of(block)`). Keys are block
// hashes, already well mixed, so their low bits index the table directly.
// docs/prefix-caching.md (Speed) has what it costs.
#pragma once

#include <cstdint>
#include <vector>

namespace servesim {

class BlockKeyIndex {
 public:
  // Room for `max_keys` keys at a load of at most 1/2 (max_keys < 2^31).
  explicit BlockKeyIndex(int64_t max_keys) {
    size_t cap = 16;
    while (cap < size_t(max_keys) * 2) cap *= 2;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }

  size_t size() const { return size_; }

  // Starts loading the cache line `key`'s probe begins at (a batch of
  // inserts or lookups then waits for memory once, not once each).
  void prefetch(uint64_t key) const { __builtin_prefetch(&slots_[key & mask_]); }

  // The block stored for `key`, or -1. key_of(block) is a block's full key.
  template <class KeyOf>
  int32_t find(uint64_t key, const KeyOf& key_of) const {
    for (size_t i = key & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.block < 0) return -1;
      if (s.low == uint32_t(key) && key_of(s.block) == key) return s.block;
    }
  }

  // Stores `block` (whose key_of is `key`) if no block is stored for `key`;
  // returns the block stored.
  template <class KeyOf>
  int32_t insert(uint64_t key, int32_t block, const KeyOf& key_of) {
    size_t i = key & mask_;
    for (; slots_[i].block >= 0; i = (i + 1) & mask_)
      if (slots_[i].low == uint32_t(key) && key_of(slots_[i].block) == key) return slots_[i].block;
    slots_[i] = Slot{uint32_t(key), block};
    ++size_;
    return block;
  }

  // If `block` is the one stored for `key`: replaces it with `next` (which
  // holds the same key; -1: removes the key) and returns true. Otherwise
  // changes nothing and returns false.
  bool replace_if(uint64_t key, int32_t block, int32_t next) {
    size_t i = key & mask_;
    while (slots_[i].block >= 0 && slots_[i].block != block) i = (i + 1) & mask_;
    if (slots_[i].block != block || block < 0) return false;
    if (next >= 0) {
      slots_[i].block = next;
      return true;
    }
    // Remove, shifting later entries of the probe run back so that no lookup
    // stops early: entry j may move to the hole at i when its home is not
    // in (i, j]. A slot's home is its key's low bits, which it keeps.
    for (size_t j = (i + 1) & mask_; slots_[j].block >= 0; j = (j + 1) & mask_) {
      const size_t home = slots_[j].low & mask_;
      const bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].block = -1;
    --size_;
    return true;
  }

 private:
  struct Slot {
    uint32_t low = 0;    // the key's low 32 bits (its home, and a first check)
    int32_t block = -1;  // -1: empty
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace servesim
