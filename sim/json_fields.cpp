#include "sim/json_fields.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/errors.h"

namespace servesim {

void require_known_fields(const nlohmann::json& j, std::initializer_list<const char*> allowed,
                          const std::string& where) {
  if (!j.is_object()) return;
  for (const auto& item : j.items()) {
    const bool known =
        std::any_of(allowed.begin(), allowed.end(), [&](const char* k) { return item.key() == k; });
    if (!known)
      throw InputError(fmt::format("{}: unknown field '{}' (allowed: {})", where, item.key(),
                                   fmt::join(allowed, ", ")));
  }
}

}  // namespace servesim
