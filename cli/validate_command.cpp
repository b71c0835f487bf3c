// `servesim validate`: serve a workload for real once, predict the same
// workload with the profile cost model (replay and predict modes), and report
// the errors. With --measured, no real run: a prediction beside a measured
// run of any engine (validate/measured_report.h).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "sim/cost/profile.h"
#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/engine_options.h"
#include "cli/output.h"
#include "cli/simulation_flags.h"
#include "kernels/decoder/device_choice.h"
#include "engine/decoder_run.h"
#include "sim/cost/profile.h"
#include "sim/errors.h"
#include "validate/measured_report.h"
#include "validate/measured_run.h"
#include "validate/quick_calibration.h"
#include "validate/report.h"
#include "validate/validation.h"

namespace servesim::cli {

namespace {

bool names_measured(int argc, const char* const* argv) {
  for (int i = 0; i < argc; ++i)
    if (std::strcmp(argv[i], "--measured") == 0 || std::strncmp(argv[i], "--measured=", 11) == 0) return true;
  return false;
}

// `validate --measured DIR_OR_JSON [prediction flags]`.
int validate_measured_command(int argc, const char* const* argv) {
  po::options_description general = simulation_model_options(
      "servesim validate --measured: put a prediction beside a measured run of any engine (a `servesim run`, "
      "`simulate` or `bench` folder, or a vLLM `bench serve --save-result` JSON): the same requests at the same "
      "times simulated with the prediction flags below, and the TTFT, TPOT, ITL and E2E errors "
      "(docs/validation.md)\n\nGeneral");
  general.add_options()("help,h", "show this help")
      ("measured", po::value<std::string>(),
       "required: a run folder (requests.csv, + summary.json for ITL; or vllm_result.json) or a vLLM "
       "bench serve result JSON (input_lens, output_lens, ttfts, itls, start_times where saved)")
      ("iteration-log", po::value<std::string>(),
       "the measured server's iteration log (`servesim serve --iteration-log FILE`): also cost each iteration it "
       "executed and report the per-iteration errors by kind and shape, as validate does for a run");
  po::options_description output("Output", kHelpWidth);
  output.add_options()
      ("out", po::value<std::string>(),
       "required: folder for report.json, requests.csv (each measured request beside its prediction) and "
       "predicted/ (summary.json, requests.csv, iterations.csv)")
      ("json", "print report.json to stdout instead of the table")
      ("quiet,q", "no progress on stderr");
  po::options_description all(kHelpWidth);
  all.add(general).add(output);
  add_simulation_options(all);
  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all << "\nThe workload flags do not apply (the measured run's requests are simulated), except "
                        "--seed, which draws a vLLM run's arrivals where its JSON has no start_times.\n"
                        "Exit status: 0 success, 2 bad input (the message says which), 1 runtime failure.\n";
    return 0;
  }
  if (!vm.count("measured")) throw InputError("--measured is required: a run folder or a vLLM result JSON");
  if (!vm.count("out")) throw InputError("--out is required: the folder for report.json and the CSVs");
  // The workload is the measured run's: a workload flag would be ignored.
  const po::options_description workload_flags = workload_options();
  for (const auto& option : workload_flags.options()) {
    const std::string& name = option->long_name();
    if (name != "seed" && vm.count(name) && !vm[name].defaulted())
      throw InputError(fmt::format("--{} does not apply with --measured: the measured run's requests are "
                                   "simulated at their own lengths and times",
                                   name));
  }
  const bool quiet = vm.count("quiet") > 0;
  SimulationFlags flags = simulation_from(vm);
  warn_of_unsteady_calibration(flags, "validate --measured");
  SimulationSetup& setup = flags.setup;

