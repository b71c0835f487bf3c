// Distributions of prompt and output lengths, parsed from a flag value.
#pragma once

#include <cstdint>
#include <string>

#include "sim/random.h"

namespace servesim {

// Spec syntax (all lengths in tokens):
//   N                         fixed N (same as fixed:N)
//   fixed:N
//   uniform:LO:HI             integer uniform on [LO, HI]
//   normal:MEAN:STD[:LO:HI]   rounded, clipped to [LO, HI] (default [1, inf))
//   lognormal:MEAN:SIGMA[:LO:HI]
//                             MEAN is the mean length in tokens, SIGMA the
//                             standard deviation of ln(length); so
//                             mu = ln(MEAN) - SIGMA^2/2. Rounded and clipped.
// Every sample is >= 1.
class LengthDistribution {
 public:
  enum class Kind { Fixed, Uniform, Normal, LogNormal };

  // Throws InputError naming `flag` (e.g. "--prompt-len") and the bad part.
  static LengthDistribution parse(const std::string& spec, const std::string& flag);
  static LengthDistribution fixed(int32_t n);

  int32_t sample(Rng& rng) const;
  // The spec in canonical form, e.g. "lognormal:512:0.8:1:8192".
  std::string describe() const;
  Kind kind() const { return kind_; }
  // Mean of the unclipped distribution (for reports and sanity checks).
  double nominal_mean() const;

 private:
  Kind kind_ = Kind::Fixed;
  double a_ = 1, b_ = 0;              // fixed: a; uniform: [a,b]; normal/lognormal: mean, std/sigma
  int64_t lo_ = 1, hi_ = INT32_MAX;   // clip range
};

}  // namespace servesim
