// The flags of a simulation -- model, hardware or profile, workload,
// scheduling, speculation, parallelism, cost model, precision and SLOs --
// and the setup they give, shared by `simulate` and `capacity`.
#pragma once

#include <optional>
#include <string>

#include "cli/common_options.h"
#include "engine/simulation.h"
#include "kernels/decoder/decoder_precision.h"
#include "sim/cost/profile.h"

namespace servesim::cli {

// --model, --hardware and --profile, under `caption` (the command's
// headline and "General"; add --help beside them).
po::options_description simulation_model_options(const char* caption);
// Every other group: workload, scheduling, speculation, parallelism,
// roofline, quantization, SLOs.
void add_simulation_options(po::options_description& all);

struct SimulationFlags {
  SimulationSetup setup;
  CostModels costs;  // built once for `setup`: a profile that does not fit is refused before anything runs
  std::optional<DeviceProfile> profile;
  std::string profile_path;
  bool hardware_sizes_kv = true;       // the --hardware memory rule sized the KV cache
  std::optional<double> cpu_kv_bytes;  // a cpu profile's KV cache bytes (run's default)
  DecoderPrecision profile_precision;  // how a cpu profile's decoder stored its KV cache
};

// The setup the flags give (InputError naming a bad or contradictory flag).
SimulationFlags simulation_from(const po::variables_map& vm);

// "COMMAND: warning: PROFILE: ..." on stderr when the profile's calibration
// met the host in two states (DeviceProfile::unsteadiness_warning). Not
// progress, so printed with --quiet too; the JSON outputs carry the same
// sentence as config.cost_model.calibration_warning.
void warn_of_unsteady_calibration(const SimulationFlags& flags, const char* command);

}  // namespace servesim::cli