  MeasuredPrediction p;
  p.measured = read_measured_run(vm["measured"].as<std::string>(), {setup.workload.seed});
  if (vm.count("iteration-log"))
    p.server_iterations = check_iteration_log(read_iteration_log(vm["iteration-log"].as<std::string>()), flags.costs,
                                              setup.scheduler.block_size);
  LoopOptions loop;
  loop.progress = progress_printer("validate --measured", quiet);
  p.predicted = predict_measured_run(setup, flags.costs, p.measured, loop);
  if (!quiet && stderr_is_terminal()) std::fprintf(stderr, "\n");
  p.server_steps = compare_server_steps(p.measured.server_metrics, p.predicted.records, p.predicted.summary.preemptions,
                                        p.measured.server_metrics_source);
  p.config = setup_to_json(setup, p.predicted.scheduler, flags.costs);
  p.config["workload"] = {{"measured", p.measured.source},
                          {"format", p.measured.format},
                          {"requests", int64_t(p.measured.requests.size())},
                          {"arrivals_assumed", p.measured.arrivals_assumed},
                          {"closed_loop_concurrency", p.measured.closed_loop_concurrency}};
  p.cost_model = flags.costs.describe();
  nlohmann::json predicted_summary = summary_to_json(p.predicted.summary, setup.slo, p.config);
  if (p.predicted.speculative) predicted_summary["speculative"] = p.predicted.speculative->to_json();
  const std::string out_dir = vm["out"].as<std::string>();
  write_measured_outputs(out_dir, p, predicted_summary);
  if (vm.count("json")) {
    std::cout << measured_report_json(p).dump(2) << "\n";
    return 0;
  }
  std::cout << format_measured_table(
      p, fmt::format("servesim validate --measured: {} on {}, {} scheduler, {} requests", setup.model.name,
                     flags.profile ? "a profile" : setup.hardware.name, to_string(p.predicted.scheduler.policy),
                     p.measured.requests.size()));
  std::cout << "  outputs    " << out_dir << "/{report.json,requests.csv,predicted/"
            << (p.server_iterations ? ",iterations.csv,iteration_breakdown.csv,server_requests.csv}\n" : "}\n");
  return 0;
}

}  // namespace

