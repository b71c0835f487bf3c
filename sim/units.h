// Parsing of values with units given on the command line.
#pragma once

#include <string>

namespace servesim {

// "500ms", "0.5s", "200us", "1.5" (seconds). Throws InputError naming
// `flag` for anything else, for a negative value, NaN or infinity.
double parse_duration_s(const std::string& text, const std::string& flag);

}  // namespace servesim
