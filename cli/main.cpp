// servesim: predict how fast an LLM serves (TTFT, TPOT) and check it.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/heap_tuning.h"
#include "sim/errors.h"

namespace {

void print_usage(std::FILE* to) {
  std::fputs(
      "usage: servesim <command> [flags]      (servesim <command> --help for its flags)\n"
      "\n"
      "commands:\n"
      "  simulate   predict TTFT/TPOT of a workload with the discrete-event simulator\n"
      "  run        serve a workload for real with the built-in decoder (CPU) and measure it\n"
      "  calibrate  time the decoder's kernels on this device and write a profile\n"
      "  validate   run a workload for real and predict it; report the prediction's error\n"
      "             (--measured: put a prediction beside a measured run of any engine)\n"
      "  serve      serve the built-in decoder over an OpenAI-compatible HTTP API (+ /metrics)\n"
      "  bench      measure TTFT/TPOT/ITL of any OpenAI-compatible server under a workload\n"
      "  fit        fit the roofline's efficiencies and overhead to measured runs of an engine\n"
      "  sweep      run simulate over a grid of settings (k, batch size, rate, ...) and rank the points\n"
      "  capacity   the highest request rate within SLOs; GPUs and cost for a target rate; a Pareto search\n"
      "  models     list the built-in model presets (parameters, weight and KV bytes)\n"
      "  hardware   list the built-in GPU presets (datasheet FLOP/s, bandwidth, memory)\n"
      "\n"
      "exit status: 0 success, 2 bad input (flag, config, trace), 1 runtime failure\n",
      to);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    print_usage(stdout);
    return 0;
  }
  if (command == "--version") {
    std::printf("servesim %s\n", SERVESIM_VERSION);
    return 0;
  }
  // The subcommand sees its own flags, with argv[0] = "servesim <command>".
  const int sub_argc = argc - 1;
  const char* const* sub_argv = argv + 1;
  if (command == "simulate" || command == "sweep" || command == "capacity")
    servesim::cli::prepare_heap_for_simulation();
  try {
    if (command == "simulate") return servesim::cli::simulate_command(sub_argc, sub_argv);
    if (command == "run") return servesim::cli::run_command(sub_argc, sub_argv);
    if (command == "calibrate") return servesim::cli::calibrate_command(sub_argc, sub_argv);
    if (command == "validate") return servesim::cli::validate_command(sub_argc, sub_argv);
    if (command == "capacity") return servesim::cli::capacity_command(sub_argc, sub_argv);
    if (command == "sweep") return servesim::cli::sweep_command(sub_argc, sub_argv, argv[0]);
    if (command == "serve") return servesim::cli::serve_command(sub_argc, sub_argv);
    if (command == "bench") return servesim::cli::bench_command(sub_argc, sub_argv);
    if (command == "fit") return servesim::cli::fit_command(sub_argc, sub_argv);
    if (command == "models") return servesim::cli::models_command(sub_argc, sub_argv);
    if (command == "hardware") return servesim::cli::hardware_command(sub_argc, sub_argv);
    std::fprintf(stderr, "servesim: unknown command '%s'\n\n", command.c_str());
    print_usage(stderr);
    return 2;
  } catch (const servesim::InputError& e) {
    std::fprintf(stderr, "servesim %s: error: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "servesim %s: internal error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
