// libFuzzer: the safetensors reader (kernels/decoder/safetensors.h) on any
// file, then every tensor it lists read back at its own shape.
#include "fuzz_support.h"
#include "kernels/decoder/safetensors.h"
#include "sim/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  const std::string& path = fuzz::write_input(data, size, ".safetensors");
  try {
    const SafetensorsFile file(path);
    for (const std::string& name : file.names()) {
      const TensorInfo& info = file.info(name);
      fuzz::require(info.begin <= info.end, "a tensor whose range ends before it begins");
      const std::vector<float> values = file.read_f32(name, info.shape);
      fuzz::require(static_cast<int64_t>(values.size()) == info.numel(), "read_f32 size differs from numel");
    }
  } catch (const InputError&) {
  }
  return 0;
}
