#include "kernels/decoder/device_choice.h"

#include <charconv>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/model_spec.h"

namespace servesim {

std::string DeviceChoice::name() const { return cuda ? fmt::format("cuda:{}", index) : "cpu"; }

DeviceChoice parse_device(const std::string& value) {
  if (value == "cpu") return {};
  if (value == "cuda") return {true, 0};
  if (value.starts_with("cuda:")) {
    const char* first = value.data() + 5;
    const char* last = value.data() + value.size();
    int index = -1;
    const auto [end, error] = std::from_chars(first, last, index);
    if (error == std::errc() && end == last && first != last && index >= 0) return {true, index};
  }
  throw InputError(fmt::format("--device '{}': expected cpu, cuda or cuda:N (N a device ordinal)", value));
}

double decoder_kv_bytes_per_token(const ModelSpec& m, const DeviceChoice& device) {
  const double element = device.cuda ? 2.0 : 4.0;  // bf16 on CUDA, fp32 on the CPU
  return 2.0 * double(m.num_hidden_layers * m.num_key_value_heads * m.head_dim) * element;
}

void require_device(const DeviceChoice& device) {
  if (!device.cuda) return;
  const std::string why = cuda_device_unavailable(device.index);
  if (!why.empty()) throw InputError(fmt::format("--device {}: {}", device.name(), why));
}

}  // namespace servesim
