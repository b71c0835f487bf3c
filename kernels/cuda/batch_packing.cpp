#include "kernels/cuda/batch_packing.h"

#include <algorithm>
#include <stdexcept>

namespace servesim::cuda {
namespace {

int32_t ceil_div(int64_t a, int64_t b) { return int32_t((a + b - 1) / b); }

}  // namespace

PackedBatch pack_batch(const BatchLayout& layout, int32_t block_size, int32_t pad_to) {
  PackedBatch p;
  const int32_t padding = std::max(0, pad_to - int32_t(layout.sequences.size()));
  p.tokens = layout.tokens;
  p.positions = layout.positions;
  p.slot_mapping.assign(size_t(layout.num_tokens()), -1);
  p.sample_rows = layout.sample_rows;
  for (const SequenceSlice& s : layout.sequences) {
    const int32_t entries = ceil_div(int64_t(s.num_cached) + s.num_query, block_size);
    if (size_t(entries) > s.block_table.size())
      throw std::logic_error("pack_batch: a sequence's block table does not cover its new tokens");
    for (int32_t i = 0; i < s.num_query; ++i) {
      const int32_t pos = s.num_cached + i;
      p.slot_mapping[size_t(s.first_row + i)] = s.block_table[size_t(pos / block_size)] * block_size + pos % block_size;
    }
  }
  for (int32_t k = 0; k < padding; ++k) {
    const int32_t row = layout.num_tokens() + k;
    p.tokens.push_back(0);
    p.positions.push_back(0);
    p.slot_mapping.push_back(-1);
    p.sample_rows.push_back(row);
  }

  auto put_sequence = [&](const SequenceSlice& s) {
    const int32_t entries = ceil_div(int64_t(s.num_cached) + s.num_query, block_size);
    p.sequences.push_back({s.first_row, s.num_query, s.num_cached, int32_t(p.block_tables.size())});
    p.block_tables.insert(p.block_tables.end(), s.block_table.begin(), s.block_table.begin() + entries);
    return int32_t(p.sequences.size()) - 1;
  };
  for (const SequenceSlice& s : layout.sequences)
    if (s.num_query == 1) put_sequence(s);
  if (padding > 0) {
    const int32_t entry = int32_t(p.block_tables.size());
    p.block_tables.push_back(0);  // padding rows read block 0, slot 0
    for (int32_t k = 0; k < padding; ++k) p.sequences.push_back({layout.num_tokens() + k, 1, 0, entry});
  }
  p.num_decode_sequences = int32_t(p.sequences.size());
  for (const SequenceSlice& s : layout.sequences) {
    if (s.num_query <= 1) continue;
    const int32_t index = put_sequence(s);
    for (int32_t q0 = 0; q0 < s.num_query; q0 += kPrefillQueryTile)
      p.prefill_items.push_back({index, q0, std::min(kPrefillQueryTile, s.num_query - q0)});
  }
  return p;
}

}  // namespace servesim::cuda
