// Flags shared by the commands that serve a workload (simulate now; run and
// validate later): workload, scheduler, cost model and SLO flags. Names follow
// vLLM's where vLLM has the same setting.
#pragma once

#include <boost/program_options.hpp>

#include "sim/cost/roofline_model.h"
#include <optional>

#include "sim/interconnect.h"
#include "sim/metrics.h"
#include "sim/parallel_config.h"
#include "sim/quantization.h"
#include "sim/scheduler_settings.h"
#include "sim/workload.h"

namespace servesim::cli {

namespace po = boost::program_options;

// Width of --help text, in columns.
inline constexpr unsigned kHelpWidth = 100;

// Defaults of the workload flags: simulate predicts GPU-sized workloads, run
// serves CPU-sized ones for real.
struct WorkloadDefaults {
  std::string rate = "10";
  int64_t num_requests = 1000;
  std::string prompt_len = "lognormal:1024:1.0:16:8192";
  std::string output_len = "lognormal:256:1.0:1:2048";
};

po::options_description workload_options(const WorkloadDefaults& defaults = {});
po::options_description scheduler_options();
po::options_description roofline_options();
po::options_description quantization_options();
po::options_description slo_options();
po::options_description parallel_options();

// Each reads the flags above from a parsed map; bad values throw InputError
// naming the flag.
WorkloadSpec workload_from(const po::variables_map& vm);
SchedulerSettings scheduler_from(const po::variables_map& vm);
RooflineOptions roofline_from(const po::variables_map& vm);
Quantization quantization_from(const po::variables_map& vm);
SloTargets slo_from(const po::variables_map& vm);
// --tensor-parallel-size and --pipeline-parallel-size (checked against the
// model by ParallelConfig::validate_for where the model is known).
ParallelConfig parallel_from(const po::variables_map& vm);
// --interconnect: a preset or a measured table; unset: the hardware's.
std::optional<Interconnect> interconnect_from(const po::variables_map& vm);

// Boost's lexical_cast turns "-1" into 2^64 - 1 for an unsigned option, so
// seeds are read as text and parsed strictly (InputError naming `flag`).
uint64_t parse_seed(const std::string& text, const std::string& flag);

// boost's default command-line style without allow_guessing: a flag must
// be spelled whole (an unambiguous prefix would be taken, so `--mode`
// silently meant `--model`).
inline constexpr int kFlagStyle = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

// Parses argv (after the command word) against `options` in kFlagStyle:
// unknown flags, stray positional arguments (named) and malformed values
// throw InputError.
po::variables_map parse_or_throw(int argc, const char* const* argv,
                                 const po::options_description& options);

}  // namespace servesim::cli
