// The paged KV cache's bookkeeping: fixed-size blocks handed to sequences as
// they grow and taken back when they finish or are preempted (vLLM's
// PagedAttention block manager, without prefix sharing).
#pragma once

#include <cstdint>
#include <vector>

namespace servesim {

class KvBlockManager {
 public:
  KvBlockManager(int64_t num_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return int64_t(free_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }
  int64_t peak_used() const { return peak_used_; }

  // Blocks needed to hold `tokens` tokens: ceil(tokens / block_size).
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Grows `table` so it holds at least `tokens` tokens. Returns false, and
  // changes nothing, when there are not enough free blocks.
  bool grow_to(std::vector<int32_t>& table, int64_t tokens);
  // Returns the blocks of `table` beyond those `tokens` tokens need (the
  // room a speculative step reserved for drafts that were rejected).
  void shrink_to(std::vector<int32_t>& table, int64_t tokens);
  // Returns every block of `table` to the free list and clears it.
  void release(std::vector<int32_t>& table);

 private:
  int64_t num_blocks_;
  int32_t block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  int64_t peak_used_ = 0;
};

}  // namespace servesim
