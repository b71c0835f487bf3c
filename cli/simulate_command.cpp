// `servesim simulate`: predict TTFT/TPOT for a model, a GPU, a workload and
// a serving policy with the discrete-event simulator.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
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
       "memory_bandwidth_gbps, memory_gb")
      ("out", po::value<std::string>(), "write summary.json, requests.csv, iterations.csv here")
      ("json", "print summary.json to stdout instead of the table")
      ("quiet,q", "no progress on stderr");
  po::options_description all(kHelpWidth);
  all.add(general).add(workload_options()).add(scheduler_options()).add(roofline_options()).add(slo_options());

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
  const bool on_terminal = isatty(fileno(stderr)) != 0;

  const auto wall_start = std::chrono::steady_clock::now();
  auto progress = [&](const RunProgress& p) {
    if (quiet) return;
    // Overwrite one line on a terminal; one line per report in a log file.
    std::fprintf(stderr, "%ssimulate: %lld/%lld requests done, %lld iterations, t=%.1f s simulated%s",
                 on_terminal ? "\r" : "", (long long)p.finished, (long long)p.total,
                 (long long)p.iterations, p.clock_s, on_terminal ? "" : "\n");
    std::fflush(stderr);
  };
  const Workload workload = make_workload(setup.workload);
  SimulationOutput out = simulate_workload(setup, workload, progress);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  const nlohmann::json summary = summary_to_json(out.summary, setup.slo, setup_to_json(setup, out.scheduler));
  if (vm.count("out")) write_run_outputs(vm["out"].as<std::string>(), out.records, summary);

  if (vm.count("json")) {
    std::cout << summary.dump(2) << "\n";
  } else {
    const std::string title = fmt::format(
        "servesim simulate: {} on {}, {} scheduler, {} requests ({})", setup.model.name,
        setup.hardware.name, to_string(out.scheduler.policy), workload.requests.size(),
        to_string(setup.workload.arrival));
    std::cout << format_summary_table(out.summary, title);
    if (vm.count("out")) std::cout << "  outputs    " << vm["out"].as<std::string>() << "/{summary.json,requests.csv,iterations.csv}\n";
  }
  if (!quiet)
    std::fprintf(stderr, "%ssimulated %lld output tokens in %.2f s wall time (%.2f M tokens/s)\n",
                 wall_s > 1 && on_terminal ? "\n" : "", (long long)out.summary.output_tokens, wall_s,
                 double(out.summary.output_tokens) / wall_s / 1e6);
  return 0;
}

}  // namespace servesim::cli
