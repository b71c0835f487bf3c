// The CUDA backend's table of entry points (cuda_entry_points.h): the one
// symbol libservesim_cuda.so is opened for.
#include "calib/calibrate.h"
#include "calib/calibrate_cuda.h"
#include "kernels/cuda/cuda_decoder.h"
#include "kernels/cuda_plugin/cuda_entry_points.h"

extern "C" __attribute__((visibility("default"))) const servesim::CudaEntryPoints* servesim_cuda_entry_points() {
  static const servesim::CudaEntryPoints table{
      servesim::kCudaEntryPointsVersion, servesim::cuda::device_unavailable, servesim::cuda::make_decoder,
      servesim::cuda::make_decoder_random, servesim::calibrate_cuda};
  return &table;
}
