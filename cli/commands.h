// The servesim subcommands. Each takes the arguments after its name and
// returns the process exit status (0 ok, 2 bad input, 1 runtime failure);
// InputError propagates to main(), which prints it and exits 2.
#pragma once

namespace servesim::cli {

int simulate_command(int argc, const char* const* argv);
int run_command(int argc, const char* const* argv);
int calibrate_command(int argc, const char* const* argv);
int validate_command(int argc, const char* const* argv);
// `program` is servesim's argv[0]: sweep runs each point as a child process of
// this binary (/proc/self/exe where readable, else `program`).
int sweep_command(int argc, const char* const* argv, const char* program);
// `servesim sweep merge DIR...` (sweep_command hands it its arguments).
int sweep_merge_command(int argc, const char* const* argv);
int capacity_command(int argc, const char* const* argv);
int models_command(int argc, const char* const* argv);
int hardware_command(int argc, const char* const* argv);
// `servesim serve`: the built-in decoder behind an OpenAI-compatible server.
int serve_command(int argc, const char* const* argv);
// `servesim bench`: a load generator that measures any OpenAI-compatible server.
int bench_command(int argc, const char* const* argv);
// `servesim fit`: fit the roofline's efficiencies and overhead to measured runs.
int fit_command(int argc, const char* const* argv);

}  // namespace servesim::cli
