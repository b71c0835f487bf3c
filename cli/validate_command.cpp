// `servesim validate`: serve a workload for real once, predict the same
// workload with the profile cost model (replay and predict modes), and report
// the errors.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "calib/profile.h"
#include "calib/validate.h"
#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/engine_options.h"
#include "cli/output.h"
#include "kernels/decoder/device_choice.h"
#include "kernels/decoder/engine.h"
#include "sim/errors.h"

namespace servesim::cli {

int validate_command(int argc, const char* const* argv) {
  po::options_description general(
      "servesim validate: serve a workload for real with the built-in decoder, predict the same "
      "workload with the profile cost model, and report the errors (per iteration, and TTFT, TPOT "
      "and E2E per request)\n\nGeneral", kHelpWidth);
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
      ("anchor", po::value<std::string>()->default_value("report"),
       "report | apply | off: the profile's anchor probes (a whole-model decode step and a GEMM) are "
       "measured again before and after the real run; report says how much slower or faster the device "
       "ran than at calibration (report.json's anchor), apply also scales the predictions' memory- and "
       "compute-bound costs by it (experimental: on this VM it helped some runs and over-corrected "
       "others), off skips the probes; cpu only (a run on cuda is not probed)")
      ("placement", po::value<std::string>()->default_value("report"),
       "report | apply: the threads' placement (cores sharing an L3, or two CCDs) is recorded before every "
       "iteration of the real run (cpu); apply also costs each iteration in its placement, by the profile's "
       "placement ratios (from a full calibration that saw both placements)")
      ("in-situ", po::value<std::string>()->default_value("profile"),
       "profile | refresh | track | interleave: the whole-model factors that tie the profile's kernel tables to real prefills "
       "and decode steps; profile uses them as calibrated, refresh times the same prefills and decode "
       "steps again on the served decoder, just before its clock starts and just after the run (a few "
       "seconds), and predicts with those: the tables at the device's speed of the run's minutes (for a "
       "machine that drifts; cpu only, not with --anchor apply or speculation); track also times 1-sequence "
       "decode steps in the run's idle gaps (ending before the next arrival) and scales each iteration's "
       "cost by the level they measured around its time, relative to their median; interleave times decode "
       "steps of the served batch between served iterations instead, every --interleave-interval of the "
       "run's clock, with the clock stopped while they run (no latency includes them), and takes their "
       "level as measured; every --interleave-prefill-interval one of them is a whole-model prefill, whose "
       "level scales the iterations with a prefill")
      ("interleave-interval", po::value<double>()->default_value(kDefaultInterleaveIntervalS),
       "with --in-situ interleave: seconds of the run's clock from one timing between served iterations to "
       "the next (0.01 .. 60); shorter follows the device's speed closer and stops the clock more often")
      ("interleave-prefill-interval", po::value<double>()->default_value(kDefaultInterleavePrefillIntervalS),
       "with --in-situ interleave: seconds of the run's clock from one prefill timing (a whole-model prefill "
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

  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all << "\nExit status: 0 success, 2 bad input (the message says which), 1 "
                        "runtime failure.\n";
    return 0;
  }

  const EngineSetup setup = engine_setup_from(vm);
  const ValidationMode mode = parse_validation_mode(vm["mode"].as<std::string>());
  const std::string anchor = vm["anchor"].as<std::string>();
  if (anchor != "report" && anchor != "apply" && anchor != "off")
    throw InputError(fmt::format("--anchor: '{}' is not one of report, apply, off", anchor));
  const std::string placement = vm["placement"].as<std::string>();
  if (placement != "report" && placement != "apply")
    throw InputError(fmt::format("--placement: '{}' is not one of report, apply", placement));
  const std::string in_situ = vm["in-situ"].as<std::string>();
  if (in_situ != "profile" && in_situ != "refresh" && in_situ != "track" && in_situ != "interleave")
    throw InputError(fmt::format("--in-situ: '{}' is not one of profile, refresh, track, interleave", in_situ));
  if (!vm["interleave-interval"].defaulted() && in_situ != "interleave")
    throw InputError("--interleave-interval applies with --in-situ interleave");
  if (!vm["interleave-prefill-interval"].defaulted() && in_situ != "interleave")
    throw InputError("--interleave-prefill-interval applies with --in-situ interleave");
  ValidationOptions options;
  options.anchor = anchor == "off"     ? ValidationOptions::Anchor::Off
                   : anchor == "apply" ? ValidationOptions::Anchor::Apply
                                       : ValidationOptions::Anchor::Report;
  options.placement = placement == "apply" ? ValidationOptions::PlacementCosting::Apply
                                           : ValidationOptions::PlacementCosting::Report;
  options.in_situ = in_situ == "refresh" ? ValidationOptions::InSitu::Refresh
                    : in_situ == "track" ? ValidationOptions::InSitu::Track
                    : in_situ == "interleave" ? ValidationOptions::InSitu::Interleave
                                         : ValidationOptions::InSitu::Profile;
  options.interleave_interval_s = vm["interleave-interval"].as<double>();
  options.interleave_prefill_interval_s = vm["interleave-prefill-interval"].as<double>();
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
    profile = quick_calibration(setup, workload, [&](const std::string& line) { note("calibrate: " + line); });
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
                                        [&](const std::string& line) { note("calibrate draft: " + line); });
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
            << "/{report.json,report_replay.json,report_predict.json,iterations.csv,requests.csv,"
               "measured/,replayed/,predicted/}\n";
  return 0;
}

}  // namespace servesim::cli
