// The CUDA backend's entry points, as one table. The CUDA backend (kernels/
// cuda and the CUDA calibration, calib/*cuda*) is built as a shared module,
// libservesim_cuda.so, that `servesim` opens only when a command uses a CUDA
// device: simulate, sweep, capacity and every CPU run never load the CUDA
// runtime or cuBLAS (hundreds of MB and 0.1-0.3 s at start-up). Programs that
// call the backend's internals directly (the CUDA tests and benchmark) link
// its objects instead, and the loader then uses the linked table.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace servesim {

class DecoderModel;
struct HostWeights;
struct ModelSpec;
struct CudaDecoderOptions;
struct CalibrationOptions;
struct DeviceProfile;

// Bumped whenever a signature below changes: a module of another version is
// refused by name rather than called with the wrong arguments.
inline constexpr int kCudaEntryPointsVersion = 1;

struct CudaEntryPoints {
  int version = kCudaEntryPointsVersion;
  // "" when device `index` can run the decoder, otherwise why not.
  std::string (*device_unavailable)(int index) = nullptr;
  std::unique_ptr<DecoderModel> (*make_decoder)(HostWeights&& weights, int64_t num_blocks, int32_t block_size,
                                                const CudaDecoderOptions& options) = nullptr;
  std::unique_ptr<DecoderModel> (*make_decoder_random)(const ModelSpec& spec, uint64_t seed, int64_t num_blocks,
                                                       int32_t block_size, const CudaDecoderOptions& options,
                                                       const ModelSpec* layers_of) = nullptr;
  DeviceProfile (*calibrate)(const CalibrationOptions& options,
                             std::function<void(const std::string&)> progress) = nullptr;
};

// The backend's table: the linked one where a program links the backend's
// objects, otherwise libservesim_cuda.so opened on first use (from
// $SERVESIM_CUDA_PLUGIN, else beside the running executable). nullptr when
// there is none, with the reason in *why (this build has no CUDA backend, the
// module is missing, it cannot be loaded: the loader's message).
const CudaEntryPoints* cuda_entry_points(std::string* why);

// Whether this process has the CUDA backend mapped (linked or loaded).
bool cuda_backend_loaded();

}  // namespace servesim

// Defined by the backend (kernels/cuda_plugin/plugin_entry.cpp).
extern "C" const servesim::CudaEntryPoints* servesim_cuda_entry_points();
