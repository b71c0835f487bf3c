// The CUDA backend's decoder factory and device check, reached from outside
// the backend through its entry points (kernels/cuda_plugin/): the public
// make_cuda_decoder* and cuda_device_unavailable (decoder_model.h,
// device_choice.h) call these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/decoder/decoder_model.h"

namespace servesim::cuda {

std::string device_unavailable(int index);
std::unique_ptr<DecoderModel> make_decoder(HostWeights&& weights, int64_t num_blocks, int32_t block_size,
                                           const CudaDecoderOptions& options);
std::unique_ptr<DecoderModel> make_decoder_random(const ModelSpec& spec, uint64_t seed, int64_t num_blocks,
                                                  int32_t block_size, const CudaDecoderOptions& options,
                                                  const ModelSpec* layers_of);

}  // namespace servesim::cuda
