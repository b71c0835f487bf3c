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
#include "cli/simulation_flags.h"
#include "engine/decoder_run.h"
#include "sim/cost/cost_jitter.h"
#include "sim/draw_band.h"
#include "sim/errors.h"
#include "sim/report.h"
#include "engine/simulation.h"
#include "sim/cost/speculative_cost.h"

namespace servesim::cli {
int simulate_command(int argc, const char* const* argv) {
  po::options_description general = simulation_model_options(
      "servesim simulate: predict serving latency with the discrete-event simulator\n\nGeneral");
  general.add_options()("help,h", "show this help");
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
  all.add(general).add(draws).add(output_options());
  add_simulation_options(all);

  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all << "\nExit status: 0 success, 2 bad input (the message says which), 1 "
                        "runtime failure.\n";
    return 0;
  }

  SimulationFlags flags = simulation_from(vm);
  SimulationSetup& setup = flags.setup;
  const CostModels& costs = flags.costs;
  const bool use_profile = flags.profile.has_value();
  const std::optional<DeviceProfile>& profile = flags.profile;
  const bool hardware_sizes_kv = flags.hardware_sizes_kv;
  const std::optional<double>& cpu_kv_bytes = flags.cpu_kv_bytes;
  const DecoderPrecision& profile_precision = flags.profile_precision;
  const bool quiet = vm.count("quiet") > 0;
  warn_of_unsteady_calibration(flags, "simulate");
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

  const auto wall_start = std::chrono::steady_clock::now();
  const Workload workload = make_workload(setup.workload);
  LoopOptions loop;
  loop.progress = progress_printer("simulate", quiet);
  // iterations.csv streams to --out as the loop runs (PP engines' records
  // are merged after their runs: kept, written at the end).
  std::optional<IterationsStream> iterations_csv;
  if (vm.count("out") && setup.parallel.pipeline_parallel_size == 1) {
    iterations_csv.emplace(vm["out"].as<std::string>(), setup.num_replicas > 1);
    loop.observers.push_back(&*iterations_csv);
  }
  SimulationSetup main_setup = setup;
  main_setup.keep_iterations = vm.count("out") && !iterations_csv;  // only the PP engines' records are kept
  SimulationOutput out = simulate_workload(main_setup, workload, costs, loop);
  if (iterations_csv) iterations_csv->finish();
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
  if (!setup.parallel.single_gpu()) summary["parallel"] = parallel_to_json(setup, out.scheduler, out);
  if (setup.num_replicas > 1) summary["replicas"] = replicas_to_json(setup, out);
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
                           (setup.parallel.single_gpu() ? device
                                                        : fmt::format("{} x {} ({})", setup.parallel.world_size(), device,
                                                                      describe_layout(setup.parallel))) +
                               (setup.num_replicas > 1 ? fmt::format(", {} replicas ({} router)", setup.num_replicas,
                                                                     to_string(setup.router.policy))
                                                       : std::string()), to_string(out.scheduler.policy), workload.requests.size(),
                           to_string(setup.workload.arrival),
                           bands ? fmt::format("; medians over {} jittered simulations", num_draws) : ""),
               out.speculative ? &*out.speculative : nullptr, iterations_csv.has_value());
  if (bands && !vm.count("json")) std::cout << "  draws      " << band_line(*bands) << "\n";
  // The whole command as a user runs it: the workload, the simulation and
  // every output written.
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (!quiet)
    std::fprintf(stderr, "%ssimulated %lld output tokens in %.2f s wall time (%.2f M tokens/s)\n",
                 wall_s > 1 && stderr_is_terminal() ? "\n" : "", (long long)out.summary.output_tokens,
                 wall_s, double(out.summary.output_tokens) / wall_s / 1e6);
  return 0;
}

}  // namespace servesim::cli
