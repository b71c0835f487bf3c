// Prefix caching in the scheduler: vLLM's design-doc example step by step,
// hit counts against an independent computation, and the block pool's
// invariants under random workloads with preemption and eviction.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "sim/iteration_plan.h"
#include "sim/request.h"
#include "sim/scheduler.h"

#include "support/test_support.h"

using servesim::IterationPlan;
using servesim::IterationResult;
using servesim::Request;
using servesim::Scheduler;
using servesim::SchedulerConfig;
using servesim::SchedulerListener;
using servesim::SchedulerPolicy;
using servesim::TokenSpan;
using servesim::test::request;
using servesim::test::scheduler_config;

namespace {

Request with_tokens(int64_t id, int32_t output, std::vector<TokenSpan> spans) {
  Request r = request(id, 0, 0, output);
  r.tokens.prompt_spans = std::move(spans);
  r.tokens.output_source = 1000 + uint64_t(id);
  r.prompt_tokens = int32_t(r.tokens.prompt_tokens());
  return r;
}

struct Lookup {
  int32_t query = 0, hit = 0;
  bool readmission = false;
};

// Drives a scheduler one iteration at a time (one token per sampling
// sequence) and keeps what the prefix cache reported, the block table of
// every live sequence, and each step's plan.
class Driver final : public SchedulerListener {
 public:
  explicit Driver(const SchedulerConfig& c) : sched(c) {}

  void add(const Request& r) { REQUIRE_FALSE(sched.add_request(r)); }

  void step() {
    sched.schedule(plan, *this);
    for (const auto& s : plan.sequences) tables[s.request_id].assign(s.block_table.begin(), s.block_table.end());
    IterationResult result;
    sched.complete(plan, result, *this);
  }
  const servesim::ScheduledSequence* planned(int64_t id) const {
    for (const auto& s : plan.sequences)
      if (s.request_id == id) return &s;
    return nullptr;
  }

  void on_first_scheduled(int64_t) override {}
  void on_tokens(int64_t, int32_t) override {}
  void on_finished(int64_t id) override {
    finished.insert(id);
    tables.erase(id);
  }
  void on_preempted(int64_t id) override { tables.erase(id); }
  void on_prefix_cache_lookup(int64_t id, int32_t query, int32_t hit, bool readmission) override {
    lookups[id].push_back({query, hit, readmission});
  }

  Scheduler sched;
  IterationPlan plan;
  std::map<int64_t, std::vector<int32_t>> tables;  // live sequences' blocks
  std::map<int64_t, std::vector<Lookup>> lookups;
  std::set<int64_t> finished;
};

constexpr uint64_t kA = 1, kB = 2, kC = 3;

}  // namespace

