// How an executor pads a decode step before it runs it. The CUDA decoder
// replays steps in which every sequence decodes one token and samples it
// from CUDA graphs captured for batch buckets (1, 2, 4, then multiples of
// 8, as vLLM's CUDA-graph capture sizes), and pads a batch with one-token
// rows at context 1 up to its bucket (kernels/cuda/cuda_decoder.cpp,
// kernels/cuda/batch_packing.h), so its time follows the bucket, not the
// batch (docs/cost-models.md, "Padded decode steps"). A profile carries the
// rule of the executor it was measured on (JSON "decode_padding", absent
// for none: the CPU decoder pads nothing), and the ProfileModel costs such
// a step at its bucket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace servesim {

struct DecodePadding {
  std::vector<int64_t> sizes;  // the buckets below the first multiple, ascending, >= 1
  int64_t multiple = 0;        // then multiples of this; 0: no padding
  int64_t max_batch = 0;       // batches of more sequences run unpadded

  bool enabled() const { return multiple > 0; }
  // The batch size a decode step of n sequences runs at: n itself when
  // padding is off or n is above max_batch, else the smallest of `sizes`
  // not below n, else n rounded up to `multiple`.
  int64_t bucket(int64_t n) const;

  // The CUDA decoder's rule for decode batches of up to max_batch sequences.
  static DecodePadding cuda_graphs(int64_t max_batch);

  nlohmann::json to_json() const;
  // Throws InputError naming `where` for a malformed rule.
  static DecodePadding from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace servesim
