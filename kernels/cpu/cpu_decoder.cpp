// The DecoderModel of the CPU backend: the shared forward pass over
// cpu::Backend.
#include <fmt/format.h>
#include <omp.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/forward.h"

namespace servesim {
namespace {

class CpuDecoder final : public DecoderModel {
 public:
  CpuDecoder(HostWeights&& weights, int64_t num_blocks, int32_t block_size, int threads)
      : backend_(weights.spec),
        weights_(backend_.upload(std::move(weights))),
        kv_(backend_.make_kv_cache(num_blocks, block_size)),
        threads_(threads) {}

  const ModelSpec& spec() const override { return backend_.spec(); }
  std::string device() const override { return fmt::format("cpu ({} threads)", threads_); }
  double weight_bytes() const override {
    double n = double(weights_.embedding.size() + weights_.final_norm.size() + weights_.lm_head.size());
    for (const auto& L : weights_.layers)
      n += double(L.attn_norm.size() + L.w_qkv.size() + L.b_qkv.size() + L.w_o.size() +
                  L.mlp_norm.size() + L.w_gate_up.size() + L.w_down.size());
    return n * sizeof(float);
  }
  double kv_cache_bytes() const override { return kv_.bytes(); }

  const std::vector<float>& forward(const BatchLayout& layout) override {
    omp_set_num_threads(threads_);
    servesim::forward(backend_, weights_, kv_, scratch_, layout);
    const auto& m = scratch_.logits;
    logits_.assign(m.data(), m.data() + m.size());
    return logits_;
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
  return std::make_unique<CpuDecoder>(std::move(weights), num_blocks, block_size, threads);
}

}  // namespace servesim
