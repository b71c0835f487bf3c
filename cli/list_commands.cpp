// `servesim models` and `servesim hardware`: the built-in presets.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "sim/hardware_spec.h"
#include "sim/model_spec.h"

namespace servesim::cli {

int models_command(int argc, const char* const* argv) {
  po::options_description o("servesim models: list the built-in model presets\n\nOptions");
  o.add_options()("help,h", "show this help")(
      "model", po::value<std::string>(), "show one model (a preset or a config.json path) instead");
  const auto vm = parse_or_throw(argc, argv, o);
  if (vm.count("help")) {
    std::cout << o;
    return 0;
  }
  std::vector<ModelSpec> models = model_presets();
  if (vm.count("model")) models = {resolve_model(vm["model"].as<std::string>())};
  std::cout << fmt::format("{:<16} {:>5} {:>6} {:>6} {:>4} {:>4} {:>4} {:>7} {:>8} {:>9} {:>10} {:>12}\n",
                           "model", "arch", "d", "I", "L", "H", "Hkv", "vocab", "max_pos",
                           "params(B)", "weights GB", "KV KiB/token");
  for (const ModelSpec& m : models) {
    std::cout << fmt::format("{:<16} {:>5} {:>6} {:>6} {:>4} {:>4} {:>4} {:>7} {:>8} {:>9.3f} {:>10.2f} {:>12.1f}\n",
                             m.name, m.architecture, m.hidden_size, m.intermediate_size,
                             m.num_hidden_layers, m.num_attention_heads, m.num_key_value_heads,
                             m.vocab_size, m.max_position_embeddings, m.parameter_count() / 1e9,
                             m.weight_bytes() / 1e9, m.kv_bytes_per_token() / 1024.0);
  }
  std::cout << "weights and KV in the model's torch_dtype (bf16: 2 bytes); GB = 1e9 bytes\n";
  return 0;
}

int hardware_command(int argc, const char* const* argv) {
  po::options_description o("servesim hardware: list the built-in GPU presets\n\nOptions");
  o.add_options()("help,h", "show this help")("sources", "also print each figure's source");
  const auto vm = parse_or_throw(argc, argv, o);
  if (vm.count("help")) {
    std::cout << o;
    return 0;
  }
  std::cout << fmt::format("{:<10} {:>14} {:>10} {:>10} {:>12}  {}\n", "hardware", "bf16 TFLOP/s",
                           "HBM GB/s", "memory GB", "FLOP/byte", "description");
  for (const HardwareSpec& h : hardware_presets()) {
    std::cout << fmt::format("{:<10} {:>14.1f} {:>10.0f} {:>10.0f} {:>12.0f}  {}\n", h.name,
                             h.bf16_flops / 1e12, h.memory_bandwidth / 1e9, h.memory_bytes / 1e9,
                             h.bf16_flops / h.memory_bandwidth, h.description);
    if (vm.count("sources")) std::cout << "           source: " << h.source << "\n";
  }
  std::cout << "dense bf16 (no sparsity); FLOP/byte is the roofline's ridge point\n";
  return 0;
}

}  // namespace servesim::cli
