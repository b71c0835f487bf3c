// A packed batch's index arrays on the device: token ids, positions, KV
// slots, sampling rows, per-sequence records, block tables and the prefill
// attention's work items. They are written into one page-locked staging
// buffer and reach the device in one asynchronous copy, into one device
// buffer at fixed offsets, so a captured CUDA graph keeps reading the right
// addresses as long as the capacity has not grown (generation()).
//
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/pinned_buffer.h"
#include "kernels/decoder/batch_layout.h"

namespace servesim::cuda {

class BatchMetadata {
 public:
  // Stages `layout` as pack_batch (batch_packing.h) lays it out, padded to
  // `pad_to` one-token sequences when that is larger (CUDA graph buckets;
  // the padding rows' logits are not wanted). Grows the buffers when needed.
  void stage(const BatchLayout& layout, int32_t block_size, int32_t pad_to = 0);
  // One host-to-device copy of what stage() wrote.
  void upload(cudaStream_t stream);
  // Reserves room for batches up to these sizes without staging anything
  // (before a graph capture, which may not allocate).
  void reserve(int32_t tokens, int32_t samples, int32_t sequences, int32_t block_entries, int32_t prefill_items);

  int32_t num_tokens() const { return tokens_; }
  int32_t num_samples() const { return samples_; }
  int32_t num_sequences() const { return sequences_; }
  int32_t num_decode_sequences() const { return decode_sequences_; }
  int32_t num_prefill_items() const { return prefill_items_; }
  // Changes whenever the device buffer is reallocated.
  int64_t generation() const { return generation_; }

  const int32_t* tokens() const { return device_.data() + off_.tokens; }
  const int32_t* positions() const { return device_.data() + off_.positions; }
  const int32_t* slot_mapping() const { return device_.data() + off_.slots; }
  const int32_t* sample_rows() const { return device_.data() + off_.sample_rows; }
  const DeviceSequence* sequences() const;
  const int32_t* block_tables() const { return device_.data() + off_.block_tables; }
  const PrefillWorkItem* prefill_items() const;

 private:
  struct Capacity {
    int32_t tokens = 0, samples = 0, sequences = 0, block_entries = 0, prefill_items = 0;
  };
  struct Offsets {  // in int32 elements
    size_t tokens = 0, positions = 0, slots = 0, sample_rows = 0, sequences = 0, block_tables = 0,
           prefill_items = 0, total = 0;
  };
  static Offsets offsets_for(const Capacity& c);
  void ensure(const Capacity& wanted);

  Capacity capacity_;
  Offsets off_;
  PinnedBuffer<int32_t> host_;
  DeviceBuffer<int32_t> device_;
  int64_t generation_ = 0;
  int32_t tokens_ = 0, samples_ = 0, sequences_ = 0, decode_sequences_ = 0, prefill_items_ = 0;
};

}  // namespace servesim::cuda
