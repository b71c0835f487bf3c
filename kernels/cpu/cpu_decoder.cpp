// The DecoderModel of the CPU backend: the shared forward pass over
// cpu::Backend.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <omp.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/forward.h"

namespace servesim {
namespace {

class CpuDecoder final : public DecoderModel {
 public:
  CpuDecoder(HostWeights&& weights, int64_t num_blocks, int32_t block_size, int threads,
             const cpu::Precision& precision)
      : backend_(weights.spec, precision),
        weights_(backend_.upload(std::move(weights))),
        kv_(backend_.make_kv_cache(num_blocks, block_size)),
        threads_(threads) {}

  const ModelSpec& spec() const override { return backend_.spec(); }
  std::string device() const override {
    if (backend_.precision() == cpu::Precision{}) return fmt::format("cpu ({} threads)", threads_);
    return fmt::format("cpu ({} threads; {})", threads_, cpu::to_string(backend_.precision()));
  }
  double weight_bytes() const override { return weights_.bytes(); }
  double kv_cache_bytes() const override { return kv_.bytes(); }
  int64_t kv_num_blocks() const override { return kv_.num_blocks; }
  int32_t kv_block_size() const override { return kv_.block_size; }

  const std::vector<float>& forward(const BatchLayout& layout) override {
    omp_set_num_threads(threads_);
    servesim::forward(backend_, weights_, kv_, scratch_, layout);
    const auto& m = scratch_.logits;
    logits_.assign(m.data(), m.data() + m.size());
    return logits_;
  }

  void read_kv(int32_t layer, std::span<const int32_t> block_table, int32_t position, std::span<float> k,
               std::span<float> v) const override {
    const int64_t dh = kv_.head_dim, bs = kv_.block_size;
    if (layer < 0 || layer >= kv_.layers || position < 0 || size_t(position / bs) >= block_table.size() ||
        k.size() != size_t(kv_.kv_heads * dh) || v.size() != k.size())
      throw std::logic_error("CpuDecoder::read_kv: layer, position or buffer size out of range");
    const int64_t block = block_table[size_t(position / bs)], slot = position % bs;
    std::vector<float> rows(size_t((slot + 1) * dh));  // the block's rows up to the slot, in fp32
    for (int64_t g = 0; g < kv_.kv_heads; ++g) {
      kv_.load_k(layer, block, g, slot + 1, rows.data());
      std::copy_n(rows.data() + slot * dh, dh, k.data() + g * dh);
      kv_.load_v(layer, block, g, slot + 1, rows.data());
      std::copy_n(rows.data() + slot * dh, dh, v.data() + g * dh);
    }
  }

 private:
  cpu::Backend backend_;
  cpu::Weights weights_;
  cpu::KvCache kv_;
  cpu::Scratch scratch_;
  int threads_;
  std::vector<float> logits_;
};

}  // namespace

std::unique_ptr<DecoderModel> make_cpu_decoder(HostWeights&& weights, int64_t num_blocks,
                                               int32_t block_size, const CpuDecoderOptions& options) {
  const int threads = options.threads > 0 ? options.threads : omp_get_num_procs();
  return std::make_unique<CpuDecoder>(std::move(weights), num_blocks, block_size, threads, options.precision);
}

}  // namespace servesim
