#include "sim/block_hashes.h"

#include <algorithm>

#include "sim/random.h"

namespace servesim {

namespace {

uint64_t mix(uint64_t h, uint64_t source, int64_t offset, int64_t length) {
  h = splitmix64_finalize(h ^ source);
  return splitmix64_finalize(h + (uint64_t(offset) << 32 | uint64_t(uint32_t(length))));
}

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
  if (int64_t(keys.size()) >= full) return;
  RunWalker walk(identity, int64_t(keys.size()) * block_size);
  uint64_t parent = keys.empty() ? kRootBlockKey : keys.back();
  while (int64_t(keys.size()) < full) {
    uint64_t h = parent;
    uint64_t run_source = 0;
    int64_t run_offset = 0, run_length = 0;
    for (int64_t left = block_size; left > 0;) {
      uint64_t source;
      int64_t offset, taken;
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
    }
    h = mix(h, run_source, run_offset, run_length);
    keys.push_back(h);
    parent = h;
  }
}

}  // namespace servesim
