// Flags shared by the commands that serve a workload (simulate now; run and
// validate later): workload, scheduler, cost model and SLO flags. Names follow
// vLLM's where vLLM has the same setting.
#pragma once

#include <boost/program_options.hpp>

#include "sim/metrics.h"
#include "sim/roofline_model.h"
#include "sim/simulation.h"
#include "sim/workload.h"

namespace servesim::cli {

namespace po = boost::program_options;

// Width of --help text, in columns.
inline constexpr unsigned kHelpWidth = 100;

po::options_description workload_options();
po::options_description scheduler_options();
po::options_description roofline_options();
po::options_description slo_options();

// Each reads the flags above from a parsed map; bad values throw InputError
// naming the flag.
WorkloadSpec workload_from(const po::variables_map& vm);
SchedulerSettings scheduler_from(const po::variables_map& vm);
RooflineOptions roofline_from(const po::variables_map& vm);
SloTargets slo_from(const po::variables_map& vm);

// Parses argv (after the command word) against `options`: unknown flags,
// stray positional arguments and malformed values throw InputError.
po::variables_map parse_or_throw(int argc, const char* const* argv,
                                 const po::options_description& options);

}  // namespace servesim::cli
