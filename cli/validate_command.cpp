// `servesim validate` (being written).
#include "cli/commands.h"
#include "sim/errors.h"

namespace servesim::cli {
int validate_command(int, const char* const*) { throw InputError("validate is not available yet"); }
}  // namespace servesim::cli
