// `servesim run`: serve a workload for real with the built-in decoder, the
// same scheduler as `simulate`, and the wall clock.
#include <cstdio>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/engine_options.h"
#include "cli/output.h"
#include "engine/decoder_run.h"
#include "sim/errors.h"
#include "sim/report.h"
#include "validate/iteration_log.h"

namespace servesim::cli {

int run_command(int argc, const char* const* argv) {
  po::options_description general(
      "servesim run: serve a workload for real with the built-in decoder (same scheduler and "
      "outputs as simulate, measured times)\n\nGeneral", kHelpWidth);
  general.add_options()("help,h", "show this help")
      ("iteration-log", po::value<std::string>(),
       "write every iteration the engine executes (its sequences' query and cached tokens, the measured seconds) "
       "to this file, one JSON line each, as `servesim serve --iteration-log` does; `servesim validate --measured "
       "OUT --iteration-log FILE` then costs the same iterations with any profile (docs/validation.md)");
  add_engine_options(general);
  add_speculative_engine_options(general);
  const WorkloadDefaults defaults = engine_workload_defaults();
  po::options_description all(kHelpWidth);
  all.add(general).add(output_options()).add(workload_options(defaults)).add(scheduler_options()).add(slo_options());

  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all << "\nExit status: 0 success, 2 bad input (the message says which), 1 "
                        "runtime failure.\n";
    return 0;
  }

  const EngineSetup setup = engine_setup_from(vm);
  const bool quiet = vm.count("quiet") > 0;

  const Workload workload = make_workload(setup.workload);
  auto ready = [&](const std::string& what) {
    if (!quiet) std::fprintf(stderr, "run: %s\n", what.c_str());
  };
  // Checked before the weights load; truncated only once they have.
  const std::string log_path = vm.count("iteration-log") ? vm["iteration-log"].as<std::string>() : "";
  if (!log_path.empty()) check_writable(log_path);
  IterationLogObserver iteration_log;
  EngineRunOptions run;
  run.progress = progress_printer("run", quiet);
  run.on_ready = [&](const std::string& what) {
    if (!log_path.empty()) iteration_log.open(log_path);
    ready(what);
  };
  if (!log_path.empty()) run.observers.push_back(&iteration_log);
  EngineOutput out = run_engine(setup, workload, run);
  if (iteration_log.writer() && !quiet)
    std::fprintf(stderr, "run: %lld iterations logged to %s\n", static_cast<long long>(iteration_log.writer()->lines()),
                 log_path.c_str());
  if (!quiet && stderr_is_terminal()) std::fprintf(stderr, "\n");

  const nlohmann::json summary = summary_to_json(out.summary, setup.slo, engine_setup_to_json(setup, out));
  std::string title = fmt::format("servesim run: {} on {}, {} scheduler, {} requests ({})", setup.model.name,
                                  out.device, to_string(out.scheduler.policy), workload.requests.size(),
                                  to_string(setup.workload.arrival));
  if (const auto draft = draft_model_spec(setup.speculative, setup.model))
    title += fmt::format(", speculative k = {} with draft {}", out.scheduler.num_speculative_tokens, draft->name);
  emit_results(vm, out.records, out.summary, summary, title, out.speculative ? &*out.speculative : nullptr);
  return 0;
}

}  // namespace servesim::cli
