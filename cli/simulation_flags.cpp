#include "cli/simulation_flags.h"

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "engine/decoder_run.h"
#include "sim/cost/speculative_cost.h"
#include "sim/errors.h"
#include "validate/fit_cost_file.h"

namespace servesim::cli {
namespace {

bool given(const po::variables_map& vm, const char* flag) {
  return vm.count(flag) > 0 && !vm[flag].defaulted();
}

po::options_description speculative_options() {
  po::options_description o("Speculative decoding (with --num-speculative-tokens K >= 1; with K = 0 these "
                            "flags are checked but unused, so a sweep over K can include 0)", kHelpWidth);
  o.add_options()
      ("draft-model", po::value<std::string>(),
       "the draft: a preset or a config.json, costed like the target (same --hardware, or its own "
       "--draft-profile); its vocabulary must be the target's")
      ("self-draft-layers", po::value<int32_t>(),
       "the draft is the target's first L layers with its embedding and LM head (no weights of its "
       "own); with --profile it is costed by the target's profile")
      ("draft-profile", po::value<std::string>(),
       "a profile of the --draft-model (`servesim calibrate --model <draft>`), needed with --profile")
      ("acceptance-rate", po::value<double>(),
       "every draft token accepted with probability A, independently")
      ("acceptance-curve", po::value<std::string>(),
       "a1,a2,...: draft j accepted with probability a_j given drafts 1..j-1 were (>= K values)")
      ("acceptance-beta", po::value<std::string>(),
       "A:B: each request draws its own rate from Beta(A, B) (mean A/(A+B))")
      ("acceptance-hist", po::value<std::string>(),
       "the accepted-length histogram of a real run: its summary.json (speculative."
       "accepted_length_histogram) or a CSV 'accepted,count'; K may not exceed the run's");
  return o;
}

// The one acceptance model the flags name, if any.
std::optional<AcceptanceModel> acceptance_from(const po::variables_map& vm) {
  int named = 0;
  for (const char* flag : {"acceptance-rate", "acceptance-curve", "acceptance-beta", "acceptance-hist"})
    named += int(vm.count(flag));
  if (named > 1)
    throw InputError("give one of --acceptance-rate, --acceptance-curve, --acceptance-beta, --acceptance-hist");
  if (vm.count("acceptance-rate")) return AcceptanceModel::independent(vm["acceptance-rate"].as<double>());
  if (vm.count("acceptance-curve")) return AcceptanceModel::parse_curve(vm["acceptance-curve"].as<std::string>());
  if (vm.count("acceptance-beta")) return AcceptanceModel::parse_beta(vm["acceptance-beta"].as<std::string>());
  if (vm.count("acceptance-hist")) return AcceptanceModel::load_histogram(vm["acceptance-hist"].as<std::string>());
  return std::nullopt;
}

std::optional<DraftModel> draft_from(const po::variables_map& vm, const ModelSpec& target) {
  if (vm.count("draft-model") && vm.count("self-draft-layers"))
    throw InputError("give --draft-model or --self-draft-layers, not both");
  if (vm.count("self-draft-layers")) return make_self_draft(target, vm["self-draft-layers"].as<int32_t>());
  if (vm.count("draft-model")) {
    const ModelSpec draft = resolve_model(vm["draft-model"].as<std::string>());
    draft.validate(draft.name);
    return make_separate_draft(target, draft);
  }
  return std::nullopt;
}

}  // namespace

po::options_description simulation_model_options(const char* caption) {
  po::options_description general(caption, kHelpWidth);
  general.add_options()
      ("model", po::value<std::string>()->default_value("llama-3.1-8b"),
       "a preset (see `servesim models`) or a Hugging Face config.json (file or folder); with "
       "--profile, defaults to the profiled model")
      ("hardware", po::value<std::string>()->default_value("h200"),
       "a preset (see `servesim hardware`) or a JSON file with bf16_tflops, "
       "memory_bandwidth_gbps, memory_gb; with --profile it only sizes the KV cache")
      ("profile", po::value<std::string>(),
       "a device profile from `servesim calibrate` (profile.json): predict with the calibrated "
       "profile cost model instead of the roofline (the roofline flags then do not apply). The "
       "profile must have been measured for the model's shape; --block-size defaults to the "
       "profile's and may not differ from it. KV capacity: --num-gpu-blocks if given, else the "
       "--hardware memory rule, except for a cpu profile with --hardware left at its default: "
       "the blocks that 1 GiB of fp32 KV cache holds (as `servesim run`'s --kv-cache-memory "
       "default)");
  return general;
}

void add_simulation_options(po::options_description& all) {
  po::options_description cost_file("Fitted roofline (docs/validation.md)", kHelpWidth);
  cost_file.add_options()
      ("cost-file", po::value<std::string>(),
       "a cost file from `servesim fit` (JSON): its compute_efficiency, memory_efficiency, "
       "iteration_overhead_s and sequence_overhead_s replace the roofline defaults (a roofline flag may not also set one "
       "the file sets); refused with --profile, and when the file was fitted on other --hardware");
  all.add(workload_options()).add(scheduler_options()).add(speculative_options()).add(parallel_options())
      .add(roofline_options()).add(cost_file).add(quantization_options()).add(slo_options());
}

SimulationFlags simulation_from(const po::variables_map& vm) {
  // With --profile the calibrated tables set every cost: the roofline's
  // knobs would be silently ignored, so naming them is an error.
  const bool use_profile = vm.count("profile") > 0;
  std::string profile_path;
  std::optional<DeviceProfile> profile;
  if (use_profile) {
    for (const char* flag : {"compute-efficiency", "memory-efficiency", "iteration-overhead", "sequence-overhead"})
      if (given(vm, flag))
        throw InputError(fmt::format("--{} does not apply with --profile: the profile's measured tables and "
                                     "ceilings set the costs",
                                     flag));
    if (vm.count("cost-file"))
      throw InputError("--cost-file does not apply with --profile: the profile's measured tables and ceilings "
                       "set the costs");
    profile_path = vm["profile"].as<std::string>();
    profile = DeviceProfile::load(profile_path);
  }

  SimulationSetup setup;
  setup.model = use_profile && vm["model"].defaulted() ? profile->model
                                                       : resolve_model(vm["model"].as<std::string>());
  setup.model.quantization = quantization_from(vm);  // a self-draft shares the target's weights and dtypes
  // With a profile, the quantization the profile was calibrated at unless the flags say otherwise (then
  // build_cost_models refuses the mismatch).
  if (use_profile && vm["quantization"].defaulted() && vm["kv-cache-dtype"].defaulted())
    setup.model.quantization = profile->quantization;
  setup.hardware = resolve_hardware(vm["hardware"].as<std::string>());
  setup.parallel = parallel_from(vm);
  setup.num_replicas = vm["num-replicas"].as<int32_t>();
  if (setup.num_replicas < 1 || setup.num_replicas > 4096)
    throw InputError(fmt::format("--num-replicas must be in 1 .. 4096 (got {})", setup.num_replicas));
  setup.router.policy = parse_router_policy(vm["router"].as<std::string>());
  if (setup.num_replicas == 1 && !vm["router"].defaulted())
    throw InputError("--router applies with --num-replicas > 1");
  setup.router.balance_abs_threshold = vm["router-balance-abs-threshold"].as<int64_t>();
  setup.router.balance_rel_threshold = vm["router-balance-rel-threshold"].as<double>();
  for (const char* flag : {"router-balance-abs-threshold", "router-balance-rel-threshold"})
    if (!vm[flag].defaulted() && setup.router.policy != RouterPolicy::PrefixAffinity)
      throw InputError(fmt::format("--{} applies with --router prefix-affinity", flag));
  if (setup.router.balance_abs_threshold < 0)
    throw InputError(fmt::format("--router-balance-abs-threshold must be >= 0 (got {})",
                                 setup.router.balance_abs_threshold));
  if (!(setup.router.balance_rel_threshold >= 1) || !std::isfinite(setup.router.balance_rel_threshold))
    throw InputError(fmt::format("--router-balance-rel-threshold must be >= 1 (got {})",
                                 setup.router.balance_rel_threshold));
  // A TP profile's degree unless the flag says otherwise (then build_cost_models refuses the mismatch).
  if (use_profile && vm["tensor-parallel-size"].defaulted())
    setup.parallel.tensor_parallel_size = profile->tensor_parallel_size;
  setup.parallel.validate_for(setup.model);
  setup.cost.interconnect = interconnect_from(vm);
  // (capacity --search may set TP per point.)
  if (setup.cost.interconnect && setup.parallel.single_gpu() && !vm.count("search-tensor-parallel-size"))
    throw InputError("--interconnect applies with --tensor-parallel-size or --pipeline-parallel-size > 1");
  setup.workload = workload_from(vm);
  setup.router.seed = setup.workload.seed;
  setup.scheduler = scheduler_from(vm);
  if (!use_profile) setup.cost.roofline = roofline_from(vm);
  if (vm.count("cost-file")) {
    const CostFile file = read_cost_file(vm["cost-file"].as<std::string>());
    for (auto [flag, set] : {std::pair{"compute-efficiency", file.compute_efficiency.has_value()},
                             std::pair{"memory-efficiency", file.memory_efficiency.has_value()},
                             std::pair{"iteration-overhead", file.iteration_overhead_s.has_value()},
                             std::pair{"sequence-overhead", file.sequence_overhead_s.has_value()}})
      if (set && given(vm, flag))
        throw InputError(fmt::format("--{} and --cost-file {} both set it: give one", flag, file.path));
    // Efficiencies are fractions of one device's datasheet peaks.
    if (!file.hardware.empty() && file.hardware != setup.hardware.name)
      throw InputError(fmt::format("--cost-file {} was fitted on hardware '{}', not --hardware '{}': its "
                                   "efficiencies are fractions of that device's peaks",
                                   file.path, file.hardware, setup.hardware.name));
    setup.cost.roofline = apply_cost_file(file, setup.cost.roofline);
  }
  setup.slo = slo_from(vm);
  setup.draft = draft_from(vm, setup.model);
  setup.acceptance = acceptance_from(vm);
  const int32_t k = setup.scheduler.num_speculative_tokens;
  if (k == 0) {
    // Speculation off: the draft and acceptance flags are checked above but
    // not used, so one sweep over K can include K = 0 as its baseline.
    setup.draft.reset();
    setup.acceptance.reset();
  }
  check_speculative_flags(k, setup.draft.has_value(), setup.acceptance.has_value(), true);
  if (setup.acceptance) setup.acceptance->require_covers(k);
  if (vm.count("draft-profile") && !(use_profile && vm.count("draft-model")))
    throw InputError("--draft-profile applies with --profile and --draft-model");
  bool hardware_sizes_kv = !setup.scheduler.num_gpu_blocks;
  std::optional<double> cpu_kv_bytes;
  // How a CPU profile's decoder stored its KV cache (fp32 unless calibrated otherwise).
  DecoderPrecision profile_precision;
  if (use_profile && profile->device_kind == "cpu") {
    profile_precision.dtype = profile->dtype == "bf16" ? "bf16" : "fp32";
    profile_precision.quantization = profile->quantization;
  }
  if (use_profile) {
    // Attention was timed with the profile's KV block size.
    if (given(vm, "block-size") && setup.scheduler.block_size != profile->block_size)
      throw InputError(fmt::format("--block-size {} differs from the block size {} that {} timed attention "
                                   "with; drop --block-size or calibrate with --block-size {}",
                                   setup.scheduler.block_size, profile->block_size, profile_path,
                                   setup.scheduler.block_size));
    setup.scheduler.block_size = profile->block_size;
    setup.cost.profile = *profile;
    setup.cost.profile_source = profile_path;
    if (setup.draft && !setup.draft->shares_target_weights && vm.count("draft-profile")) {
      setup.cost.draft_profile_source = vm["draft-profile"].as<std::string>();
      setup.cost.draft_profile = DeviceProfile::load(setup.cost.draft_profile_source);
    }
  }
  // The cost models, built once: a profile that does not fit the model (or
  // the draft) is refused here, before anything is simulated.
  CostModels costs = setup_cost_models(setup);
  if (use_profile && !setup.scheduler.num_gpu_blocks && profile->device_kind == "cpu" && vm["hardware"].defaulted()) {
    if (!setup.parallel.single_gpu())
      throw InputError("a cpu profile's KV rule (1 GiB of one decoder's cache) does not apply to several GPUs; "
                       "give --num-gpu-blocks or --hardware with --tensor-parallel-size or --pipeline-parallel-size");
    if (given(vm, "gpu-memory-utilization"))
      throw InputError("--gpu-memory-utilization does not apply: with a cpu --profile the KV cache is 1 GiB "
                       "in the profile's KV dtype unless --hardware or --num-gpu-blocks is given");
    const double bytes = EngineSetup{}.kv_cache_bytes;  // `servesim run`'s default
    // The draft's fp32 KV shares the memory, block for block (as in `run`).
    setup.scheduler.num_gpu_blocks = cpu_kv_blocks(setup.model, bytes, setup.scheduler.block_size,
                                                   setup.draft ? &setup.draft->spec : nullptr, profile_precision);
    cpu_kv_bytes = bytes;
    hardware_sizes_kv = false;
  }

  SimulationFlags flags;
  flags.costs = std::move(costs);
  flags.setup = std::move(setup);
  flags.profile = std::move(profile);
  flags.profile_path = profile_path;
  flags.hardware_sizes_kv = hardware_sizes_kv;
  flags.cpu_kv_bytes = cpu_kv_bytes;
  flags.profile_precision = profile_precision;
  return flags;
}

void warn_of_unsteady_calibration(const SimulationFlags& flags, const char* command) {
  if (!flags.profile) return;
  const std::string unsteady = flags.profile->unsteadiness_warning();
  if (!unsteady.empty())
    std::fprintf(stderr, "%s: warning: %s: %s\n", command, flags.profile_path.c_str(), unsteady.c_str());
}

}  // namespace servesim::cli
