#include "cli/engine_options.h"

#include <exception>

#include <fmt/format.h>

#include "kernels/decoder/device_choice.h"
#include "kernels/decoder/host_weights.h"
#include "sim/errors.h"
#include "sim/model_spec.h"
#include "sim/quantization.h"

namespace servesim::cli {

double parse_bytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  if (used == 0 || scale == 0 || !(value > 0))
    throw InputError(fmt::format("{}: '{}' is not a size > 0 (examples: 2GiB, 512MiB, 1.5GB)", flag, text));
  return value * scale;
}

void add_engine_options(po::options_description& general) {
  general.add_options()
      ("device", po::value<std::string>()->default_value("cpu"),
       "cpu, or cuda / cuda:N (the CUDA backend: bf16, cuBLAS, CUDA graphs; needs a build with nvcc and an "
       "sm_90 GPU)")
      ("model", po::value<std::string>()->default_value("small-110m"),
       "a preset or a Hugging Face config.json; with --weights, defaults to the weights' config.json")
      ("weights", po::value<std::string>(),
       "folder with model.safetensors (or a sharded model.safetensors.index.json) and config.json; "
       "random weights when absent")
      ("weights-seed", po::value<std::string>()->default_value("0"), "seed of the random weights")
      ("threads", po::value<int>()->default_value(0), "CPU threads, 0 .. 1024 (0: every core; cpu only)")
      ("warm-up-tokens", po::value<int32_t>()->default_value(256),
       "before the clock starts, warm each decoder up with a prefill of this many tokens (capped by "
       "--max-num-batched-tokens) and 4 decode steps, as serving engines do at start-up; on cuda it also "
       "readies the largest batch (activations, every GEMM bucket's kernel, every decode bucket's CUDA graph); "
       "0: none")
      ("kv-cache-memory", po::value<std::string>()->default_value("1GiB"),
       "memory for the KV cache (in its --kv-cache-dtype: fp32 on cpu and bf16 on cuda by default), which sets "
       "--num-gpu-blocks unless that is given")
      ("temperature", po::value<double>()->default_value(0.0, "0"), "0 = greedy")
      ("top-p", po::value<double>()->default_value(1.0, "1"), "nucleus sampling threshold")
      ("honor-eos", "stop a request at the model's eos_token_id (default: generate exactly "
                    "its output length, as benchmark clients do)");
  add_precision_options(general);
}

void add_precision_options(po::options_description& general) {
  general.add_options()
      ("dtype", po::value<std::string>()->default_value("auto"),
       "the weights' and activations' dtype: auto (float32 on cpu, bfloat16 on cuda), float32 (cpu), bfloat16; "
       "the CPU computes in fp32 and stores bf16 weights and KV")
      ("quantization", po::value<std::string>()->default_value("none"),
       "none, or w8a16 on cpu (int8 linear layers, a scale per output channel; the embedding and LM head stay "
       "in --dtype); `servesim simulate --quantization` predicts fp8, int8 and w4a16 (docs/quantization.md)")
      ("kv-cache-dtype", po::value<std::string>()->default_value("auto"),
       "auto (the --dtype), or int8 on cpu (a scale per token and KV head)");
}

void add_speculative_engine_options(po::options_description& general) {
  general.add_options()
      ("draft-model", po::value<std::string>(),
       "speculative decoding's draft: a preset or a config.json sharing the target's vocabulary (e.g. "
       "tiny-15m for small-110m); with --draft-weights, defaults to that folder's config.json")
      ("draft-weights", po::value<std::string>(), "safetensors folder of the draft; random weights when absent")
      ("draft-weights-seed", po::value<std::string>(), "seed of the draft's random weights (default: --weights-seed)")
      ("self-draft-layers", po::value<int32_t>(),
       "draft with the target's own first L layers, embedding and head (L in 1 .. layers - 1)")
      ("acceptance-rate", po::value<double>(),
       "controlled acceptance: accept each draft token with this probability (real compute, acceptance "
       "set by you); default: real acceptance, exact at --temperature 0, rejection sampling above");
}

