#include "kernels/cuda/batch_metadata.h"

#include "kernels/cuda/batch_packing.h"

#include <algorithm>
#include <stdexcept>

namespace servesim::cuda {
namespace {

static_assert(sizeof(DeviceSequence) == 4 * sizeof(int32_t), "DeviceSequence is four int32");
static_assert(sizeof(PrefillWorkItem) == 3 * sizeof(int32_t), "PrefillWorkItem is three int32");

// Rounded up to 16-byte boundaries so every array is aligned for vector loads.
size_t aligned4(size_t n) { return (n + 3) / 4 * 4; }

}  // namespace

const DeviceSequence* BatchMetadata::sequences() const {
  return reinterpret_cast<const DeviceSequence*>(device_.data() + off_.sequences);
}
const PrefillWorkItem* BatchMetadata::prefill_items() const {
  return reinterpret_cast<const PrefillWorkItem*>(device_.data() + off_.prefill_items);
}

BatchMetadata::Offsets BatchMetadata::offsets_for(const Capacity& c) {
  Offsets o;
  size_t at = 0;
  auto take = [&](size_t n) {
    const size_t here = at;
    at += aligned4(n);
    return here;
  };
  o.tokens = take(size_t(c.tokens));
  o.positions = take(size_t(c.tokens));
  o.slots = take(size_t(c.tokens));
  o.sample_rows = take(size_t(c.samples));
  o.sequences = take(4 * size_t(c.sequences));
  o.block_tables = take(size_t(c.block_entries));
  o.prefill_items = take(3 * size_t(c.prefill_items));
  o.total = at;
  return o;
}

void BatchMetadata::ensure(const Capacity& w) {
  if (w.tokens <= capacity_.tokens && w.samples <= capacity_.samples && w.sequences <= capacity_.sequences &&
      w.block_entries <= capacity_.block_entries && w.prefill_items <= capacity_.prefill_items)
    return;
  // Grow with headroom so that a slowly growing context does not reallocate
  // (and invalidate graphs) on every step.
  auto grow = [](int32_t have, int32_t want) { return want <= have ? have : std::max(want, have + have / 2); };
  capacity_.tokens = grow(capacity_.tokens, std::max(w.tokens, 1));
  capacity_.samples = grow(capacity_.samples, std::max(w.samples, 1));
  capacity_.sequences = grow(capacity_.sequences, std::max(w.sequences, 1));
  capacity_.block_entries = grow(capacity_.block_entries, std::max(w.block_entries, 1));
  capacity_.prefill_items = grow(capacity_.prefill_items, std::max(w.prefill_items, 1));
  off_ = offsets_for(capacity_);
  host_.reserve(off_.total);
  device_.resize(off_.total);
  ++generation_;
}

void BatchMetadata::reserve(int32_t tokens, int32_t samples, int32_t sequences, int32_t block_entries,
                            int32_t prefill_items) {
  ensure({tokens, samples, sequences, block_entries, prefill_items});
}

void BatchMetadata::stage(const BatchLayout& layout, int32_t block_size, int32_t pad_to) {
  const PackedBatch p = pack_batch(layout, block_size, pad_to);
  ensure({int32_t(p.tokens.size()), int32_t(p.sample_rows.size()), int32_t(p.sequences.size()),
          int32_t(p.block_tables.size()), int32_t(p.prefill_items.size())});
  int32_t* h = host_.data();
  std::copy(p.tokens.begin(), p.tokens.end(), h + off_.tokens);
  std::copy(p.positions.begin(), p.positions.end(), h + off_.positions);
  std::copy(p.slot_mapping.begin(), p.slot_mapping.end(), h + off_.slots);
  std::copy(p.sample_rows.begin(), p.sample_rows.end(), h + off_.sample_rows);
  std::copy(p.sequences.begin(), p.sequences.end(), reinterpret_cast<DeviceSequence*>(h + off_.sequences));
  std::copy(p.block_tables.begin(), p.block_tables.end(), h + off_.block_tables);
  std::copy(p.prefill_items.begin(), p.prefill_items.end(), reinterpret_cast<PrefillWorkItem*>(h + off_.prefill_items));
  tokens_ = int32_t(p.tokens.size());
  samples_ = int32_t(p.sample_rows.size());
  sequences_ = int32_t(p.sequences.size());
  decode_sequences_ = p.num_decode_sequences;
  prefill_items_ = int32_t(p.prefill_items.size());
}

void BatchMetadata::upload(cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(device_.data(), host_.data(), off_.total * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream));
}

}  // namespace servesim::cuda
