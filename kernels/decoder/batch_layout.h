// The packed (varlen) batch one forward pass computes, built from an
// IterationPlan: every scheduled sequence's new tokens one after another.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
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
  // [S] rows whose logits are wanted, in the order the logits come back: a
  // sequence's last new token, or its last n (a speculative verification
  // wants every row of its k' + 1 query tokens).
  std::vector<int32_t> sample_rows;

  int32_t num_tokens() const { return int32_t(tokens.size()); }
  int32_t num_samples() const { return int32_t(sample_rows.size()); }
  void clear() {
    tokens.clear();
    positions.clear();
    sequences.clear();
    sample_rows.clear();
  }
  // Appends a sequence's new tokens (positions c .. c + ids.size() - 1),
  // asking for the logits of its last row when `sample`.
  void add_sequence(std::span<const int32_t> ids, int32_t num_cached,
                    std::span<const int32_t> block_table, bool sample) {
    add_sequence_sampling_last(ids, num_cached, block_table, sample ? 1 : 0);
  }
  // The same, asking for the logits of its last `num_samples` rows (0 ..
  // ids.size()), in position order.
  void add_sequence_sampling_last(std::span<const int32_t> ids, int32_t num_cached,
                                  std::span<const int32_t> block_table, int32_t num_samples) {
    if (num_samples < 0 || size_t(num_samples) > ids.size())
      throw std::logic_error("BatchLayout: a sequence samples between 0 and all of its new rows");
    SequenceSlice s;
    s.first_row = num_tokens();
    s.num_query = int32_t(ids.size());
    s.num_cached = num_cached;
    s.block_table = block_table;
    for (size_t i = 0; i < ids.size(); ++i) {
      tokens.push_back(ids[i]);
      positions.push_back(num_cached + int32_t(i));
    }
    for (int32_t r = num_tokens() - num_samples; r < num_tokens(); ++r) sample_rows.push_back(r);
    sequences.push_back(s);
  }
};

}  // namespace servesim
