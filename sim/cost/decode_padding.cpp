#include "sim/cost/decode_padding.h"

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/json_fields.h"

namespace servesim {

int64_t DecodePadding::bucket(int64_t n) const {
  if (!enabled() || n < 1 || n > max_batch) return n;
  for (int64_t s : sizes)
    if (n <= s) return s;
  return (n + multiple - 1) / multiple * multiple;
}

DecodePadding DecodePadding::cuda_graphs(int64_t max_batch) { return DecodePadding{{1, 2, 4}, 8, max_batch}; }

nlohmann::json DecodePadding::to_json() const {
  return {{"sizes", sizes}, {"multiple", multiple}, {"max_batch", max_batch}};
}

DecodePadding DecodePadding::from_json(const nlohmann::json& j, const std::string& where) {
  auto whole = [&](const nlohmann::json& v, const char* name) {
    if (!v.is_number_integer()) throw InputError(fmt::format("{}: '{}' must be an integer", where, name));
    return v.get<int64_t>();
  };
  if (!j.is_object() || !j.contains("sizes") || !j.contains("multiple") || !j.contains("max_batch"))
    throw InputError(fmt::format("{}: expected an object with 'sizes', 'multiple' and 'max_batch'", where));
  require_known_fields(j, {"sizes", "multiple", "max_batch"}, where);
  if (!j["sizes"].is_array()) throw InputError(fmt::format("{}: 'sizes' must be a list of integers", where));
  DecodePadding p;
  for (const auto& s : j["sizes"]) {
    p.sizes.push_back(whole(s, "sizes"));
    if (p.sizes.back() < 1 || (p.sizes.size() > 1 && p.sizes.back() <= p.sizes[p.sizes.size() - 2]))
      throw InputError(fmt::format("{}: 'sizes' must be ascending integers >= 1", where));
  }
  p.multiple = whole(j["multiple"], "multiple");
  p.max_batch = whole(j["max_batch"], "max_batch");
  if (p.multiple < 1) throw InputError(fmt::format("{}: 'multiple' must be >= 1 (got {})", where, p.multiple));
  if (p.max_batch < 1) throw InputError(fmt::format("{}: 'max_batch' must be >= 1 (got {})", where, p.max_batch));
  return p;
}

}  // namespace servesim
