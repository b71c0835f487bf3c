#include "sim/block_hashes.h"

#include <algorithm>
#include <bit>

#include "sim/random.h"

namespace servesim {

namespace {

// A block's own hash (what its key adds to its parent's). A block of one
// run -- nearly every block -- hashes its source once (shared by all the
// blocks of a span) and then (index, offset), packed without loss, through
// a bijective finaliser: blocks of one source never collide. Its run's
// length is the block size, the same for every key a pool compares, so it
// is left out. A block of several runs chains them, lengths too, from a
// seed of its index.
uint64_t source_hash(uint64_t source) { return splitmix64_finalize(source ^ 0xB10C4E75EED5A17BULL); }

uint64_t one_run_hash(uint64_t source_h, int64_t index, int64_t offset) {
  return splitmix64_finalize(source_h ^ (uint64_t(index) << 32 | uint64_t(uint32_t(offset))));
}

uint64_t mix(uint64_t h, uint64_t source, int64_t offset, int64_t length) {
  h = splitmix64_finalize(h ^ source);
  return splitmix64_finalize(h + (uint64_t(offset) << 32 | uint64_t(uint32_t(length))));
}

uint64_t runs_seed(int64_t index) { return 0x5EED0F2B10C4A11DULL + uint64_t(index) * 0x9E3779B97F4A7C15ULL; }

// Runs of (source, first position, length), merged where one continues the
// previous: walks a prompt's spans and then the output source.
class RunWalker {
 public:
  RunWalker(const TokenIdentity& id, int64_t start) : id_(id) {
    // Find the span holding token `start`.
    int64_t pos = 0;
    for (span_ = 0; span_ < id_.prompt_spans.size(); ++span_) {
      const int64_t len = id_.prompt_spans[span_].length;
      if (start < pos + len) {
        within_ = start - pos;
        return;
      }
      pos += len;
    }
    within_ = start - pos;  // in the output
  }

  // How many (up to `most`) of the next blocks of `block_size` tokens lie
  // each inside one run -- the current prompt span, or the output -- and
  // takes them: block j of them is the run (source, offset + j block_size,
  // block_size).
  int64_t take_whole_blocks(int32_t block_size, int64_t most, uint64_t& source, int64_t& offset) {
    int64_t n = most;
    if (span_ < id_.prompt_spans.size()) {
      const TokenSpan& s = id_.prompt_spans[span_];
      n = std::min<int64_t>(most, (s.length - within_) / block_size);
      source = s.source;
      offset = s.offset + within_;
      within_ += n * block_size;
      if (within_ == s.length) {
        ++span_;
        within_ = 0;
      }
    } else {
      source = id_.output_source;
      offset = within_;
      within_ += n * block_size;
    }
    return n;
  }

  // Takes up to `n` tokens from the current span: its source, first
  // position and how many were taken.
  void take(int64_t n, uint64_t& source, int64_t& offset, int64_t& taken) {
    while (span_ < id_.prompt_spans.size() && id_.prompt_spans[span_].length <= 0) ++span_;
    if (span_ < id_.prompt_spans.size()) {
      const TokenSpan& s = id_.prompt_spans[span_];
      source = s.source;
      offset = s.offset + within_;
      taken = std::min<int64_t>(n, s.length - within_);
      within_ += taken;
      if (within_ == s.length) {
        ++span_;
        within_ = 0;
      }
    } else {
      source = id_.output_source;
      offset = within_;
      taken = n;
      within_ += n;
    }
  }

 private:
  const TokenIdentity& id_;
  size_t span_ = 0;
  int64_t within_ = 0;
};

}  // namespace

void extend_block_keys(const TokenIdentity& identity, int64_t known_tokens, int32_t block_size,
                       std::vector<uint64_t>& keys) {
  const int64_t full = known_tokens / block_size;
  int64_t index = int64_t(keys.size());
  if (index >= full) return;
  RunWalker walk(identity, index * block_size);
  uint64_t key = keys.empty() ? kRootBlockKey : keys.back();
  // Capacity by powers of two, as push_back would grow it (the allocator
  // reuses such sizes well).
  if (keys.capacity() < size_t(full)) keys.reserve(std::bit_ceil(size_t(full)));
  keys.resize(size_t(full));
  // A block's own hash does not depend on its parent's key, so the hashes
  // of many blocks are computed side by side; the chain is an addition.
  while (index < full) {
    // Blocks inside one run (nearly all).
    uint64_t source;
    int64_t offset;
    const int64_t n = walk.take_whole_blocks(block_size, full - index, source, offset);
    if (n > 0) {
      const uint64_t source_h = source_hash(source);
      for (int64_t j = 0; j < n; ++j, ++index) {
        key += one_run_hash(source_h, index, offset + j * block_size);
        keys[size_t(index)] = key;
      }
      continue;
    }
    // A block across spans: the maximal runs it covers (one, when its spans
    // continue each other).
    uint64_t h = runs_seed(index);
    uint64_t run_source = 0;
    int64_t run_offset = 0, run_length = 0;
    int runs = 0;
    for (int64_t left = block_size; left > 0;) {
      int64_t taken;
      walk.take(left, source, offset, taken);
      left -= taken;
      if (run_length > 0 && source == run_source && offset == run_offset + run_length) {
        run_length += taken;  // the same run, cut into two spans
        continue;
      }
      if (run_length > 0) h = mix(h, run_source, run_offset, run_length);
      run_source = source;
      run_offset = offset;
      run_length = taken;
      ++runs;
    }
    key += runs == 1 ? one_run_hash(source_hash(run_source), index, run_offset)
                     : mix(h, run_source, run_offset, run_length);
    keys[size_t(index++)] = key;
  }
}

}  // namespace servesim
