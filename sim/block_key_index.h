// The prefix cache's index: block key -> the first block holding it. Every
// block holds at most one key, so the table never holds more keys than the
// pool has blocks; it is sized once and never rehashes.
//
// Each of its 64-byte buckets (one cache line) holds 15 entries of 32 bits
// and an overflow count. An entry packs the block (plus one; 0: empty) in
// its low bits and a fingerprint of the key -- as many of the key's low bits
// as are left -- above it (keys are hashes: any of their bits will do). A
// key lives in its home bucket or, when that was full, in one of the next;
// every bucket an insert passes over counts it, and erasing it counts it
// back, so a search goes on to the next bucket only while the count is not
// zero (the scheme of Folly's F14). An operation therefore reads one cache
// line and compares its entries all at once (SSE2), with no probe loop
// whose length the branch predictor must guess; an erase only empties its
// entry (no backward shift, no tombstone). A fingerprint match is confirmed
// against the full key, which the block itself keeps (`key_of(block)`);
// with 14 bits of fingerprint (a pool of 200,000 blocks) a search derefs
// another block about once in 2,700. The whole index of such a pool is
// 2 MiB, half of what 8-byte entries take, so that more of it stays in the
// CPU's caches (docs/prefix-caching.md, Speed, has what other designs cost).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace servesim {

class BlockKeyIndex {
 public:
  static constexpr int kEntries = 15;  // per bucket

  // For the keys of blocks 0 .. num_blocks - 1 (num_blocks < 2^31), at a
  // mean of at most 7.5 keys a bucket (half full): then about one bucket in
  // 200 overflows (one in 1,600 at the 6.1 of a pool of 200,000 blocks).
  BlockKeyIndex() = default;  // holds nothing: made for a pool before any key
  explicit BlockKeyIndex(int64_t num_blocks) {
    size_t n = 2;
    while (double(n) * 7.5 < double(num_blocks)) n *= 2;
    buckets_.assign(n, Bucket{});
    mask_ = n - 1;
    shift_ = 64 - std::countr_zero(n);
    block_bits_ = std::bit_width(uint64_t(num_blocks));  // block + 1 <= num_blocks
    block_mask_ = block_bits_ >= 32 ? ~0u : (1u << block_bits_) - 1;
  }

