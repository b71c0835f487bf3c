// `servesim calibrate` (being written).
#include "cli/commands.h"
#include "sim/errors.h"

namespace servesim::cli {
int calibrate_command(int, const char* const*) { throw InputError("calibrate is not available yet"); }
}  // namespace servesim::cli
