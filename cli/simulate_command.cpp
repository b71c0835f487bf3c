// `servesim simulate`: predict TTFT/TPOT for a model, a GPU, a workload and
// a serving policy with the discrete-event simulator.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/output.h"
#include "sim/report.h"
#include "sim/simulation.h"

namespace servesim::cli {

int simulate_command(int argc, const char* const* argv) {
  po::options_description general("servesim simulate: predict serving latency with the "
                                  "discrete-event simulator\n\nGeneral", kHelpWidth);
  general.add_options()
      ("help,h", "show this help")
      ("model", po::value<std::string>()->default_value("llama-3.1-8b"),
       "a preset (see `servesim models`) or a Hugging Face config.json (file or folder)")
      ("hardware", po::value<std::string>()->default_value("h200"),
       "a preset (see `servesim hardware`) or a JSON file with bf16_tflops, "
       "memory_bandwidth_gbps, memory_gb");
  po::options_description all(kHelpWidth);
  all.add(general).add(output_options()).add(workload_options()).add(scheduler_options())
      .add(roofline_options()).add(slo_options());

  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all << "\nExit status: 0 success, 2 bad input (the message says which), 1 "
                        "runtime failure.\n";
    return 0;
  }

  SimulationSetup setup;
  setup.model = resolve_model(vm["model"].as<std::string>());
  setup.hardware = resolve_hardware(vm["hardware"].as<std::string>());
  setup.workload = workload_from(vm);
  setup.scheduler = scheduler_from(vm);
  setup.roofline = roofline_from(vm);
  setup.slo = slo_from(vm);
  const bool quiet = vm.count("quiet") > 0;

  const auto wall_start = std::chrono::steady_clock::now();
  const Workload workload = make_workload(setup.workload);
  SimulationOutput out = simulate_workload(setup, workload, progress_printer("simulate", quiet));
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  const nlohmann::json summary = summary_to_json(out.summary, setup.slo, setup_to_json(setup, out.scheduler));
  emit_results(vm, out.records, out.summary, summary,
               fmt::format("servesim simulate: {} on {}, {} scheduler, {} requests ({})", setup.model.name,
                           setup.hardware.name, to_string(out.scheduler.policy), workload.requests.size(),
                           to_string(setup.workload.arrival)));
  if (!quiet)
    std::fprintf(stderr, "%ssimulated %lld output tokens in %.2f s wall time (%.2f M tokens/s)\n",
                 wall_s > 1 && stderr_is_terminal() ? "\n" : "", (long long)out.summary.output_tokens,
                 wall_s, double(out.summary.output_tokens) / wall_s / 1e6);
  return 0;
}

}  // namespace servesim::cli
