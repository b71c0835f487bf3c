#include "engine/router.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {
namespace {

int64_t load(const Scheduler& s) { return int64_t(s.num_waiting() + s.num_running()); }

size_t least_loaded(std::span<const Scheduler* const> replicas) {
  size_t best = 0;
  for (size_t i = 1; i < replicas.size(); ++i)
    if (load(*replicas[i]) < load(*replicas[best])) best = i;
  return best;
}

}  // namespace

RouterPolicy parse_router_policy(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n == "round-robin") return RouterPolicy::RoundRobin;
  if (n == "least-requests") return RouterPolicy::LeastRequests;
  if (n == "least-kv") return RouterPolicy::LeastKv;
  if (n == "prefix-affinity") return RouterPolicy::PrefixAffinity;
  if (n == "random") return RouterPolicy::Random;
  throw InputError(fmt::format("--router '{}': expected round-robin, least-requests, least-kv, prefix-affinity or "
                               "random",
                               name));
}

std::string to_string(RouterPolicy p) {
  switch (p) {
    case RouterPolicy::RoundRobin: return "round-robin";
    case RouterPolicy::LeastRequests: return "least-requests";
    case RouterPolicy::LeastKv: return "least-kv";
    case RouterPolicy::PrefixAffinity: return "prefix-affinity";
    case RouterPolicy::Random: return "random";
  }
  return "round-robin";
}

size_t Router::route(const Request& request, std::span<const Scheduler* const> replicas) {
  const size_t n = replicas.size();
  if (n == 1) return 0;
  switch (settings_.policy) {
    case RouterPolicy::RoundRobin: return next_++ % n;
    case RouterPolicy::LeastRequests: return least_loaded(replicas);
    case RouterPolicy::LeastKv: {
      size_t best = 0;
      for (size_t i = 1; i < n; ++i) {
        const int64_t a = replicas[i]->kv().num_used(), b = replicas[best]->kv().num_used();
        if (a < b || (a == b && load(*replicas[i]) < load(*replicas[best]))) best = i;
      }
      return best;
    }
    case RouterPolicy::Random: return size_t(random_.uniform_int(0, int64_t(n) - 1));
    case RouterPolicy::PrefixAffinity: {
      const size_t idle = least_loaded(replicas);
      size_t best = idle;
      int32_t best_hit = 0;
      for (size_t i = 0; i < n; ++i) {
        const int32_t hit = replicas[i]->cached_prefix_tokens(request);
        if (hit > best_hit) best = i, best_hit = hit;
      }
      if (best_hit == 0) return idle;
      const double busy = double(load(*replicas[best])), least = double(load(*replicas[idle]));
      const bool imbalanced = busy - least > double(settings_.balance_abs_threshold) &&
                              busy > least * settings_.balance_rel_threshold;
      return imbalanced ? idle : best;
    }
  }
  return 0;
}

}  // namespace servesim
