// Command-line flags of the small watch programs (servesim_placement_watch,
// _allocation_watch, _wake_watch, _decode_steps): `--name value` pairs, a
// usage line, and the number checks they share. A bad flag prints what is
// wrong and the usage line to stderr and exits 2; -h/--help exits 0.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/model_spec.h"

namespace servesim::bench {

class WatchFlags {
 public:
  explicit WatchFlags(std::string usage_line) : usage_(std::move(usage_line)) {}

  // Prints `error` (none: the help) and the usage line; exits 2 on an error, else 0.
  [[noreturn]] void usage(const std::string& error = "") const {
    std::fprintf(stderr, "%s%s%s\n", error.c_str(), error.empty() ? "" : "\n", usage_.c_str());
    std::exit(error.empty() ? 0 : 2);
  }

  // Calls take(flag, value) for each pair; a flag it does not take (false) is unknown.
  void parse(int argc, char** argv, const std::function<bool(const std::string&, const std::string&)>& take) const {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "-h" || flag == "--help") usage();
      if (i + 1 >= argc) usage(fmt::format("{}: needs a value", flag));
      if (!take(flag, argv[++i])) usage(fmt::format("unknown flag '{}'", flag));
    }
  }

  int integer_at_least(const std::string& flag, const std::string& value, long least) const {
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < least || v > (1L << 30))
      usage(fmt::format("{}: expected an integer >= {}, got '{}'", flag, least, value));
    return int(v);
  }

  double positive(const std::string& flag, const std::string& value) const {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(v > 0)) usage(fmt::format("{}: expected a number > 0, got '{}'", flag, value));
    return v;
  }

  // The model named by --model, or the usage with why not.
  ModelSpec model(const std::string& name) const {
    try {
      return resolve_model(name);
    } catch (const InputError& e) {
      usage(e.what());  // resolve_model names --model itself
    }
  }

 private:
  std::string usage_;
};

}  // namespace servesim::bench