  size_t size() const { return size_; }
  size_t num_buckets() const { return buckets_.size(); }
  // For tests: how many keys stored beyond bucket i passed it.
  uint32_t overflow_of(size_t i) const { return buckets_[i].overflow; }
  // The bucket a key's search starts at: the top bits of a multiplicative
  // hash, so that keys which differ only in a few bits spread too.
  size_t home(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ULL) >> shift_); }

  // Starts loading the cache line `key`'s search begins at (a batch of
  // inserts or lookups then waits for memory once, not once each).
  void prefetch(uint64_t key) const { __builtin_prefetch(&buckets_[home(key)]); }

  // The block stored for `key`, or -1. key_of(block) is a block's full key.
  template <class KeyOf>
  int32_t find(uint64_t key, const KeyOf& key_of) const {
    const uint32_t fp = fingerprint(key);
    for (size_t i = home(key), seen = 1;; i = (i + 1) & mask_, ++seen) {
      const Bucket& b = buckets_[i];
      for (unsigned m = b.match(~block_mask_, fp); m != 0; m &= m - 1) {
        const int32_t block = int32_t(b.entry[std::countr_zero(m)] & block_mask_) - 1;
        if (block >= 0 && key_of(block) == key) return block;
      }
      if (b.overflow == 0 || seen == buckets_.size()) return -1;
    }
  }

  // Stores `block` (whose key_of is `key`) if no block is stored for `key`;
  // returns the block stored.
  template <class KeyOf>
  int32_t insert(uint64_t key, int32_t block, const KeyOf& key_of) {
    // Nearly always: no entry of the home bucket has the key's fingerprint,
    // no key lives beyond it, and it has room. One pass over one line.
    Bucket& b = buckets_[home(key)];
    const uint32_t fp = fingerprint(key);
    unsigned same, empty;
    b.match_and_empty(~block_mask_, fp, same, empty);
    if (same == 0 && b.overflow == 0 && empty != 0) {
      b.entry[std::countr_zero(empty)] = fp | (uint32_t(block) + 1);
      ++size_;
      return block;
    }
    const int32_t stored = find(key, key_of);
    if (stored >= 0) return stored;
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      Bucket& c = buckets_[i];
      if (const unsigned room = c.match(~0u, kEmpty); room != 0) {
        c.entry[std::countr_zero(room)] = fp | (uint32_t(block) + 1);
        ++size_;
        return block;
      }
      ++c.overflow;  // full: the key lives further on
    }
  }

  // If `block` is the one stored for `key`: replaces it with `next` (which
  // holds the same key; -1: removes the key) and returns true. Otherwise
  // changes nothing and returns false.
  bool replace_if(uint64_t key, int32_t block, int32_t next) {
    if (block < 0) return false;
    // A block is stored only under its own key, so matching the block
    // alone along the key's buckets finds its entry.
    for (size_t i = home(key), seen = 1;; i = (i + 1) & mask_, ++seen) {
      Bucket& b = buckets_[i];
      if (const unsigned m = b.match(block_mask_, uint32_t(block) + 1); m != 0) {
        uint32_t& e = b.entry[std::countr_zero(m)];
        if (next >= 0) {
          e = (e & ~block_mask_) | (uint32_t(next) + 1);
          return true;
        }
        e = kEmpty;
        --size_;
        for (size_t j = home(key); j != i; j = (j + 1) & mask_) --buckets_[j].overflow;
        return true;
      }
      if (b.overflow == 0 || seen == buckets_.size()) return false;
    }
  }

 private:
  static constexpr uint32_t kEmpty = 0;
  static constexpr unsigned kEntryBits = (1u << kEntries) - 1;

  struct alignas(64) Bucket {
    uint32_t entry[kEntries] = {};  // fingerprint << block bits | (block + 1); 0: empty
    uint32_t overflow = 0;          // keys stored beyond this bucket whose search passed it

    // Bit k set: (entry k & mask) == value. All 16 lanes are compared at
    // once; the 16th (the overflow count) is masked off.
    unsigned match(uint32_t mask, uint32_t value) const {
#if defined(__SSE2__)
      const __m128i m = _mm_set1_epi32(int(mask)), v = _mm_set1_epi32(int(value));
      __m128i eq[4];
      for (int q = 0; q < 4; ++q) eq[q] = _mm_cmpeq_epi32(_mm_and_si128(lanes(q), m), v);
      return bits(eq);
#else
      return match_portable(mask, value);
#endif
    }
    // match(mask, value) and match(~0u, kEmpty) from one load of the line.
    void match_and_empty(uint32_t mask, uint32_t value, unsigned& same, unsigned& empty) const {
#if defined(__SSE2__)
      const __m128i m = _mm_set1_epi32(int(mask)), v = _mm_set1_epi32(int(value)), zero = _mm_setzero_si128();
      __m128i eq[4], vacant[4];
      for (int q = 0; q < 4; ++q) {
        const __m128i e = lanes(q);
        eq[q] = _mm_cmpeq_epi32(_mm_and_si128(e, m), v);
        vacant[q] = _mm_cmpeq_epi32(e, zero);
      }
      same = bits(eq);
      empty = bits(vacant);
#else
      same = match_portable(mask, value);
      empty = match_portable(~0u, kEmpty);
#endif
    }
#if defined(__SSE2__)
    __m128i lanes(int q) const { return _mm_load_si128(reinterpret_cast<const __m128i*>(this) + q); }
    // Lane k's all-ones or zero as bit k, of the 15 entries.
    static unsigned bits(const __m128i* eq) {
      const __m128i bytes = _mm_packs_epi16(_mm_packs_epi32(eq[0], eq[1]), _mm_packs_epi32(eq[2], eq[3]));
      return unsigned(_mm_movemask_epi8(bytes)) & kEntryBits;
    }
#endif
    // The same in plain C++ (what builds without SSE2 use; tests compare).
    unsigned match_portable(uint32_t mask, uint32_t value) const {
      unsigned bits = 0;
      for (int k = 0; k < kEntries; ++k) bits |= unsigned((entry[k] & mask) == value) << k;
      return bits;
    }
  };
  static_assert(sizeof(Bucket) == 64);

  // The key's low bits that fit above the block, in place.
  uint32_t fingerprint(uint64_t key) const { return block_bits_ >= 32 ? 0 : uint32_t(key) << block_bits_; }

 public:
  // For tests: both ways of comparing a bucket's entries agree.
  static bool portable_match_agrees(const std::vector<uint32_t>& entries, uint32_t overflow, uint32_t mask,
                                    uint32_t value) {
    Bucket b;
    for (int k = 0; k < kEntries; ++k) b.entry[k] = entries[size_t(k)];
    b.overflow = overflow;
    unsigned same, empty;
    b.match_and_empty(mask, value, same, empty);
    return b.match(mask, value) == b.match_portable(mask, value) && same == b.match_portable(mask, value) &&
           empty == b.match_portable(~0u, kEmpty);
  }

 private:
  std::vector<Bucket> buckets_;
  size_t mask_ = 0;
  int shift_ = 63;
  int block_bits_ = 0;
  uint32_t block_mask_ = 0;
  size_t size_ = 0;
};

}  // namespace servesim
