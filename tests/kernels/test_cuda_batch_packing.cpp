// The CUDA backend's batch packing (kernels/cuda/batch_packing.h): pure host
// code, tested here without a GPU. Built where the CUDA backend is.
#if SERVESIM_WITH_CUDA
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/cuda/batch_packing.h"

using namespace servesim;
using servesim::cuda::pack_batch;

namespace {

std::vector<int32_t> ids(int32_t n, int32_t first) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

}  // namespace

TEST_CASE("pack_batch: decode sequences first, slots from the block tables, prefill tiles", "[cuda-packing]") {
  const int32_t bs = 4;
  // A prefill chunk of 70 tokens after 2 cached, a decode at position 9, a
  // 3-token verification after 5 cached.
  const std::vector<int32_t> table_a = {7, 3, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
  const std::vector<int32_t> table_b = {5, 2, 8};
  const std::vector<int32_t> table_c = {1, 6};
  const auto a = ids(70, 100), b = ids(1, 200), c = ids(3, 300);
  BatchLayout layout;
  layout.add_sequence(a, 2, table_a, true);
  layout.add_sequence(b, 9, table_b, true);
  layout.add_sequence_sampling_last(c, 5, table_c, 3);
  const auto p = pack_batch(layout, bs);

  REQUIRE(p.tokens == layout.tokens);
  REQUIRE(p.positions == layout.positions);
  REQUIRE(p.sample_rows == layout.sample_rows);
  // Token i of a at position 2 + i: block table_a[(2 + i) / 4], offset (2 + i) % 4.
  for (int32_t i = 0; i < 70; ++i)
    REQUIRE(p.slot_mapping[size_t(i)] == table_a[size_t((2 + i) / bs)] * bs + (2 + i) % bs);
  REQUIRE(p.slot_mapping[70] == table_b[2] * bs + 1);  // position 9
  REQUIRE(p.slot_mapping[71] == table_c[1] * bs + 1);  // positions 5, 6, 7
  REQUIRE(p.slot_mapping[73] == table_c[1] * bs + 3);

  // The decode (b) first; then a and c with their work items.
  REQUIRE(p.num_decode_sequences == 1);
  REQUIRE(p.sequences.size() == 3);
  CHECK(p.sequences[0].first_row == 70);
  CHECK(p.sequences[0].num_query == 1);
  CHECK(p.sequences[0].num_cached == 9);
  CHECK(p.sequences[1].first_row == 0);
  CHECK(p.sequences[1].num_query == 70);
  CHECK(p.sequences[2].first_row == 71);
  // Block tables packed: b uses 3 entries (10 tokens), a 18 (72), c 2 (8).
  REQUIRE(p.block_tables.size() == 3 + 18 + 2);
  CHECK(p.sequences[0].block_offset == 0);
  CHECK(p.sequences[1].block_offset == 3);
  CHECK(p.sequences[2].block_offset == 21);
  CHECK(p.block_tables[3] == 7);
  CHECK(p.block_tables[21] == 1);
  // a's 70 queries: tiles of 64 and 6; c: one tile of 3.
  REQUIRE(p.prefill_items.size() == 3);
  CHECK(p.prefill_items[0].sequence == 1);
  CHECK(p.prefill_items[0].first_query == 0);
  CHECK(p.prefill_items[0].num_query == cuda::kPrefillQueryTile);
  CHECK(p.prefill_items[1].first_query == cuda::kPrefillQueryTile);
  CHECK(p.prefill_items[1].num_query == 70 - cuda::kPrefillQueryTile);
  CHECK(p.prefill_items[2].sequence == 2);
  CHECK(p.prefill_items[2].num_query == 3);
}

TEST_CASE("pack_batch: padding rows of a graph bucket write nothing and read block 0", "[cuda-packing]") {
  const std::vector<int32_t> t1 = {4, 5}, t2 = {6};
  const std::vector<int32_t> x = {11}, y = {12};
  BatchLayout layout;
  layout.add_sequence(x, 5, t1, true);
  layout.add_sequence(y, 0, t2, true);
  const auto p = pack_batch(layout, 4, 8);
  REQUIRE(p.tokens.size() == 8);
  REQUIRE(p.sample_rows.size() == 8);
  REQUIRE(p.sequences.size() == 8);
  REQUIRE(p.num_decode_sequences == 8);
  CHECK(p.slot_mapping[0] == 5 * 4 + 1);
  CHECK(p.slot_mapping[1] == 6 * 4 + 0);
  for (size_t r = 2; r < 8; ++r) {
    CHECK(p.tokens[r] == 0);
    CHECK(p.positions[r] == 0);
    CHECK(p.slot_mapping[r] == -1);
    CHECK(p.sample_rows[r] == int32_t(r));
    CHECK(p.sequences[r].first_row == int32_t(r));
    CHECK(p.sequences[r].num_cached == 0);
    CHECK(p.block_tables[size_t(p.sequences[r].block_offset)] == 0);
  }
  CHECK(p.prefill_items.empty());
  // No padding asked, or fewer than the sequences: none added.
  CHECK(pack_batch(layout, 4, 0).tokens.size() == 2);
  CHECK(pack_batch(layout, 4, 1).tokens.size() == 2);
}

TEST_CASE("pack_batch: a block table too short is a logic error", "[cuda-packing]") {
  const std::vector<int32_t> table = {3};
  const auto five = ids(5, 10);
  BatchLayout layout;
  layout.add_sequence(five, 0, table, true);  // 5 tokens need 2 blocks of 4
  REQUIRE_THROWS_AS(pack_batch(layout, 4), std::logic_error);
}
#endif
