#include "sim/units.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

double parse_duration_s(const std::string& text, const std::string& flag) {
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  const std::string unit(ptr, end);
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  else if (unit == "ms") scale = 1e-3;
  else if (unit == "us") scale = 1e-6;
  if (ec != std::errc() || scale == 0 || !std::isfinite(value) || value < 0)
    throw InputError(fmt::format(
        "{}: '{}' is not a duration >= 0 (examples: 0.5, 0.5s, 500ms, 200us)", flag, text));
  return value * scale;
}

}  // namespace servesim
