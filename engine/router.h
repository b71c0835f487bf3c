// Routing requests across replicas (--num-replicas, --router): each arrival
// is routed when it arrives, on what the router sees of each replica then
// (its scheduler: waiting and running requests, KV blocks in use, the
// prefix its cache holds of the request). The same code would route for a
// real multi-replica deployment: it reads a replica's scheduler state,
// nothing the simulation alone knows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/random.h"
#include "sim/request.h"
#include "sim/scheduler.h"

namespace servesim {

enum class RouterPolicy {
  RoundRobin,     // 0, 1, ..., R-1, 0, ...
  LeastRequests,  // fewest waiting + running (ties: lowest index)
  LeastKv,        // fewest KV blocks in use (ties: fewest requests, then lowest index)
  PrefixAffinity, // the longest cached prefix of the prompt, unless that replica is overloaded
  Random,         // uniform, seeded
};
RouterPolicy parse_router_policy(const std::string& name);  // InputError naming --router
std::string to_string(RouterPolicy p);

struct RouterSettings {
  RouterPolicy policy = RouterPolicy::RoundRobin;
  uint64_t seed = 0;  // Random
  // PrefixAffinity (SGLang's router's cache-aware policy): the replica with
  // the longest cached prefix, unless its load (waiting + running) exceeds
  // the least-loaded replica's by more than balance_abs_threshold requests
  // and balance_rel_threshold times -- then the least loaded one; with no
  // cached prefix anywhere (or ties), the least loaded. SGLang's defaults:
  // 32 and 1.0001.
  int64_t balance_abs_threshold = 32;
  double balance_rel_threshold = 1.0001;
};

// A replica may be a pipeline-parallel group of `engines_per_replica`
// virtual engines (engine/pipeline_engines.h), listed replica by replica:
// the policy then chooses a replica on its engines' summed load and KV and
// their longest cached prefix, and the replica deals its requests to its
// engines round-robin, as one group's engines are dealt them.
class Router {
 public:
  explicit Router(const RouterSettings& settings, int32_t engines_per_replica = 1);
  // The engine (an index into `engines`, never empty, a multiple of
  // engines_per_replica long) `request` goes to.
  size_t route(const Request& request, std::span<const Scheduler* const> engines);
  int32_t engines_per_replica() const { return engines_per_replica_; }

 private:
  size_t choose_replica(const Request& request, std::span<const Scheduler* const> engines, size_t replicas);
  RouterSettings settings_;
  int32_t engines_per_replica_;
  Rng random_;
  size_t next_ = 0;  // RoundRobin
  std::vector<size_t> next_engine_;  // per replica, with several engines each
};

}  // namespace servesim
