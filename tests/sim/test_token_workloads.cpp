// Synthetic workloads with token identity: shared-prefix groups and
// multi-turn sessions (their spans, numbering, think times and streams), and
// the Mooncake format for --lengths-from-trace.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/errors.h"
#include "sim/random.h"
#include "sim/sessions.h"
#include "sim/token_identity.h"
#include "sim/workload.h"

using servesim::ArrivalProcess;
using servesim::InputError;
using servesim::make_workload;
using servesim::Request;
using servesim::ThinkTime;
using servesim::token_source;
using servesim::TokenSourceKind;
using servesim::TokenSpan;
using servesim::Workload;
using servesim::WorkloadSpec;

namespace {

WorkloadSpec spec_of(ArrivalProcess arrival, int64_t n, uint64_t seed = 77) {
  WorkloadSpec s;
  s.arrival = arrival;
  s.num_requests = n;
  s.rate = 4.0;
  s.cv = 2.0;
  s.concurrency = 8;
  s.prompt_len = "uniform:10:300";
  s.output_len = "uniform:1:200";
  s.seed = seed;
  return s;
}

uint64_t source(TokenSourceKind kind, uint64_t a, uint64_t b = 0) { return token_source(kind, a, b); }

// Every field a request has, token identity and session links included.
bool same_requests(const std::vector<Request>& a, const std::vector<Request>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Request &x = a[i], &y = b[i];
    if (x.id != y.id || x.arrival_s != y.arrival_s || x.prompt_tokens != y.prompt_tokens ||
        x.output_tokens != y.output_tokens || x.tokens.prompt_spans != y.tokens.prompt_spans ||
        x.tokens.output_source != y.tokens.output_source || x.follows != y.follows ||
        x.think_time_s != y.think_time_s)
      return false;
  }
  return true;
}

// Session-major numbering: a session is its first turn (follows == -1)
// and the turns after it, each following the one before.
std::vector<std::vector<const Request*>> sessions_of(const Workload& w) {
  std::vector<std::vector<const Request*>> sessions;
  for (const Request& r : w.requests) {
    if (r.follows < 0) {
      sessions.emplace_back();
    } else {
      REQUIRE_FALSE(sessions.empty());
      REQUIRE(r.follows == sessions.back().back()->id);
    }
    sessions.back().push_back(&r);
  }
  return sessions;
}

}  // namespace

// ---------------------------------------------------------------- shared prefixes

TEST_CASE("Shared prefixes: one of G prefixes, then the request's own tail", "[workload][prefix]") {
  for (auto p : {ArrivalProcess::Poisson, ArrivalProcess::Gamma, ArrivalProcess::Constant,
                 ArrivalProcess::Closed}) {
    INFO(servesim::to_string(p));
    const WorkloadSpec plain = spec_of(p, 4000);
    WorkloadSpec s = plain;
    s.shared_prefix_groups = 4;
    s.shared_prefix_len = 1000;
    const Workload base = make_workload(plain);
    const Workload w = make_workload(s);
    REQUIRE(w.requests.size() == 4000);
    CHECK(w.closed_loop == base.closed_loop);
    std::map<uint64_t, int> per_group;
    for (size_t i = 0; i < w.requests.size(); ++i) {
      const Request& r = w.requests[i];
      const Request& b = base.requests[i];
      // The group has its own stream: the arrivals and the tails are the
      // lengths and arrivals the same seed gives without shared prefixes.
      REQUIRE(r.arrival_s == b.arrival_s);
      REQUIRE(r.output_tokens == b.output_tokens);
      REQUIRE(r.prompt_tokens == 1000 + b.prompt_tokens);
      REQUIRE(r.tokens.prompt_tokens() == r.prompt_tokens);
      REQUIRE(r.tokens.prompt_spans.size() == 2);
      const TokenSpan& prefix = r.tokens.prompt_spans[0];
      CHECK(prefix.offset == 0);
      CHECK(prefix.length == 1000);
      ++per_group[prefix.source];
      CHECK(r.tokens.prompt_spans[1] ==
            TokenSpan{source(TokenSourceKind::RequestTail, uint64_t(r.id)), 0, b.prompt_tokens});
      CHECK(r.tokens.output_source == source(TokenSourceKind::Output, uint64_t(r.id)));
      CHECK(b.tokens.empty());  // without the flags: no identity, as before
    }
    // Uniform over the 4 groups: 1000 each, binomial sd about 27.
    REQUIRE(per_group.size() == 4);
    for (int64_t g = 0; g < 4; ++g) {
      const int count = per_group[source(TokenSourceKind::SharedPrefix, uint64_t(g))];
      CHECK(std::abs(count - 1000) < 150);
    }
  }
}