TEST_CASE("Prefix cache: vLLM's design-doc example (block size 4, 10 blocks) step by step", "[prefix]") {
  // docs/design/prefix_caching.md, "Example". Chunked, a budget large
  // enough for every prompt, no watermark (floor(0.01 * 10) = 0 blocks).
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 4, 10, 64, 0.01));
  const auto& kv = d.sched.kv();

  // Time 1: request 0, 15 prompt tokens: 4 blocks, the 3 full ones cached.
  d.add(with_tokens(0, 4, {{kA, 0, 15}}));
  d.step();
  CHECK(d.tables[0] == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(kv.holds_key(0));
  CHECK(kv.holds_key(1));
  CHECK(kv.holds_key(2));
  CHECK_FALSE(kv.holds_key(3));
  CHECK(d.lookups[0].size() == 1);
  CHECK(d.lookups[0][0].query == 15);
  CHECK(d.lookups[0][0].hit == 0);

  // The first decode writes token 16: block 3 is full and cached.
  d.step();
  CHECK(kv.holds_key(3));
  // The next decode needs a fifth block: block 4.
  d.step();
  CHECK(d.tables[0] == std::vector<int32_t>{0, 1, 2, 3, 4});

  // Time 4: request 1, 14 tokens whose first 10 are request 0's: only the
  // first 2 blocks hit (the third matches 2 of its 4 tokens).
  d.add(with_tokens(1, 1, {{kA, 0, 10}, {kB, 0, 4}}));
  d.step();
  REQUIRE(d.lookups[1].size() == 1);
  CHECK(d.lookups[1][0].query == 14);
  CHECK(d.lookups[1][0].hit == 8);
  const auto* r1 = d.planned(1);
  REQUIRE(r1 != nullptr);
  CHECK(r1->num_cached_tokens == 8);
  CHECK(r1->num_query_tokens == 6);
  CHECK(r1->prefix_hit_tokens == 8);
  CHECK(d.plan.num_prefix_hit_tokens == 8);
  // Blocks 0 and 1 are shared with request 0, which decodes in this step too.
  CHECK(std::vector<int32_t>(r1->block_table.begin(), r1->block_table.end()) == std::vector<int32_t>{0, 1, 5, 6});
  const auto* r0 = d.planned(0);
  REQUIRE(r0 != nullptr);
  CHECK(std::vector<int32_t>(r0->block_table.begin(), r0->block_table.end()) ==
        std::vector<int32_t>{0, 1, 2, 3, 4});

  // Times 5 and 6: both finished in that step; request 0's blocks went to
  // the tail in reverse (0 and 1 were still request 1's), then request 1's.
  REQUIRE(d.finished == std::set<int64_t>{0, 1});
  CHECK(kv.free_queue() == std::vector<int32_t>{7, 8, 9, 4, 3, 2, 6, 5, 1, 0});
  CHECK(kv.num_used() == 0);
  CHECK(kv.evicted_blocks() == 0);

  // Time 7: request 2, 29 tokens whose first 12 are request 0's: blocks 0,
  // 1, 2 hit and leave the queue, then 7 8 9 4 3 are allocated; block 3
  // was cached, so it is evicted.
  d.add(with_tokens(2, 1, {{kA, 0, 12}, {kC, 0, 17}}));
  d.step();
  REQUIRE(d.lookups[2].size() == 1);
  CHECK(d.lookups[2][0].hit == 12);
  const auto* r2 = d.planned(2);
  REQUIRE(r2 != nullptr);
  CHECK(std::vector<int32_t>(r2->block_table.begin(), r2->block_table.end()) ==
        std::vector<int32_t>{0, 1, 2, 7, 8, 9, 4, 3});
  CHECK(kv.evicted_blocks() == 1);
}

TEST_CASE("Prefix cache: the hit is capped so that one token is computed", "[prefix]") {
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 4, 20, 64, 0));
  d.add(with_tokens(0, 1, {{kA, 0, 8}}));
  d.step();
  // The same 8 tokens again: 2 full cached blocks, but at most (8-1)/4 = 1 hits.
  d.add(with_tokens(1, 1, {{kA, 0, 8}}));
  d.step();
  CHECK(d.lookups[1][0].hit == 4);
  CHECK(d.planned(1)->num_query_tokens == 4);
  // 9 tokens: both blocks hit, one token computed.
  d.add(with_tokens(2, 1, {{kA, 0, 9}}));
  d.step();
  CHECK(d.lookups[2][0].hit == 8);
  CHECK(d.planned(2)->num_query_tokens == 1);
  CHECK(d.planned(2)->is_prefill);
}

TEST_CASE("Prefix cache: a prompt admitted in the same step reuses blocks scheduled before it", "[prefix]") {
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 4, 20, 64, 0));
  d.add(with_tokens(0, 2, {{kA, 0, 12}}));
  d.add(with_tokens(1, 2, {{kA, 0, 12}, {kB, 0, 3}}));
  d.step();
  CHECK(d.lookups[0][0].hit == 0);
  CHECK(d.lookups[1][0].hit == 12);
  CHECK(d.planned(1)->num_query_tokens == 3);
}

