// Finds the CUDA backend's entry points (cuda_entry_points.h) and, through
// them, defines the backend's public functions (device_choice.h,
// decoder_model.h) for every program: none of them links the CUDA runtime.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "kernels/cuda_plugin/cuda_entry_points.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/device_choice.h"
#include "sim/errors.h"

// Resolved to the linked table where a program links the backend's objects,
// otherwise null (a weak reference pulls nothing in).
extern "C" const servesim::CudaEntryPoints* servesim_cuda_entry_points() __attribute__((weak));

namespace servesim {
namespace {

constexpr const char* kModuleName = "libservesim_cuda.so";
constexpr const char* kModuleVariable = "SERVESIM_CUDA_PLUGIN";

struct Loaded {
  const CudaEntryPoints* table = nullptr;
  std::string why;  // when table is null
};

// $SERVESIM_CUDA_PLUGIN, else beside the executable, else (test programs
// in the build tree) where this build puts it.
std::filesystem::path module_path() {
  if (const char* env = std::getenv(kModuleVariable); env && *env) return env;
  std::error_code error;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error && std::filesystem::exists(exe.parent_path() / kModuleName, error))
    return exe.parent_path() / kModuleName;
#ifdef SERVESIM_CUDA_MODULE_BUILD_PATH
  if (std::filesystem::exists(SERVESIM_CUDA_MODULE_BUILD_PATH, error)) return SERVESIM_CUDA_MODULE_BUILD_PATH;
#endif
  return error ? std::filesystem::path(kModuleName) : exe.parent_path() / kModuleName;
}

Loaded load() {
  if (servesim_cuda_entry_points) return {servesim_cuda_entry_points(), ""};
#if !SERVESIM_CUDA_BUILT
  return {nullptr,
          "this build has no CUDA backend (nvcc was not found when it was configured; "
          "rebuild where the CUDA toolkit is installed)"};
#else
  const std::filesystem::path path = module_path();
  std::error_code error;
  if (path.has_parent_path() && !std::filesystem::exists(path, error))
    return {nullptr, fmt::format("this build's CUDA backend {} is missing (expected at {}; set {} to its path)",
                                 kModuleName, path.string(), kModuleVariable)};
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return {nullptr, fmt::format("the CUDA backend {} cannot be loaded: {}", path.string(), dlerror())};
  using Entry = const CudaEntryPoints* (*)();
  const auto entry = reinterpret_cast<Entry>(dlsym(handle, "servesim_cuda_entry_points"));
  if (!entry) return {nullptr, fmt::format("{} is not servesim's CUDA backend (no entry points)", path.string())};
  const CudaEntryPoints* table = entry();
  if (!table || table->version != kCudaEntryPointsVersion)
    return {nullptr, fmt::format("{} is another version of servesim's CUDA backend (entry points v{}, expected v{}); "
                                 "rebuild it with this servesim",
                                 path.string(), table ? table->version : -1, kCudaEntryPointsVersion)};
  return {table, ""};
#endif
}

const Loaded& loaded() {
  static const Loaded once = load();  // thread-safe initialisation
  return once;
}

const CudaEntryPoints& require_entry_points(int device) {
  std::string why;
  const CudaEntryPoints* table = cuda_entry_points(&why);
  if (!table) throw InputError(fmt::format("--device cuda:{}: {}", device, why));
  return *table;
}

}  // namespace

const CudaEntryPoints* cuda_entry_points(std::string* why) {
  const Loaded& l = loaded();
  if (!l.table && why) *why = l.why;
  return l.table;
}

bool cuda_backend_loaded() {
  if (servesim_cuda_entry_points) return true;
  // RTLD_NOLOAD: only asks whether the module is already mapped.
  void* handle = dlopen(module_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle) dlclose(handle);  // drops the reference NOLOAD took
  return handle != nullptr;
}

std::string cuda_device_unavailable(int index) {
  std::string why;
  const CudaEntryPoints* table = cuda_entry_points(&why);
  return table ? table->device_unavailable(index) : why;
}

std::unique_ptr<DecoderModel> make_cuda_decoder(HostWeights&& weights, int64_t num_blocks, int32_t block_size,
                                                const CudaDecoderOptions& options) {
  return require_entry_points(options.device).make_decoder(std::move(weights), num_blocks, block_size, options);
}

std::unique_ptr<DecoderModel> make_cuda_decoder_random(const ModelSpec& spec, uint64_t seed, int64_t num_blocks,
                                                       int32_t block_size, const CudaDecoderOptions& options,
                                                       const ModelSpec* layers_of) {
  return require_entry_points(options.device)
      .make_decoder_random(spec, seed, num_blocks, block_size, options, layers_of);
}

}  // namespace servesim
