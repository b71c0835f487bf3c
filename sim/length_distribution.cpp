#include "sim/length_distribution.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "sim/errors.h"

namespace servesim {

namespace {

constexpr int64_t kMaxLen = std::numeric_limits<int32_t>::max();

constexpr const char* kSyntax =
    "expected N, fixed:N, uniform:LO:HI, normal:MEAN:STD[:LO:HI] or "
    "lognormal:MEAN:SIGMA[:LO:HI]";

// Everything needed to word an error about one spec.
struct SpecContext {
  const std::string& flag;
  const std::string& spec;

  // "--prompt-len: 'uniform:5' needs LO:HI (uniform:LO:HI)"
  [[noreturn]] void needs(const std::string& what) const {
    throw InputError(fmt::format("{}: '{}' needs {}", flag, spec, what));
  }
  // "--prompt-len: 'fixed:0': N must be an integer in [1, 2147483647] (got '0')"
  [[noreturn]] void bad(const std::string& detail) const {
    throw InputError(fmt::format("{}: '{}': {}", flag, spec, detail));
  }
};

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto pos = s.find(sep);
    parts.push_back(s.substr(0, pos));
    if (pos == std::string_view::npos) return parts;
    s.remove_prefix(pos + 1);
  }
}

bool parse_int(std::string_view text, int64_t& out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

// A token count in [1, 2^31 - 1]; `allow_inf` accepts "inf" as the maximum.
int64_t parse_length(std::string_view text, const char* name, bool allow_inf,
                     const SpecContext& ctx) {
  if (allow_inf && (text == "inf" || text == "INF")) return kMaxLen;
  int64_t value = 0;
  if (!parse_int(text, value) || value < 1 || value > kMaxLen) {
    ctx.bad(fmt::format("{} must be an integer in [1, {}]{} (got '{}')", name, kMaxLen,
                        allow_inf ? " or inf" : "", text));
  }
  return value;
}

// A finite real number; `min_exclusive` selects > min instead of >= min.
double parse_real(std::string_view text, const char* name, double min, bool min_exclusive,
                  const SpecContext& ctx) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  const bool is_number = ec == std::errc() && ptr == end && !text.empty() && std::isfinite(value);
  const bool in_range = min_exclusive ? value > min : value >= min;
  if (!is_number || !in_range) {
    ctx.bad(fmt::format("{} must be a finite number {} {} (got '{}')", name,
                        min_exclusive ? ">" : ">=", min, text));
  }
  return value;
}

void check_field_count(const std::vector<std::string_view>& parts, size_t count,
                       const char* usage, const SpecContext& ctx) {
  if (parts.size() != count) ctx.needs(usage);
}

void check_clip_order(int64_t lo, int64_t hi, const SpecContext& ctx) {
  if (lo > hi) ctx.needs(fmt::format("LO <= HI (got {} > {})", lo, hi));
}

std::string format_hi(int64_t hi) { return hi == kMaxLen ? "inf" : std::to_string(hi); }

}  // namespace

LengthDistribution LengthDistribution::fixed(int32_t n) {
  if (n < 1) throw std::invalid_argument("LengthDistribution::fixed needs n >= 1");
  LengthDistribution d;
  d.kind_ = Kind::Fixed;
  d.a_ = n;
  d.lo_ = d.hi_ = n;
  return d;
}

LengthDistribution LengthDistribution::parse(const std::string& spec, const std::string& flag) {
  const SpecContext ctx{flag, spec};
  const std::string_view text = trim(spec);
  if (text.empty()) ctx.bad(fmt::format("empty; {}", kSyntax));

  std::vector<std::string_view> parts = split(text, ':');
  for (auto& p : parts) p = trim(p);
  const std::string_view name = parts[0];

  // A bare number is fixed:N; anything starting like a number is judged as N.
  if (parts.size() == 1 && name.find_first_of("0123456789+-.") == 0) {
    return fixed(static_cast<int32_t>(parse_length(name, "N", false, ctx)));
  }

  LengthDistribution d;
  if (name == "fixed") {
    check_field_count(parts, 2, "N (fixed:N)", ctx);
    return fixed(static_cast<int32_t>(parse_length(parts[1], "N", false, ctx)));
  }
  if (name == "uniform") {
    check_field_count(parts, 3, "LO:HI (uniform:LO:HI)", ctx);
    d.kind_ = Kind::Uniform;
    d.lo_ = parse_length(parts[1], "LO", false, ctx);
    d.hi_ = parse_length(parts[2], "HI", false, ctx);
    check_clip_order(d.lo_, d.hi_, ctx);
    d.a_ = static_cast<double>(d.lo_);
    d.b_ = static_cast<double>(d.hi_);
    return d;
  }
  if (name == "normal" || name == "lognormal") {
    const bool is_normal = name == "normal";
    const char* spread = is_normal ? "STD" : "SIGMA";
    const char* usage = is_normal ? "MEAN:STD or MEAN:STD:LO:HI (normal:MEAN:STD[:LO:HI])"
                                  : "MEAN:SIGMA or MEAN:SIGMA:LO:HI (lognormal:MEAN:SIGMA[:LO:HI])";
    if (parts.size() != 3 && parts.size() != 5) ctx.needs(usage);
    d.kind_ = is_normal ? Kind::Normal : Kind::LogNormal;
    d.a_ = parse_real(parts[1], "MEAN", 0.0, true, ctx);
    d.b_ = parse_real(parts[2], spread, 0.0, false, ctx);
    if (parts.size() == 5) {
      d.lo_ = parse_length(parts[3], "LO", false, ctx);
      d.hi_ = parse_length(parts[4], "HI", true, ctx);
      check_clip_order(d.lo_, d.hi_, ctx);
    }
    return d;
  }
  ctx.bad(fmt::format("unknown distribution '{}'; {}", name, kSyntax));
}

int32_t LengthDistribution::sample(Rng& rng) const {
  double x = 0;
  switch (kind_) {
    case Kind::Fixed:
      return static_cast<int32_t>(a_);
    case Kind::Uniform:
      return static_cast<int32_t>(rng.uniform_int(lo_, hi_));
    case Kind::Normal:
      x = a_ + b_ * rng.normal();
      break;
    case Kind::LogNormal: {
      const double mu = std::log(a_) - 0.5 * b_ * b_;  // so that E[length] = MEAN
      x = std::exp(mu + b_ * rng.normal());            // may overflow to inf: clipped below
      break;
    }
  }
  // Clip in double before converting, so a huge draw cannot overflow int32.
  const double clipped =
      std::clamp(std::round(x), static_cast<double>(lo_), static_cast<double>(hi_));
  return static_cast<int32_t>(clipped);
}

std::string LengthDistribution::describe() const {
  switch (kind_) {
    case Kind::Fixed:
      return fmt::format("fixed:{}", static_cast<int64_t>(a_));
    case Kind::Uniform:
      return fmt::format("uniform:{}:{}", lo_, hi_);
    case Kind::Normal:
      return fmt::format("normal:{}:{}:{}:{}", a_, b_, lo_, format_hi(hi_));
    case Kind::LogNormal:
      return fmt::format("lognormal:{}:{}:{}:{}", a_, b_, lo_, format_hi(hi_));
  }
  return {};
}

double LengthDistribution::nominal_mean() const {
  switch (kind_) {
    case Kind::Fixed:
      return a_;
    case Kind::Uniform:
      return 0.5 * (a_ + b_);
    case Kind::Normal:
    case Kind::LogNormal:
      return a_;
  }
  return 0.0;
}

}  // namespace servesim