TEST_CASE("Prefix cache: off, or without token identity, nothing is looked up or shared", "[prefix]") {
  for (bool enabled : {true, false}) {
    SchedulerConfig c = scheduler_config(SchedulerPolicy::Chunked, 8, 64, 4, 20, 64, 0);
    c.enable_prefix_caching = enabled;
    Driver d(c);
    d.add(with_tokens(0, 1, {{kA, 0, 12}}));
    d.add(request(1, 0, 12, 1));  // no identity
    d.step();
    d.add(with_tokens(2, 1, {{kA, 0, 12}}));
    d.step();
    CHECK(d.lookups.count(1) == 0);
    CHECK(d.lookups.count(2) == size_t(enabled));
    CHECK(d.planned(2)->num_cached_tokens == (enabled ? 8 : 0));
    if (!enabled) CHECK(d.sched.kv().num_cached() == 0);
  }
}

TEST_CASE("Prefix cache: a preempted request finds its own blocks again, generated ones included", "[prefix]") {
  // 6 blocks of 4: request 0 (8 + 8 tokens) and request 1 (8 + 8) cannot
  // both finish without a preemption.
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 8, 64, 4, 6, 64, 0));
  d.add(with_tokens(0, 8, {{kA, 0, 8}}));
  d.add(with_tokens(1, 8, {{kB, 0, 8}}));
  for (int i = 0; i < 100 && d.sched.has_unfinished(); ++i) d.step();
  REQUIRE(d.finished.size() == 2);
  REQUIRE(d.sched.num_preemptions() >= 1);
  bool readmitted_with_hit = false;
  for (const auto& [id, ls] : d.lookups)
    for (const Lookup& l : ls)
      if (l.readmission) {
        CHECK(l.query > 8);  // prompt + generated tokens are looked up
        readmitted_with_hit |= l.hit > 0;
      }
  CHECK(readmitted_with_hit);
}

namespace {

// Hit tokens of each request when requests run one after the other with an
// unbounded cache, computed without block keys or the pool: a block is the
// tuple of (source, position) of every token from the sequence's start to
// the block's end, and the cache is the set of every full block any earlier
// request held (its prompt and its generated tokens).
std::vector<int32_t> independent_hits(const std::vector<Request>& rs, int32_t bs) {
  using Token = std::pair<uint64_t, int64_t>;
  std::set<std::vector<Token>> cache;
  std::vector<int32_t> hits;
  for (const Request& r : rs) {
    std::vector<Token> tokens;
    for (const TokenSpan& s : r.tokens.prompt_spans)
      for (int32_t j = 0; j < s.length; ++j) tokens.push_back({s.source, s.offset + j});
    const int64_t prompt = int64_t(tokens.size());
    // Blocks hit: the longest run of cached prefixes, at most (n - 1) / bs.
    int32_t hit = 0;
    for (int64_t b = 0; b < (prompt - 1) / bs; ++b) {
      if (!cache.count(std::vector<Token>(tokens.begin(), tokens.begin() + (b + 1) * bs))) break;
      hit += bs;
    }
    hits.push_back(hit);
    // Its KV holds the prompt and every generated token but the last.
    for (int32_t j = 0; j + 1 < r.output_tokens; ++j) tokens.push_back({r.tokens.output_source, j});
    for (int64_t b = 0; b < int64_t(tokens.size()) / bs; ++b)
      cache.insert(std::vector<Token>(tokens.begin(), tokens.begin() + (b + 1) * bs));
  }
  return hits;
}

}  // namespace

