#include "sim/kv_block_manager.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

KvBlockManager::KvBlockManager(int64_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  if (block_size <= 0)
    throw InputError(fmt::format("--block-size must be > 0 (got {})", block_size));
  if (num_blocks <= 0 || num_blocks > std::numeric_limits<int32_t>::max())
    throw InputError(fmt::format("KV cache must have 1 .. 2^31-1 blocks (got {})", num_blocks));
  free_.resize(size_t(num_blocks));
  // Highest id at the bottom so block 0 is handed out first.
  for (int64_t i = 0; i < num_blocks; ++i) free_[size_t(i)] = int32_t(num_blocks - 1 - i);
}

bool KvBlockManager::grow_to(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = blocks_for(tokens) - int64_t(table.size());
  if (need <= 0) return true;
  if (need > num_free()) return false;
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  peak_used_ = std::max(peak_used_, num_used());
  return true;
}

void KvBlockManager::shrink_to(std::vector<int32_t>& table, int64_t tokens) {
  const size_t keep = size_t(std::max<int64_t>(blocks_for(tokens), 0));
  while (table.size() > keep) {
    free_.push_back(table.back());
    table.pop_back();
  }
}

void KvBlockManager::release(std::vector<int32_t>& table) {
  // Push in reverse so a sequence's first block is the next one reused.
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  table.clear();
}

}  // namespace servesim
