// `servesim models` and `servesim hardware`: the built-in presets.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "sim/config_json.h"
#include "sim/errors.h"
#include "sim/hardware_spec.h"
#include "sim/interconnect.h"
#include "sim/model_spec.h"

namespace servesim::cli {

int models_command(int argc, const char* const* argv) {
  po::options_description o("servesim models: list the built-in model presets\n\nOptions");
  o.add_options()("help,h", "show this help")(
      "model", po::value<std::string>(), "show one model (a preset or a config.json path) instead")(
      "config-json", "with --model: print the model as a Hugging Face config.json (what --model FILE reads back; "
                     "tools/llamacpp/write_gguf.py writes a GGUF of its shape)");
  const auto vm = parse_or_throw(argc, argv, o);
  if (vm.count("help")) {
    std::cout << o;
    return 0;
  }
  if (vm.count("config-json")) {
    if (!vm.count("model")) throw InputError("--config-json needs --model NAME: the model to print");
    std::cout << hf_config_json(resolve_model(vm["model"].as<std::string>())).dump(2) << "\n";
    return 0;
  }
  std::vector<ModelSpec> models = model_presets();
  if (vm.count("model")) models = {resolve_model(vm["model"].as<std::string>())};
  auto as = [](ModelSpec m, WeightQuantization w, KvCacheDtype kv) {
    m.quantization.weights = w;
    m.quantization.kv_cache = kv;
    return m;
  };
  std::cout << fmt::format("{:<16} {:>5} {:>6} {:>6} {:>4} {:>4} {:>4} {:>7} {:>8} {:>9} {:>10} {:>8} {:>8} {:>12} {:>9}\n",
                           "model", "arch", "d", "I", "L", "H", "Hkv", "vocab", "max_pos", "params(B)",
                           "weights GB", "8-bit GB", "w4a16 GB", "KV KiB/token", "KV 8-bit");
  for (const ModelSpec& m : models) {
    const ModelSpec w8 = as(m, WeightQuantization::Fp8, KvCacheDtype::Fp8E4M3);
    const ModelSpec w4 = as(m, WeightQuantization::W4A16, KvCacheDtype::Auto);
    std::cout << fmt::format(
        "{:<16} {:>5} {:>6} {:>6} {:>4} {:>4} {:>4} {:>7} {:>8} {:>9.3f} {:>10.2f} {:>8.2f} {:>8.2f} {:>12.1f} {:>9.1f}\n",
        m.name, m.architecture, m.hidden_size, m.intermediate_size, m.num_hidden_layers, m.num_attention_heads,
        m.num_key_value_heads, m.vocab_size, m.max_position_embeddings, m.parameter_count() / 1e9,
        m.weight_bytes() / 1e9, w8.weight_bytes() / 1e9, w4.weight_bytes() / 1e9, m.kv_bytes_per_token() / 1024.0,
        w8.kv_bytes_per_token() / 1024.0);
  }
  std::cout << "weights and KV in the model's torch_dtype (bf16: 2 bytes); 8-bit: fp8, int8 and w8a16 linear layers "
               "with fp32 per-channel scales (w4a16: int4 in groups of 128 with fp16 scales), the embedding and LM "
               "head in torch_dtype; KV 8-bit: fp8 (int8 adds 8 bytes per token, layer and KV head); GB = 1e9 "
               "bytes (docs/quantization.md)\n";
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
  std::cout << fmt::format("{:<10} {:>14} {:>13} {:>12} {:>10} {:>10} {:>12}  {:<15} {}\n", "hardware",
                           "bf16 TFLOP/s", "fp8 TFLOP/s", "int8 TOP/s", "HBM GB/s", "memory GB", "FLOP/byte",
                           "interconnect", "description");
  auto rate = [](double ops) { return ops > 0 ? fmt::format("{:.1f}", ops / 1e12) : std::string("-"); };
  for (const HardwareSpec& h : hardware_presets()) {
    const Interconnect& link = interconnect_for_hardware(h.name);
    std::cout << fmt::format("{:<10} {:>14.1f} {:>13} {:>12} {:>10.0f} {:>10.0f} {:>12.0f}  {:<15} {}\n", h.name,
                             h.bf16_flops / 1e12, rate(h.fp8_flops), rate(h.int8_ops), h.memory_bandwidth / 1e9,
                             h.memory_bytes / 1e9, h.bf16_flops / h.memory_bandwidth, link.name, h.description);
    if (vm.count("sources")) {
      std::cout << "           source: " << h.source << "\n";
      std::cout << "           interconnect: " << link.description << "; " << link.source << "\n";
    }
  }
  std::cout << "dense rates (no sparsity; -: no such tensor cores); FLOP/byte is the bf16 roofline's ridge point; "
               "interconnect: what --tensor-parallel-size and --pipeline-parallel-size communicate over "
               "(docs/parallelism.md)\n";
  return 0;
}

}  // namespace servesim::cli