TEST_CASE("Shared-prefix groups are seeded", "[workload][prefix]") {
  WorkloadSpec s = spec_of(ArrivalProcess::Poisson, 500);
  s.shared_prefix_groups = 10;
  s.shared_prefix_len = 64;
  CHECK(same_requests(make_workload(s).requests, make_workload(s).requests));
  WorkloadSpec other = s;
  other.seed = 78;
  const auto a = make_workload(s), b = make_workload(other);
  int same_group = 0;
  for (size_t i = 0; i < a.requests.size(); ++i)
    same_group += a.requests[i].tokens.prompt_spans[0] == b.requests[i].tokens.prompt_spans[0];
  CHECK(same_group < 100);  // about 50 by chance
}

TEST_CASE("Shared prefixes with lengths resampled from a Mooncake trace", "[workload][prefix]") {
  WorkloadSpec s = spec_of(ArrivalProcess::Poisson, 200);
  servesim::TraceOptions t;
  t.path = std::string(SERVESIM_SOURCE_DIR) + "/data/traces/mooncake_conversation.jsonl";
  t.format = servesim::TraceFormat::Mooncake;
  s.lengths_from_trace = t;
  const Workload plain = make_workload(s);
  s.shared_prefix_groups = 2;
  s.shared_prefix_len = 100;
  const Workload w = make_workload(s);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    // Resampled lengths carry no trace identity; the tail is the trace's prompt.
    CHECK(plain.requests[i].tokens.empty());
    CHECK(w.requests[i].prompt_tokens == 100 + plain.requests[i].prompt_tokens);
  }
}

// ---------------------------------------------------------------- sessions

TEST_CASE("Sessions: each turn extends the previous prompt with its output and a new message",
          "[workload][sessions]") {
  for (auto p : {ArrivalProcess::Poisson, ArrivalProcess::Gamma, ArrivalProcess::Constant}) {
    INFO(servesim::to_string(p));
    const WorkloadSpec plain = spec_of(p, 1000);
    WorkloadSpec s = plain;
    s.session_turns = "uniform:1:8";
    s.think_time = "exponential:3s";
    const Workload base = make_workload(plain);
    const Workload w = make_workload(s);
    REQUIRE(w.requests.size() == 1000);  // --num-requests counts every turn
    CHECK_FALSE(w.closed_loop);
    const auto sessions = sessions_of(w);
    REQUIRE(sessions.size() > 150);  // 1000 / 4.5 turns on average
    // First turns arrive as the first arrivals of the same seed's open loop.
    for (size_t k = 0; k < sessions.size(); ++k) REQUIRE(sessions[k][0]->arrival_s == base.requests[k].arrival_s);
    std::set<int32_t> turn_counts;
    for (size_t k = 0; k < sessions.size(); ++k) {
      const auto& turns = sessions[k];
      turn_counts.insert(int32_t(turns.size()));
      if (k + 1 < sessions.size()) REQUIRE(turns.size() <= 8);
      for (size_t t = 0; t < turns.size(); ++t) {
        const Request& r = *turns[t];
        const Request& b = base.requests[size_t(r.id)];
        INFO("session " << k << " turn " << t);
        REQUIRE(r.output_tokens == b.output_tokens);  // the same draws by id
        REQUIRE(r.tokens.prompt_tokens() == r.prompt_tokens);
        REQUIRE(r.tokens.output_source == source(TokenSourceKind::Output, uint64_t(r.id)));
        const TokenSpan message{source(TokenSourceKind::UserMessage, k, t), 0, b.prompt_tokens};
        REQUIRE(r.tokens.prompt_spans.back() == message);
        if (t == 0) {
          REQUIRE(r.follows == -1);
          REQUIRE(r.tokens.prompt_spans.size() == 1);
          continue;
        }
        const Request& prev = *turns[t - 1];
        REQUIRE(r.follows == prev.id);
        REQUIRE(r.follows < r.id);
        REQUIRE(r.think_time_s >= 0);
        // History: the previous prompt, then the previous output.
        std::vector<TokenSpan> expected = prev.tokens.prompt_spans;
        expected.push_back({prev.tokens.output_source, 0, prev.output_tokens});
        expected.push_back(message);
        REQUIRE(r.tokens.prompt_spans == expected);
        REQUIRE(r.prompt_tokens == prev.prompt_tokens + prev.output_tokens + b.prompt_tokens);
      }
    }
    CHECK(turn_counts.size() >= 8);  // every count 1..8 drawn (the last may be cut)
  }
}