int validate_command(int argc, const char* const* argv) {
  if (names_measured(argc, argv)) return validate_measured_command(argc, argv);
  po::options_description general(
      "servesim validate: serve a workload for real with the built-in decoder, predict the same "
      "workload with the profile cost model, and report the errors (per iteration, and TTFT, TPOT "
      "and E2E per request). `servesim validate --measured RUN --help`: a prediction beside a measured run of "
      "any engine instead\n\nGeneral", kHelpWidth);
  general.add_options()("help,h", "show this help");
  add_engine_options(general);
  add_speculative_engine_options(general);
  general.add_options()
      ("profile", po::value<std::string>(),
       "device profile from `servesim calibrate` for this model (default: a quick calibration "
       "first, saved as OUT/profile.json)")
      ("draft-profile", po::value<std::string>(),
       "with --draft-model: the draft's device profile (default: a quick calibration of the draft, "
       "saved as OUT/draft_profile.json); a --self-draft-layers draft is costed by --profile's tables")
      ("host-drift", po::value<std::string>()->default_value("off"),
       "off | report | interleave: what to do about a host whose speed drifts from one minute to the next (a "
       "shared VM; docs/noisy-hosts.md). report: the profile's drift probes (a whole-model decode step and an "
       "n^3 GEMM, from `calibrate --host-drift`) again just before and after the real run, and the threads' "
       "placement before every iteration (cpu); the predictions unchanged. interleave: report, plus the "
       "profile's whole-model factors re-timed on the served decoder around the run, plus decode steps of the "
       "served batch (and every --interleave-prefill-interval a whole-model prefill) timed between served "
       "iterations every --interleave-interval with the run's clock stopped (no latency includes them): one "
       "multiplier timeline scales every predicted cost, and iterations are costed in their threads' placement "
       "by the profile's placement ratios (cpu, without speculation)")
      ("interleave-interval",
       po::value<double>()->default_value(kDefaultInterleaveIntervalS,
                                          fmt::format("{:g}", kDefaultInterleaveIntervalS)),
       "with --host-drift interleave: seconds of the run's clock from one timing between served iterations to "
       "the next (0.01 .. 60); shorter follows the device's speed closer and stops the clock more often")
      ("interleave-prefill-interval", po::value<double>()->default_value(kDefaultInterleavePrefillIntervalS),
       "with --host-drift interleave: seconds of the run's clock from one prefill timing (a whole-model prefill "
       "of the refresh's length nearest 128 tokens) to the next; 0: decode steps only, and iterations with "
       "a prefill keep the refreshed cost (0, or 0.01 .. 60)")
      ("mode", po::value<std::string>()->default_value("predict"),
       "which prediction report.json describes: replay (the real run's iterations costed by the "
       "profile: the cost model's error alone) | predict (an independent simulation of the "
       "workload: what a what-if relies on); both are always computed and written")
      ("predict-draws", po::value<int>()->default_value(kDefaultPredictDraws),
       "predict's simulations: N > 1 simulates N times with each iteration's cost jittered by the device's "
       "noise and predicts the median of each statistic over those (report.json gives their 10th-90th "
       "percentile band, and the one simulation without jitter): near saturation a queue's percentiles "
       "move by several percent with a 0.5% change of the costs, so one simulation is one draw of them; 1 "
       "simulates once with the cost model's durations (1 .. 1000)")
      ("predict-jitter", po::value<double>(),
       "with --predict-draws N > 1: each cost times exp(SIGMA z), z standard normal (SIGMA in [0, 1]); "
       "default: the real run's own iteration noise (each measured time over its predicted cost, over "
       "the rolling median of that ratio across 51 iterations), resampled");
  po::options_description output("Output", kHelpWidth);
  output.add_options()
      ("out", po::value<std::string>(),
       "required: folder for report.json (report_replay.json, report_predict.json), iterations.csv, "
       "requests.csv, and measured/, replayed/, predicted/ run outputs")
      ("json", "print report.json to stdout instead of the table")
      ("quiet,q", "no progress on stderr");
  po::options_description all(kHelpWidth);
  all.add(general).add(output).add(workload_options(engine_workload_defaults())).add(scheduler_options())
      .add(slo_options());
  // Flags of earlier versions, refused by name (not in --help).
  po::options_description removed;
  // Given with or without a value, each is named with what replaced it.
  for (const char* flag : {"anchor", "placement", "in-situ"})
    removed.add_options()(flag, po::value<std::string>()->implicit_value(""));
  po::options_description accepted;
  accepted.add(all).add(removed);

  const po::variables_map vm = parse_or_throw(argc, argv, accepted);
  for (const char* flag : {"anchor", "placement", "in-situ"})
    if (vm.count(flag))
      throw InputError(fmt::format("--{} was replaced by --host-drift off | report | interleave (see "
                                   "docs/noisy-hosts.md)",
                                   flag));
  if (vm.count("help")) {
    std::cout << all << "\nExit status: 0 success, 2 bad input (the message says which), 1 "
                        "runtime failure.\n";
    return 0;
  }

  const EngineSetup setup = engine_setup_from(vm);
  const ValidationMode mode = parse_validation_mode(vm["mode"].as<std::string>());
  ValidationOptions options;
  options.host_drift.mode = parse_host_drift_mode(vm["host-drift"].as<std::string>());
  if (!vm["interleave-interval"].defaulted() && options.host_drift.mode != HostDriftMode::Interleave)
    throw InputError("--interleave-interval applies with --host-drift interleave");
  if (!vm["interleave-prefill-interval"].defaulted() && options.host_drift.mode != HostDriftMode::Interleave)
    throw InputError("--interleave-prefill-interval applies with --host-drift interleave");
  options.host_drift.interleave_interval_s = vm["interleave-interval"].as<double>();
  options.host_drift.interleave_prefill_interval_s = vm["interleave-prefill-interval"].as<double>();
  options.predict_draws = vm["predict-draws"].as<int>();
  if (vm.count("predict-jitter")) options.predict_jitter_sigma = vm["predict-jitter"].as<double>();
  check_validation_options(options);  // before any quick calibration
  if (!vm.count("out")) throw InputError("--out is required: the folder for report.json and the CSVs");
  // A GPU that is not there: exit 2, saying why, before any calibration or folder.
  require_device(parse_device(setup.device));
  const std::string out_dir = vm["out"].as<std::string>();
  const bool quiet = vm.count("quiet") > 0;
  auto note = [&](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "validate: %s\n", line.c_str());
  };

  const Workload workload = make_workload(setup.workload);
  // Settings that cannot be served fail here, before any calibration.
  engine_scheduler_config(setup);

  DeviceProfile profile;
  std::string profile_source;
  std::optional<std::string> saved_as;
  if (vm.count("profile")) {
    profile_source = vm["profile"].as<std::string>();
    profile = DeviceProfile::load(profile_source);
  } else {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec || !fs::is_directory(out_dir))
      throw InputError(fmt::format("--out: cannot create folder '{}': {}", out_dir, ec.message()));
    note(fmt::format("no --profile: a quick calibration of {} on {} first (coarse; `servesim calibrate` "
                     "measures a full profile)", setup.model.name, setup.device));
    profile = quick_calibration(setup, workload, [&](const std::string& line) { note("calibrate: " + line); },
                                options.host_drift.mode != HostDriftMode::Off);
    saved_as = (fs::path(out_dir) / "profile.json").string();
    profile.save(*saved_as);
    profile_source = "quick calibration";
    note("quick calibration saved as " + *saved_as);
  }

  // A separate draft is costed by its own profile.
  std::optional<DeviceProfile> draft_profile;
  const std::optional<ModelSpec> draft = draft_model_spec(setup.speculative, setup.model);
  const bool separate_draft = draft && setup.speculative.self_draft_layers == 0;
  if (vm.count("draft-profile") && !separate_draft)
    throw InputError("--draft-profile applies with --draft-model (a self-draft uses --profile's tables)");
  if (separate_draft) {
    if (vm.count("draft-profile")) {
      draft_profile = DeviceProfile::load(vm["draft-profile"].as<std::string>());
    } else {
      note(fmt::format("no --draft-profile: a quick calibration of the draft {} first", draft->name));
      EngineSetup draft_setup = setup;
      draft_setup.model = *draft;
      draft_setup.speculative = SpeculativeSetup{};
      draft_setup.scheduler.num_speculative_tokens = 0;
      draft_profile = quick_calibration(draft_setup, workload,
                                        [&](const std::string& line) { note("calibrate draft: " + line); },
                                        options.host_drift.mode != HostDriftMode::Off);
      const std::string path = (std::filesystem::path(out_dir) / "draft_profile.json").string();
      std::filesystem::create_directories(out_dir);
      draft_profile->save(path);
      note("draft quick calibration saved as " + path);
    }
  }

  ValidationCallbacks callbacks;
  callbacks.run_progress = progress_printer("validate", quiet);
  callbacks.on_ready = [&](const std::string& what) { note(what); };
  callbacks.note = note;
  options.draft_profile = draft_profile ? &*draft_profile : nullptr;
  ValidationResult result = run_validation(setup, workload, profile, profile_source, callbacks, options);
  if (!quiet && stderr_is_terminal()) std::fprintf(stderr, "\n");
  result.profile_saved_as = saved_as;

  write_validation_outputs(out_dir, result, mode);
  if (vm.count("json")) {
    std::cout << validation_report_json(result, mode).dump(2) << "\n";
    return 0;
  }
  std::cout << format_validation_table(
      result, mode,
      fmt::format("servesim validate: {} on {}, {} scheduler, {} requests ({}); profile: {}", setup.model.name,
                  result.measured.device, to_string(result.measured.scheduler.policy), workload.requests.size(),
                  to_string(setup.workload.arrival),
                  saved_as ? fmt::format("quick calibration ({})", *saved_as) : profile_source));
  std::cout << "  outputs    " << out_dir
            << "/{report.json,report_replay.json,report_predict.json,iterations.csv,iteration_breakdown.csv,"
               "requests.csv,measured/,replayed/,predicted/}\n";
  return 0;
}

}  // namespace servesim::cli
