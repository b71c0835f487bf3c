// `servesim simulate`: predict TTFT/TPOT for a model, a GPU, a workload and
// a serving policy with the discrete-event simulator, costed by the roofline
// or, with --profile, by a calibrated device profile (sim/cost/profile_model.h).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/output.h"
#include "engine/decoder_run.h"
#include "sim/cost/cost_jitter.h"
#include "sim/draw_band.h"
#include "sim/errors.h"
#include "sim/report.h"
#include "engine/simulation.h"
#include "sim/cost/speculative_cost.h"

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

int simulate_command(int argc, const char* const* argv) {
  po::options_description general("servesim simulate: predict serving latency with the "
                                  "discrete-event simulator\n\nGeneral", kHelpWidth);
  general.add_options()
      ("help,h", "show this help")
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
  po::options_description draws("Draws: the spread one run may have", kHelpWidth);
  draws.add_options()
      ("draws", po::value<int>()->default_value(1),
       "1 simulates once with the cost model's durations; N > 1 also simulates N times with each "
       "iteration's cost jittered (--cost-jitter) and reports the median of each TTFT, TPOT and E2E "
       "statistic over those, with their 10th-90th percentile band (summary.json's draws; requests.csv "
       "and iterations.csv stay the simulation without jitter): near saturation a queue's percentiles "
       "move by several percent with a 0.5% change of every cost, so one simulation is one draw (1 .. 1000)")
      ("cost-jitter", po::value<std::string>(),
       "with --draws N > 1: SIGMA (each cost times exp(SIGMA z), z standard normal, SIGMA in [0, 1]), or "
       "a `servesim validate --predict-draws` report.json, whose predict_draws.jitter is the noise that "
       "device's iterations measured");
  po::options_description all(kHelpWidth);
  all.add(general).add(draws).add(output_options()).add(workload_options()).add(scheduler_options())
      .add(speculative_options()).add(roofline_options()).add(quantization_options()).add(slo_options());

  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all << "\nExit status: 0 success, 2 bad input (the message says which), 1 "
                        "runtime failure.\n";
    return 0;
  }

  // With --profile the calibrated tables set every cost: the roofline's
  // knobs would be silently ignored, so naming them is an error.
  const bool use_profile = vm.count("profile") > 0;
  std::string profile_path;
  std::optional<DeviceProfile> profile;
  if (use_profile) {
    for (const char* flag : {"compute-efficiency", "memory-efficiency", "iteration-overhead"})
      if (given(vm, flag))
        throw InputError(fmt::format("--{} does not apply with --profile: the profile's measured tables and "
                                     "ceilings set the costs",
                                     flag));
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
  setup.workload = workload_from(vm);
  setup.scheduler = scheduler_from(vm);
  if (!use_profile) setup.cost.roofline = roofline_from(vm);
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
  const bool quiet = vm.count("quiet") > 0;
  const int num_draws = vm["draws"].as<int>();
  if (num_draws < 1 || num_draws > kMaxDraws)
    throw InputError(fmt::format("--draws {}: expected 1 .. {}", num_draws, kMaxDraws));
  CostJitter jitter;
  if (vm.count("cost-jitter")) {
    if (num_draws == 1)
      throw InputError("--cost-jitter applies with --draws N > 1 (one simulation is drawn without jitter)");
    jitter = CostJitter::from_flag(vm["cost-jitter"].as<std::string>(), "--cost-jitter");
  } else if (num_draws > 1) {
    throw InputError(fmt::format("--draws {} needs --cost-jitter: a sigma, or a validate report.json that "
                                 "measured the device's noise",
                                 num_draws));
  }

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
  const CostModels costs = setup_cost_models(setup);
  if (use_profile && !setup.scheduler.num_gpu_blocks && profile->device_kind == "cpu" && vm["hardware"].defaulted()) {
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

  const auto wall_start = std::chrono::steady_clock::now();
  const Workload workload = make_workload(setup.workload);
  LoopOptions loop;
  loop.progress = progress_printer("simulate", quiet);
  SimulationOutput out = simulate_workload(setup, workload, costs, loop);
  std::optional<LatencyBands> bands;
  const RunSummary single = out.summary;
  if (num_draws > 1) {
    SimulationSetup jittered = setup;
    jittered.keep_iterations = false;
    bands = simulate_draws(
        num_draws, jitter, setup.workload.seed,
        [&](CostMultiplier& m) {
          CostMultiplier* multipliers[] = {&m};
          return simulate_workload(jittered, workload, costs, {}, multipliers).summary;
        },
        [&](int done, int total) {
          if (!quiet)
            std::fprintf(stderr, "%ssimulate: draw %d/%d%s", stderr_is_terminal() ? "\r" : "", done, total,
                         stderr_is_terminal() ? "" : "\n");
        });
    out.summary = with_medians(out.summary, *bands);
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  nlohmann::json config = setup_to_json(setup, out.scheduler, costs);
  std::string device = setup.hardware.name;
  if (use_profile) {
    // The hardware's figures are not used by the profile model; keep them
    // only where they sized the KV cache.
    if (!hardware_sizes_kv) config.erase("hardware");
    if (cpu_kv_bytes) {
      config["scheduler"]["kv_cache_bytes"] =
          double(out.scheduler.num_gpu_blocks) * out.scheduler.block_size *
          (cpu_kv_bytes_per_token(setup.model, profile_precision) +
           (setup.draft ? cpu_kv_bytes_per_token(setup.draft->spec, profile_precision) : 0.0));
      config["scheduler"]["kv_cache_rule"] = fmt::format("{:.0f} bytes of {} KV cache (cpu profile)", *cpu_kv_bytes,
                                                         profile_precision.quantization.kv_cache == KvCacheDtype::Int8
                                                             ? "int8"
                                                             : profile_precision.dtype);
    }
    device = fmt::format("{} (profile)", profile->device_description.empty() ? profile->device_kind
                                                                              : profile->device_description);
  }
  nlohmann::json summary = summary_to_json(out.summary, setup.slo, config);
  if (bands) {
    summary["draws"] = {
        {"draws", num_draws},
        {"jitter", jitter.to_json()},
        {"ttft_s", band_json(bands->ttft_s)},
        {"tpot_s", band_json(bands->tpot_s)},
        {"e2e_s", band_json(bands->e2e_s)},
        {"single_simulation", {{"ttft_s", quantiles_json(single.ttft_s)}, {"tpot_s", quantiles_json(single.tpot_s)},
                               {"e2e_s", quantiles_json(single.e2e_s)}}},
        {"meaning", "ttft_s, tpot_s and e2e_s above are the medians over the draws of each statistic; here their "
                    "10th and 90th percentiles over the draws, and the one simulation without jitter (whose "
                    "requests and iterations the CSVs hold)"}};
  }
  emit_results(vm, out.records, out.summary, summary,
               fmt::format("servesim simulate: {} on {}, {} scheduler, {} requests ({}){}", setup.model.name,
                           device, to_string(out.scheduler.policy), workload.requests.size(),
                           to_string(setup.workload.arrival),
                           bands ? fmt::format("; medians over {} jittered simulations", num_draws) : ""),
               out.speculative ? &*out.speculative : nullptr);
  if (bands && !vm.count("json")) std::cout << "  draws      " << band_line(*bands) << "\n";
  if (!quiet)
    std::fprintf(stderr, "%ssimulated %lld output tokens in %.2f s wall time (%.2f M tokens/s)\n",
                 wall_s > 1 && stderr_is_terminal() ? "\n" : "", (long long)out.summary.output_tokens,
                 wall_s, double(out.summary.output_tokens) / wall_s / 1e6);
  return 0;
}

}  // namespace servesim::cli
