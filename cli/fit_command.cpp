// `servesim fit`: the roofline's efficiencies and per-iteration overhead
// fitted to measured runs of an engine whose kernels servesim cannot time
// (validate/fit_roofline.h), written as a cost file `simulate --cost-file`
// reads (validate/fit_cost_file.h), with the fit's error on the fitted runs
// and on held-out ones.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/output.h"
#include "cli/simulation_flags.h"
#include "sim/errors.h"
#include "sim/report.h"
#include "validate/fit_cost_file.h"
#include "validate/fit_roofline.h"
#include "validate/iteration_errors.h"
#include "validate/measured_run.h"

namespace servesim::cli {
namespace {

std::vector<FitParameter> parameters_from(const std::string& text) {
  std::vector<FitParameter> out;
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ','))
    if (!name.empty()) out.push_back(parse_fit_parameter(name));
  return out;
}

std::string pct(double e) { return std::isfinite(e) ? fmt::format("{:+.1f}%", e * 100) : std::string("-"); }

void errors_lines(const char* caption, const std::vector<FitRunErrors>& runs, std::string& t) {
  t += fmt::format("  {} (ms; error = predicted / measured - 1)\n", caption);
  t += fmt::format("    {:<40} {:>22} {:>22} {:>22} {:>22}\n", "run", "TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90");
  auto cell = [](double predicted, double measured) {
    return fmt::format("{:.2f}/{:.2f} {}", predicted * 1e3, measured * 1e3, pct(rel_error(predicted, measured)));
  };
  for (const FitRunErrors& e : runs) {
    std::string name = e.source.size() > 40 ? "..." + e.source.substr(e.source.size() - 37) : e.source;
    t += fmt::format("    {:<40} {:>22} {:>22} {:>22} {:>22}\n", name, cell(e.predicted_ttft.p50, e.measured_ttft.p50),
                     cell(e.predicted_ttft.p90, e.measured_ttft.p90), cell(e.predicted_tpot.p50, e.measured_tpot.p50),
                     cell(e.predicted_tpot.p90, e.measured_tpot.p90));
  }
}

nlohmann::json roofline_json(const RooflineOptions& r) {
  return {{"compute_efficiency", r.compute_efficiency},
          {"memory_efficiency", r.memory_efficiency},
          {"iteration_overhead_s", r.iteration_overhead_s},
          {"sequence_overhead_s", r.sequence_overhead_s}};
}

nlohmann::json runs_json(const std::vector<FitRunErrors>& runs) {
  nlohmann::json j = nlohmann::json::array();
  for (const FitRunErrors& e : runs) j.push_back(fit_run_errors_json(e));
  return j;
}

}  // namespace