TEST_CASE("Prefix cache: hits match an independent computation on hand-made traces", "[prefix]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t bs = int32_t(1 + rng() % 6);
    std::vector<Request> rs;
    for (int64_t id = 0; id < 12; ++id) {
      // A shared head (one of 3 documents, cut at a random length), a
      // quote of an earlier request's output sometimes, a unique tail.
      std::vector<TokenSpan> spans;
      const uint64_t doc = 10 + rng() % 3;
      spans.push_back({doc, 0, int32_t(1 + rng() % 30)});
      if (id > 0 && rng() % 3 == 0) {
        const Request& earlier = rs[size_t(rng() % uint64_t(id))];
        spans.push_back({earlier.tokens.output_source, 0, int32_t(1 + rng() % uint64_t(earlier.output_tokens))});
      }
      if (rng() % 2) spans.push_back({500 + uint64_t(id), 0, int32_t(1 + rng() % 10)});
      rs.push_back(with_tokens(id, int32_t(1 + rng() % 9), spans));
    }
    // One request at a time, an unbounded cache.
    Driver d(scheduler_config(SchedulerPolicy::Chunked, 4, 16, bs, 100000, 4096, 0));
    for (const Request& r : rs) {
      d.add(r);
      while (d.sched.has_unfinished()) d.step();
    }
    const auto want = independent_hits(rs, bs);
    for (size_t i = 0; i < rs.size(); ++i) {
      INFO("trial " << trial << ", block size " << bs << ", request " << i);
      REQUIRE(d.lookups[int64_t(i)].size() == 1);
      CHECK(d.lookups[int64_t(i)][0].hit == want[i]);
      CHECK(d.lookups[int64_t(i)][0].query == rs[i].prompt_tokens);
    }
    CHECK(d.sched.kv().evicted_blocks() == 0);
  }
}

TEST_CASE("Prefix cache: a bounded cache evicts a chain's last block first", "[prefix]") {
  // 8 blocks of 4. Request 0 (20 tokens: 5 full blocks, all cached)
  // finishes and frees them last block first: the queue is 5 6 7 4 3 2 1 0.
  // Request 1 (unrelated, 13 tokens) takes 4 blocks: 5 6 7 and request 0's
  // last block, 4, which is evicted.
  Driver d(scheduler_config(SchedulerPolicy::Chunked, 4, 64, 4, 8, 64, 0));
  d.add(with_tokens(0, 1, {{kA, 0, 20}}));
  d.step();
  d.add(with_tokens(1, 1, {{kB, 0, 13}}));
  d.step();
  CHECK(d.sched.kv().evicted_blocks() == 1);
  // Request 2 repeats request 0 and one token more: 5 blocks could hit, the
  // first 4 survived.
  d.add(with_tokens(2, 1, {{kA, 0, 21}}));
  d.step();
  CHECK(d.lookups[2][0].hit == 16);
}

