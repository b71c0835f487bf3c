// One request of a workload, as a client would send it.
#pragma once

#include <cstdint>

namespace servesim {

struct Request {
  int64_t id = 0;             // 0 .. N-1, in arrival order
  double arrival_s = 0.0;     // open loop: arrival time; closed loop: set when released
  int32_t prompt_tokens = 1;  // >= 1
  int32_t output_tokens = 1;  // >= 1; tokens the client asks to generate (EOS ignored)
};

}  // namespace servesim
