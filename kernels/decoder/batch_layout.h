// The packed (varlen) batch one forward pass computes, built from an
// IterationPlan: every scheduled sequence's new tokens one after another.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace servesim {

struct SequenceSlice {
  int32_t first_row = 0;   // row of its first new token in the packed batch
  int32_t num_query = 0;   // q: new tokens this pass
  int32_t num_cached = 0;  // c: tokens already in the KV cache; new token i sits at position c + i
  std::span<const int32_t> block_table;  // KV blocks holding positions 0 .. c + q - 1
};

struct BatchLayout {
  std::vector<int32_t> tokens;     // [T] token ids, packed
  std::vector<int32_t> positions;  // [T] position of each token in its sequence
  std::vector<SequenceSlice> sequences;
  std::vector<int32_t> sample_rows;  // [S] rows whose logits are wanted (a sequence's last new token)

  int32_t num_tokens() const { return int32_t(tokens.size()); }
  int32_t num_samples() const { return int32_t(sample_rows.size()); }
  void clear() {
    tokens.clear();
    positions.clear();
    sequences.clear();
    sample_rows.clear();
  }
  // Appends a sequence's new tokens (positions c .. c + ids.size() - 1).
  void add_sequence(std::span<const int32_t> ids, int32_t num_cached,
                    std::span<const int32_t> block_table, bool sample) {
    SequenceSlice s;
    s.first_row = num_tokens();
    s.num_query = int32_t(ids.size());
    s.num_cached = num_cached;
    s.block_table = block_table;
    for (size_t i = 0; i < ids.size(); ++i) {
      tokens.push_back(ids[i]);
      positions.push_back(num_cached + int32_t(i));
    }
    if (sample) sample_rows.push_back(num_tokens() - 1);
    sequences.push_back(s);
  }
};

}  // namespace servesim
