// libFuzzer: a Hugging Face config.json (sim/model_spec.h,
// model_from_config_json), then the sizes every command computes from the
// model it accepts.
#include <cmath>

#include "fuzz_support.h"
#include "sim/errors.h"
#include "sim/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servesim;
  const std::string& path = fuzz::write_input(data, size, "_config.json");
  try {
    const ModelSpec spec = model_from_config_json(path);
    spec.validate(path);
    fuzz::require(spec.parameter_count() > 0, "parameter_count <= 0 for an accepted model");
    fuzz::require(std::isfinite(spec.weight_bytes()) && spec.weight_bytes() > 0, "weight_bytes not finite and > 0");
    fuzz::require(std::isfinite(spec.kv_bytes_per_token()) && spec.kv_bytes_per_token() > 0,
                  "kv_bytes_per_token not finite and > 0");
  } catch (const InputError&) {
  }
  return 0;
}