TEST_CASE("Sessions: the last one is cut to --num-requests, and think times are as specified",
          "[workload][sessions]") {
  WorkloadSpec s = spec_of(ArrivalProcess::Poisson, 10);
  s.session_turns = "3";
  s.think_time = "1500ms";
  const Workload w = make_workload(s);
  const auto sessions = sessions_of(w);
  REQUIRE(sessions.size() == 4);
  CHECK(sessions[0].size() == 3);
  CHECK(sessions[2].size() == 3);
  CHECK(sessions[3].size() == 1);
  for (const Request& r : w.requests)
    if (r.follows >= 0) CHECK(r.think_time_s == 1.5);

  s.num_requests = 20000;
  s.think_time = "exponential:2";
  double sum = 0;
  int64_t count = 0;
  for (const Request& r : make_workload(s).requests) {
    if (r.follows < 0) continue;
    sum += r.think_time_s;
    ++count;
  }
  CHECK(sum / double(count) == Approx(2.0).epsilon(0.05));

  s.think_time = "uniform:1s:2s";
  for (const Request& r : make_workload(s).requests) {
    if (r.follows < 0) continue;
    REQUIRE(r.think_time_s >= 1.0);
    REQUIRE(r.think_time_s <= 2.0);
  }
}

TEST_CASE("Sessions with shared prefixes: every turn of a session starts with its group",
          "[workload][sessions][prefix]") {
  WorkloadSpec s = spec_of(ArrivalProcess::Poisson, 600);
  s.session_turns = "uniform:2:6";
  s.shared_prefix_groups = 3;
  s.shared_prefix_len = 2048;
  const Workload w = make_workload(s);
  std::set<uint64_t> groups;
  for (const auto& turns : sessions_of(w)) {
    const TokenSpan prefix = turns[0]->tokens.prompt_spans[0];
    CHECK(prefix.length == 2048);
    groups.insert(prefix.source);
    REQUIRE(turns[0]->tokens.prompt_spans.size() == 2);
    for (const Request* r : turns) {
      REQUIRE(r->tokens.prompt_spans[0] == prefix);
      REQUIRE(r->tokens.prompt_tokens() == r->prompt_tokens);
    }
  }
  CHECK(groups.size() == 3);
}

TEST_CASE("The same seed gives the same sessions, another seed others", "[workload][sessions]") {
  WorkloadSpec s = spec_of(ArrivalProcess::Gamma, 800);
  s.session_turns = "lognormal:4:0.8:1:30";
  s.think_time = "exponential:5s";
  s.shared_prefix_groups = 5;
  s.shared_prefix_len = 300;
  const Workload a = make_workload(s);
  CHECK(same_requests(a.requests, make_workload(s).requests));
  s.seed = 78;
  CHECK_FALSE(same_requests(a.requests, make_workload(s).requests));
}

