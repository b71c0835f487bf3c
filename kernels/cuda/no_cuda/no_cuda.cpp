// The CUDA entry points of a build without nvcc: each says so.
#include <fmt/format.h>

#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/device_choice.h"
#include "sim/errors.h"

namespace servesim {

std::string cuda_device_unavailable(int) {
  return "this build has no CUDA backend (nvcc was not found when it was configured; "
         "rebuild where the CUDA toolkit is installed)";
}

std::unique_ptr<DecoderModel> make_cuda_decoder(HostWeights&&, int64_t, int32_t, const CudaDecoderOptions& o) {
  throw InputError(fmt::format("--device cuda:{}: {}", o.device, cuda_device_unavailable(o.device)));
}

std::unique_ptr<DecoderModel> make_cuda_decoder_random(const ModelSpec&, uint64_t, int64_t, int32_t,
                                                       const CudaDecoderOptions& o, const ModelSpec*) {
  throw InputError(fmt::format("--device cuda:{}: {}", o.device, cuda_device_unavailable(o.device)));
}

}  // namespace servesim