int fit_command(int argc, const char* const* argv) {
  po::options_description general = simulation_model_options(
      "servesim fit: fit the roofline's compute and memory efficiencies and per-iteration overhead to measured "
      "runs of an engine whose kernels servesim cannot time (for example a vLLM server: `vllm bench serve "
      "--save-result` JSONs or `servesim bench` folders), and write them as a cost file for `simulate "
      "--cost-file` (docs/validation.md)\n\nGeneral");
  general.add_options()("help,h", "show this help")
      ("measured", po::value<std::vector<std::string>>()->composing(),
       "required, repeatable: a measured run to fit (a run folder or a vLLM result JSON, as `validate "
       "--measured` reads them); a light-load run pins the decode and prefill costs, a run at a higher load "
       "(larger batches, longer contexts) separates the memory efficiency from the overhead")
      ("held-out", po::value<std::vector<std::string>>()->composing(),
       "repeatable: a run not fitted, whose error under the fitted costs is reported (another load)")
      ("fit-parameters", po::value<std::string>()->default_value("compute-efficiency,memory-efficiency,iteration-overhead"),
       "which roofline parameters to fit (comma-separated; also sequence-overhead, the host cost per sampled "
       "sequence per iteration, for engines whose sampler and bookkeeping grow with the batch); the others keep "
       "their flag (or --cost-file) values, and those values start the search")
      ("max-evaluations", po::value<int>()->default_value(3000),
       "at most this many candidate simulations of every fitted run (>= 10)");
  po::options_description output("Output", kHelpWidth);
  output.add_options()
      ("out", po::value<std::string>(), "required: folder for cost.json (the cost file) and fit.json (the report)")
      ("json", "print fit.json to stdout instead of the table")
      ("quiet,q", "no progress on stderr");
  po::options_description all(kHelpWidth);
  all.add(general).add(output);
  add_simulation_options(all);
  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all << "\nThe workload flags do not apply (the measured runs' requests are simulated), except "
                        "--seed, which draws a vLLM run's arrivals where its JSON has no start_times.\n"
                        "Exit status: 0 success, 2 bad input (the message says which), 1 runtime failure.\n";
    return 0;
  }
  if (!vm.count("measured")) throw InputError("--measured is required: at least one run to fit");
  if (!vm.count("out")) throw InputError("--out is required: the folder for cost.json and fit.json");
  if (vm.count("profile"))
    throw InputError("--profile does not apply: fit finds the roofline's parameters (a profile's are measured)");
  const po::options_description workload_flags = workload_options();
  for (const auto& option : workload_flags.options()) {
    const std::string& name = option->long_name();
    if (name != "seed" && vm.count(name) && !vm[name].defaulted())
      throw InputError(fmt::format("--{} does not apply to fit: the measured runs' requests are simulated at "
                                   "their own lengths and times",
                                   name));
  }
  const bool quiet = vm.count("quiet") > 0;
  FitOptions options;
  options.parameters = parameters_from(vm["fit-parameters"].as<std::string>());
  options.max_evaluations = vm["max-evaluations"].as<int>();
  SimulationFlags flags = simulation_from(vm);
  const SimulationSetup& setup = flags.setup;
  const MeasuredReadOptions read{setup.workload.seed};
  std::vector<MeasuredRun> runs, held_out;
  for (const std::string& path : vm["measured"].as<std::vector<std::string>>())
    runs.push_back(read_measured_run(path, read));
  if (vm.count("held-out"))
    for (const std::string& path : vm["held-out"].as<std::vector<std::string>>())
      held_out.push_back(read_measured_run(path, {read.seed, "--held-out"}));
  const std::string out_dir = vm["out"].as<std::string>();
  create_output_folder(out_dir);

  const bool terminal = stderr_is_terminal();
  if (!quiet) {
    for (const MeasuredRun& run : runs) {
      if (run.arrivals_assumed) std::fprintf(stderr, "fit: %s: %s\n", run.source.c_str(), run.arrivals_note.c_str());
      for (const std::string& n : run.notes) std::fprintf(stderr, "fit: %s: %s\n", run.source.c_str(), n.c_str());
    }
    options.progress = [terminal](int n, double f, const RooflineOptions& r) {
      if (n % 25 != 0 && n != 1) return;
      std::fprintf(stderr, "%sfit: %d simulations, objective %.3g (RMS error %.2f%%) at compute %.4f, memory %.4f, "
                   "overhead %.1f us, per sequence %.1f us%s",
                   terminal ? "\r" : "", n, f, std::sqrt(f) * 100, r.compute_efficiency, r.memory_efficiency,
                   r.iteration_overhead_s * 1e6, r.sequence_overhead_s * 1e6, terminal ? "" : "\n");
      std::fflush(stderr);
    };
  }
  const FitResult fit = fit_roofline(setup, runs, options);
  if (!quiet && terminal) std::fprintf(stderr, "\n");
  const std::vector<FitRunErrors> held = evaluate_roofline(setup, fit.fitted, held_out);
  const std::vector<FitRunErrors> held_at_start = evaluate_roofline(setup, fit.start, held_out);

  nlohmann::json parameters = nlohmann::json::array();
  for (FitParameter p : options.parameters) parameters.push_back(to_string(p));
  nlohmann::json sources = nlohmann::json::array();
  for (const MeasuredRun& r : runs) sources.push_back(r.source);
  const nlohmann::json provenance = {{"fitted_on", sources},
                                     {"parameters", parameters},
                                     {"objective", fit.objective},
                                     {"rms_rel_error", std::sqrt(fit.objective)}};
  const std::string cost_path = out_dir + "/cost.json";
  write_cost_file(cost_path, cost_file_json(fit.fitted, setup.model.name, setup.hardware.name, provenance));

  nlohmann::json report;
  report["parameters"] = parameters;
  report["start"] = roofline_json(fit.start);
  report["fitted"] = roofline_json(fit.fitted);
  report["objective"] = {{"start", fit.start_objective}, {"fitted", fit.objective}};
  report["rms_rel_error"] = {{"start", std::sqrt(fit.start_objective)}, {"fitted", std::sqrt(fit.objective)}};
  report["evaluations"] = fit.evaluations;
  report["fitted_runs"] = runs_json(fit.runs);
  report["held_out"] = runs_json(held);
  report["held_out_at_start"] = runs_json(held_at_start);
  if (!held.empty())
    report["held_out_objective"] = {{"start", fit_objective(held_at_start)}, {"fitted", fit_objective(held)}};
  report["cost_file"] = cost_path;
  report["definitions"] = {
      {"objective",
       "mean over the runs and over {mean, P50, P90} x {TTFT, TPOT} of (predicted / measured - 1)^2, each "
       "prediction a simulation of the run's measured requests at their arrival times"},
      {"rms_rel_error", "the square root of the objective"},
      {"search", "validate/fit_roofline.h: the overhead on a log grid then golden section, the efficiencies by "
                 "Nelder-Mead at each point, then Nelder-Mead over every fitted parameter"}};
  report["config"] = setup_to_json(setup, resolve_scheduler_config(setup), flags.costs);
  report["config"].erase("workload");
  {
    std::FILE* f = std::fopen((out_dir + "/fit.json").c_str(), "wb");
    if (!f) throw InputError(fmt::format("{}/fit.json: cannot open for writing", out_dir));
    const std::string text = report.dump(2) + "\n";
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) throw InputError(fmt::format("{}/fit.json: write failed", out_dir));
  }
  if (vm.count("json")) {
    std::cout << report.dump(2) << "\n";
    return 0;
  }
  std::string t = fmt::format("servesim fit: {} on {}, {} run(s) fitted, {} simulations each\n", setup.model.name,
                              setup.hardware.name, runs.size(), fit.evaluations);
  t += fmt::format("  fitted     compute efficiency {:.4f} (from {:.2f}), memory efficiency {:.4f} (from {:.2f}), "
                   "iteration overhead {:.1f} us (from {:.1f})\n",
                   fit.fitted.compute_efficiency, fit.start.compute_efficiency, fit.fitted.memory_efficiency,
                   fit.start.memory_efficiency, fit.fitted.iteration_overhead_s * 1e6,
                   fit.start.iteration_overhead_s * 1e6);
  if (fit.fitted.sequence_overhead_s > 0 || fit.start.sequence_overhead_s > 0)
    t += fmt::format("             sequence overhead {:.1f} us (from {:.1f})\n", fit.fitted.sequence_overhead_s * 1e6,
                     fit.start.sequence_overhead_s * 1e6);
  t += fmt::format("  objective  RMS relative error {:.2f}% (from {:.2f}%)\n", std::sqrt(fit.objective) * 100,
                   std::sqrt(fit.start_objective) * 100);
  errors_lines("fitted runs, predicted/measured", fit.runs, t);
  if (!held.empty()) {
    errors_lines("held-out runs, predicted/measured", held, t);
    t += fmt::format("  held out   RMS relative error {:.2f}% (with the starting costs {:.2f}%)\n",
                     std::sqrt(fit_objective(held)) * 100, std::sqrt(fit_objective(held_at_start)) * 100);
  }
  t += "  outputs    " + out_dir + "/{cost.json,fit.json}; use: servesim simulate --cost-file " + cost_path + "\n";
  std::cout << t;
  return 0;
}

}  // namespace servesim::cli