TEST_CASE("Think-time specs parse, sample and describe", "[workload][sessions]") {
  servesim::Rng rng(5);
  CHECK(ThinkTime::parse("0", "--think-time").sample(rng) == 0.0);
  CHECK(ThinkTime::parse("2s", "--think-time").sample(rng) == 2.0);
  CHECK(ThinkTime::parse("fixed:250ms", "--think-time").describe() == "fixed:0.25");
  CHECK(ThinkTime::parse("uniform:1:3", "--think-time").describe() == "uniform:1:3");
  CHECK(ThinkTime::parse("exponential:500ms", "--think-time").kind() == ThinkTime::Kind::Exponential);
  for (const char* bad : {"", "-1", "soon", "fixed:", "uniform:3:1", "uniform:1", "exponential:0",
                          "exponential:-2s", "normal:1:2", "fixed:1:2"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(ThinkTime::parse(bad, "--think-time"), InputError);
    CHECK_THROWS_WITH(ThinkTime::parse(bad, "--think-time"), Catch::Contains("--think-time"));
  }
}

TEST_CASE("Bad shared-prefix and session settings throw InputError naming the flag",
          "[workload][sessions][prefix]") {
  using Catch::Contains;
  auto refused = [](const WorkloadSpec& s, const std::string& what) {
    INFO("expecting " << what);
    CHECK_THROWS_AS(make_workload(s), InputError);
    CHECK_THROWS_WITH(make_workload(s), Contains(what));
  };
  const WorkloadSpec ok = spec_of(ArrivalProcess::Poisson, 50);
  WorkloadSpec s = ok;
  s.shared_prefix_groups = 4;  // without a length
  refused(s, "--shared-prefix-len");
  s = ok;
  s.shared_prefix_len = 100;  // without groups
  refused(s, "--shared-prefix-groups");
  for (int64_t g : {int64_t{-1}, int64_t{100'000'000}}) {
    s = ok;
    s.shared_prefix_groups = g;
    s.shared_prefix_len = 10;
    refused(s, "--shared-prefix-groups must be in [1, ");
  }
  for (int64_t n : {int64_t{-5}, int64_t{1} << 31}) {
    s = ok;
    s.shared_prefix_groups = 2;
    s.shared_prefix_len = n;
    refused(s, "--shared-prefix-len must be in [1, ");
  }
  s = ok;
  s.shared_prefix_groups = 2;
  s.shared_prefix_len = 2147483640;  // plus a prompt of 10..300 tokens overflows 2^31 - 1
  refused(s, "--shared-prefix-len 2147483640 plus a prompt");

  WorkloadSpec trace;
  trace.arrival = ArrivalProcess::Trace;
  trace.trace.path = std::string(SERVESIM_TEST_DATA_DIR) + "/trace_azure_small.csv";
  s = trace;
  s.shared_prefix_groups = 2;
  s.shared_prefix_len = 10;
  refused(s, "--shared-prefix-groups does not apply to a trace replay");
  s = trace;
  s.session_turns = "3";
  refused(s, "--session-turns does not apply to a trace replay");

  s = spec_of(ArrivalProcess::Closed, 50);
  s.session_turns = "3";
  refused(s, "--session-turns needs open-loop arrivals");
  s = ok;
  s.session_turns = "uniform:0:3";
  refused(s, "--session-turns");
  s = ok;
  s.session_turns = "3";
  s.think_time = "later";
  refused(s, "--think-time");
  // One session of 10000 turns repeats its history: about 10^8 spans.
  s = ok;
  s.num_requests = 10000;
  s.session_turns = "10000";
  refused(s, "token spans");
  // Prompts that outgrow 2^31 - 1 tokens.
  s = ok;
  s.num_requests = 4;
  s.session_turns = "4";
  s.prompt_len = "1000000000";
  refused(s, "would have a prompt of");
}
