#include "engine/router.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {
namespace {

int64_t load(const Scheduler& s) { return int64_t(s.num_waiting() + s.num_running()); }

// What the policies read of replica i: the sums (or, for the cached prefix,
// the longest) over its engines [i g, (i + 1) g).
struct ReplicaView {
  std::span<const Scheduler* const> engines;
  size_t g;
  int64_t load(size_t i) const {
    int64_t n = 0;
    for (size_t e = i * g; e < (i + 1) * g; ++e) n += servesim::load(*engines[e]);
    return n;
  }
  int64_t kv_used(size_t i) const {
    int64_t n = 0;
    for (size_t e = i * g; e < (i + 1) * g; ++e) n += engines[e]->kv().num_used();
    return n;
  }
  int32_t cached_prefix_tokens(size_t i, const Request& r) const {
    int32_t best = 0;
    for (size_t e = i * g; e < (i + 1) * g; ++e) best = std::max(best, engines[e]->cached_prefix_tokens(r));
    return best;
  }
};

size_t least_loaded(const ReplicaView& v, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (v.load(i) < v.load(best)) best = i;
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

Router::Router(const RouterSettings& settings, int32_t engines_per_replica)
    : settings_(settings), engines_per_replica_(engines_per_replica), random_(settings.seed) {
  if (engines_per_replica < 1) throw std::invalid_argument("Router: engines_per_replica must be >= 1");
}

size_t Router::route(const Request& request, std::span<const Scheduler* const> engines) {
  const size_t g = size_t(engines_per_replica_);
  if (engines.size() % g != 0) throw std::invalid_argument("Router::route: engines are not whole replicas");
  const size_t replicas = engines.size() / g;
  const size_t replica = replicas == 1 ? 0 : choose_replica(request, engines, replicas);
  if (g == 1) return replica;
  next_engine_.resize(replicas, 0);
  return replica * g + next_engine_[replica]++ % g;
}

size_t Router::choose_replica(const Request& request, std::span<const Scheduler* const> engines, size_t n) {
  const ReplicaView v{engines, size_t(engines_per_replica_)};
  switch (settings_.policy) {
    case RouterPolicy::RoundRobin: return next_++ % n;
    case RouterPolicy::LeastRequests: return least_loaded(v, n);
    case RouterPolicy::LeastKv: {
      size_t best = 0;
      for (size_t i = 1; i < n; ++i) {
        const int64_t a = v.kv_used(i), b = v.kv_used(best);
        if (a < b || (a == b && v.load(i) < v.load(best))) best = i;
      }
      return best;
    }
    case RouterPolicy::Random: return size_t(random_.uniform_int(0, int64_t(n) - 1));
    case RouterPolicy::PrefixAffinity: {
      const size_t idle = least_loaded(v, n);
      size_t best = idle;
      int32_t best_hit = 0;
      for (size_t i = 0; i < n; ++i) {
        const int32_t hit = v.cached_prefix_tokens(i, request);
        if (hit > best_hit) best = i, best_hit = hit;
      }
      if (best_hit == 0) return idle;
      const double busy = double(v.load(best)), least = double(v.load(idle));
      const bool imbalanced = busy - least > double(settings_.balance_abs_threshold) &&
                              busy > least * settings_.balance_rel_threshold;
      return imbalanced ? idle : best;
    }
  }
  return 0;
}

}  // namespace servesim