TEST_CASE("Prefix cache: invariants under random workloads with preemption and eviction", "[prefix]") {
  std::mt19937_64 rng(11);
  for (SchedulerPolicy policy : {SchedulerPolicy::Static, SchedulerPolicy::Continuous, SchedulerPolicy::Chunked}) {
    int64_t preemptions = 0, evictions = 0, hits = 0;
    for (int trial = 0; trial < 6; ++trial) {
      const int32_t bs = int32_t(2 + rng() % 7);
      const int64_t blocks = 40 + int64_t(rng() % 40);
      SchedulerConfig c = scheduler_config(policy, 6, policy == SchedulerPolicy::Chunked ? 24 : 256, bs, blocks,
                                           256, 0.05);
      c.waiting_order = trial % 2 ? servesim::WaitingOrder::LongestPrefixMatch : servesim::WaitingOrder::Fcfs;
      Driver d(c);
      int64_t next_id = 0;
      std::map<int64_t, Request> live;
      for (int step = 0; step < 400; ++step) {
        if (rng() % 3 == 0 && next_id < 60) {
          std::vector<TokenSpan> spans{{20 + rng() % 4, 0, int32_t(1 + rng() % 40)}};
          if (rng() % 2) spans.push_back({900 + uint64_t(next_id), 0, int32_t(1 + rng() % 20)});
          Request r = with_tokens(next_id++, int32_t(1 + rng() % 20), spans);
          if (!d.sched.add_request(r)) live[r.id] = r;
        }
        if (!d.sched.has_unfinished()) continue;
        d.step();
        // Every block is free (reference 0, in the queue) or held by the
        // live sequences exactly as often as its reference count says.
        const auto& kv = d.sched.kv();
        std::map<int32_t, int32_t> holders;
        for (const auto& [id, t] : d.tables)
          for (int32_t b : t) ++holders[b];
        const auto queue = kv.free_queue();
        const std::set<int32_t> free(queue.begin(), queue.end());
        REQUIRE(free.size() == queue.size());
        REQUIRE(int64_t(queue.size()) == kv.num_free());
        for (int32_t b = 0; b < int32_t(kv.num_blocks()); ++b) {
          INFO("block " << b);
          REQUIRE(kv.ref_count(b) >= 0);
          REQUIRE(kv.ref_count(b) == holders[b]);
          REQUIRE((kv.ref_count(b) == 0) == (free.count(b) == 1));
        }
        REQUIRE(kv.num_used() <= kv.num_blocks());
        REQUIRE(kv.num_cached() <= kv.num_blocks());
        // Tokens accounted for: a hit never reaches a sequence's last token.
        for (const auto& s : d.plan.sequences) {
          REQUIRE(s.num_query_tokens >= 1);
          REQUIRE(int64_t(s.block_table.size()) >= kv.blocks_for(s.num_cached_tokens + s.num_query_tokens));
          REQUIRE(s.prefix_hit_tokens <= s.num_cached_tokens);
        }
      }
      for (int i = 0; i < 100000 && d.sched.has_unfinished(); ++i) d.step();
      REQUIRE_FALSE(d.sched.has_unfinished());
      CHECK(d.finished.size() == live.size());
      CHECK(d.sched.kv().num_used() == 0);
      for (const auto& [id, ls] : d.lookups)
        for (const Lookup& l : ls) {
          CHECK(l.hit % bs == 0);
          CHECK(l.hit < l.query);
          hits += l.hit;
        }
      preemptions += d.sched.num_preemptions();
      evictions += d.sched.kv().evicted_blocks();
    }
    // The walk went through every path it checks.
    INFO("policy " << servesim::to_string(policy));
    CHECK(hits > 0);
    CHECK(evictions > 0);
    if (policy != SchedulerPolicy::Static) CHECK(preemptions > 0);  // static reserves, never preempts
  }
}

TEST_CASE("Prefix cache: lpm admits the waiting request with the longest cached prefix first, fcfs by arrival",
          "[prefix]") {
  for (auto order : {servesim::WaitingOrder::Fcfs, servesim::WaitingOrder::LongestPrefixMatch}) {
    SchedulerConfig c = scheduler_config(SchedulerPolicy::Chunked, 1, 64, 4, 40, 64, 0);
    c.waiting_order = order;
    Driver d(c);
    d.add(with_tokens(0, 1, {{kA, 0, 16}}));
    d.step();
    d.add(with_tokens(1, 1, {{kB, 0, 16}}));          // nothing cached
    d.add(with_tokens(2, 1, {{kA, 0, 12}, {kC, 0, 5}}));  // 12 tokens cached
    d.add(with_tokens(3, 1, {{kA, 0, 4}, {kC, 0, 5}}));   // 4 tokens cached
    std::vector<int64_t> admitted;
    while (d.sched.has_unfinished()) {
      d.step();
      for (const auto& s : d.plan.sequences)
        if (s.num_cached_tokens == s.prefix_hit_tokens && s.is_prefill) admitted.push_back(s.request_id);
    }
    INFO(servesim::to_string(order));
    CHECK(admitted == (order == servesim::WaitingOrder::Fcfs ? std::vector<int64_t>{1, 2, 3}
                                                             : std::vector<int64_t>{2, 3, 1}));
  }
}
