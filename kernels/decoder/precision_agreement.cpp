#include "kernels/decoder/precision_agreement.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace servesim {

PrecisionAgreement precision_agreement(DecoderModel& reference, DecoderModel& other, std::span<const int32_t> prompt,
                                       int steps) {
  const int32_t bs = reference.kv_block_size();
  const int64_t blocks = (int64_t(prompt.size()) + steps + bs - 1) / bs;
  if (prompt.empty() || steps < 1 || other.kv_block_size() != bs || reference.kv_num_blocks() < blocks ||
      other.kv_num_blocks() < blocks)
    throw std::invalid_argument("precision_agreement: empty prompt, no steps, or caches too small or unlike");
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  BatchLayout layout;
  layout.add_sequence(tokens, 0, table, true);
  PrecisionAgreement a;
  a.steps = steps;
  int agree = 0;
  const auto argmax = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
  for (int step = 0; step < steps; ++step) {
    const std::vector<float> want = reference.forward(layout);  // copied: the next forward reuses the buffer
    const std::vector<float>& got = other.forward(layout);
    double scale = 0, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, double(std::abs(want[i])));
      diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
    }
    a.max_rel_diff = std::max(a.max_rel_diff, scale > 0 ? diff / scale : diff);
    const auto want_token = argmax(want);
    agree += want_token == argmax(got);
    tokens.push_back(int32_t(want_token));
    layout.clear();
    layout.add_sequence(std::span<const int32_t>(tokens).last(1), int32_t(tokens.size()) - 1, table, true);
  }
  a.greedy_agree = double(agree) / steps;
  return a;
}

}  // namespace servesim
