// Summing one value many times, exactly as a loop of additions would.
#pragma once

#include <cstdint>

namespace servesim {

// The double that `n` additions s = s + v produce in IEEE round-to-nearest-
// even arithmetic, for s >= 0 and v >= 0 (both finite), in O(1) steps per
// power of two the sum passes instead of n steps. Within a binade [2^(e-1),
// 2^e) every double is a multiple m of u = 2^(e-53), so each addition adds
// the same number d of u (d = q or q + 1 where v = (q + f) u; a tie, f =
// 1/2, once the mantissa m is even) until the exact sum would leave the
// binade. Bit-identical to the loop (tested against it); the mean of a run
// of equal inter-token gaps is summed this way.
double add_repeatedly(double s, double v, int64_t n);

}  // namespace servesim
