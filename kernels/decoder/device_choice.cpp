#include "kernels/decoder/device_choice.h"

#include <charconv>

#include <fmt/format.h>

#include "sim/errors.h"

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

void check_cpu_threads(int threads) {
  if (threads < 0 || threads > kMaxCpuThreads)
    throw InputError(fmt::format("--threads must be in 0 .. {} (0: every core; got {})", kMaxCpuThreads, threads));
}

void require_device(const DeviceChoice& device) {
  if (!device.cuda) return;
  const std::string why = cuda_device_unavailable(device.index);
  if (!why.empty()) throw InputError(fmt::format("--device {}: {}", device.name(), why));
}

}  // namespace servesim
