// How a packed batch's index arrays look on the device (before they are
// copied there): plain host vectors, so the packing rules are tested
// without a GPU. BatchMetadata (batch_metadata.h) copies them into its
// staging buffer.
//
// Rules:
// - rows: the layout's tokens, then `pad_to - sequences` padding rows (token
//   0, position 0, no KV write: slot -1), each a one-token sequence that
//   samples and reads block 0;
// - slot_mapping[t] = block_table[pos / block_size] * block_size + pos % block_size;
// - sequences: every one-token sequence first (the decode attention's),
//   padding after them, then the others, whose query tiles of at most
//   kPrefillQueryTile rows become the prefill attention's work items;
// - block tables packed one after another (block_offset), each with the
//   ceil((num_cached + num_query) / block_size) entries the sequence uses.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/decoder/batch_layout.h"

namespace servesim::cuda {

struct PackedBatch {
  std::vector<int32_t> tokens, positions, slot_mapping;  // [T]
  std::vector<int32_t> sample_rows;                      // [S]
  std::vector<DeviceSequence> sequences;                 // [N]
  std::vector<int32_t> block_tables;
  std::vector<PrefillWorkItem> prefill_items;
  int32_t num_decode_sequences = 0;  // sequences[0 .. this) have one new token
};

// std::logic_error when a sequence's block table does not cover its tokens.
PackedBatch pack_batch(const BatchLayout& layout, int32_t block_size, int32_t pad_to = 0);

}  // namespace servesim::cuda