namespace {

// The speculative flags, where the command defines them (vm.count is 0 for
// a flag a command does not have, as for one not given).
SpeculativeSetup speculative_setup_from(const po::variables_map& vm, const EngineSetup& setup) {
  SpeculativeSetup s;
  const bool weights = vm.count("draft-weights") > 0, self = vm.count("self-draft-layers") > 0;
  if (weights && self)
    throw InputError("--draft-weights and --self-draft-layers: a self-draft uses the target's own weights");
  if (vm.count("draft-weights-seed") && !vm.count("draft-model"))
    throw InputError("--draft-weights-seed: needs --draft-model (the seed of its random weights)");
  if (weights) s.draft_weights_dir = vm["draft-weights"].as<std::string>();
  if (vm.count("draft-model")) s.draft_model = resolve_model(vm["draft-model"].as<std::string>());
  else if (weights) s.draft_model = resolve_model(*s.draft_weights_dir);
  s.draft_weights_seed = vm.count("draft-weights-seed")
                             ? parse_seed(vm["draft-weights-seed"].as<std::string>(), "--draft-weights-seed")
                             : setup.weights_seed;
  if (self) {
    s.self_draft_layers = vm["self-draft-layers"].as<int32_t>();
    if (s.self_draft_layers == 0) self_draft_spec(setup.model, 0);  // 0 would mean "none": name the range
  }
  if (vm.count("acceptance-rate")) s.acceptance_rate = vm["acceptance-rate"].as<double>();
  check_speculative_setup(s, setup.scheduler.num_speculative_tokens, setup.model);
  return s;
}

}  // namespace

DecoderPrecision decoder_precision_from(const po::variables_map& vm) {
  DecoderPrecision p;
  p.dtype = parse_decoder_dtype(vm["dtype"].as<std::string>());
  p.quantization.weights = parse_weight_quantization(vm["quantization"].as<std::string>());
  p.quantization.kv_cache = parse_kv_cache_dtype(vm["kv-cache-dtype"].as<std::string>());
  return p;
}

WorkloadDefaults engine_workload_defaults() {
  return WorkloadDefaults{.rate = "2", .num_requests = 32, .prompt_len = "uniform:16:256",
                          .output_len = "uniform:16:128"};
}

EngineSetup engine_setup_from(const po::variables_map& vm) {
  EngineSetup setup;
  setup.device = parse_device(vm["device"].as<std::string>()).name();
  if (vm.count("weights")) {
    setup.weights_dir = vm["weights"].as<std::string>();
    setup.model = resolve_model(vm["model"].defaulted() ? *setup.weights_dir : vm["model"].as<std::string>());
  } else {
    setup.model = resolve_model(vm["model"].as<std::string>());
  }
  // Checked against the device here, so that a flag the decoder cannot
  // serve is named before anything is built.
  setup.precision = decoder_precision_from(vm).on(parse_device(setup.device));
  setup.model.quantization = setup.precision.quantization;
  setup.weights_seed = parse_seed(vm["weights-seed"].as<std::string>(), "--weights-seed");
  setup.threads = vm["threads"].as<int>();
  check_cpu_threads(setup.threads);
  setup.warm_up.prefill_tokens = vm["warm-up-tokens"].as<int32_t>();
  if (setup.warm_up.prefill_tokens < 0)
    throw InputError(fmt::format("--warm-up-tokens must be >= 0 (got {})", setup.warm_up.prefill_tokens));
  if (setup.warm_up.prefill_tokens == 0) setup.warm_up.decode_steps = 0;
  setup.kv_cache_bytes = parse_bytes(vm["kv-cache-memory"].as<std::string>(), "--kv-cache-memory");
  setup.decoding.sampling.temperature = vm["temperature"].as<double>();
  setup.decoding.sampling.top_p = vm["top-p"].as<double>();
  setup.decoding.honor_eos = vm.count("honor-eos") > 0;
  setup.workload = workload_from(vm);
  setup.decoding.sampling.seed = setup.workload.seed;
  setup.decoding.prompt_seed = setup.workload.seed;
  setup.decoding.sampling.validate();
  setup.scheduler = scheduler_from(vm);
  setup.slo = slo_from(vm);
  setup.speculative = speculative_setup_from(vm, setup);
  return setup;
}

}  // namespace servesim::cli
