// One request of a workload, as a client would send it.
#pragma once

#include <cstdint>

#include "sim/token_identity.h"

namespace servesim {

struct Request {
  int64_t id = 0;             // 0 .. N-1, in arrival order
  double arrival_s = 0.0;     // open loop: arrival time; closed loop: set when released
  int32_t prompt_tokens = 1;  // >= 1
  int32_t output_tokens = 1;  // >= 1; tokens the client asks to generate (EOS ignored)
  // Which tokens the prompt holds (empty: none known, nothing shared).
  TokenIdentity tokens{};
  // Multi-turn sessions: the request is sent `think_time_s` after request
  // `follows` (an earlier id) finished; arrival_s is then set when it is
  // released. -1: an independent request.
  int64_t follows = -1;
  double think_time_s = 0.0;
};

}  // namespace servesim
