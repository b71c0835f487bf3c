// The server's engine steps beside the prediction's (validate/server_steps.h):
// counts, mean tokens and the fraction of steps at each bound, worked by hand.
#include <catch2/catch.hpp>

#include "sim/errors.h"
#include "validate/server_steps.h"

using namespace servesim;

namespace {

// Steps that emit one token each, with a prompt of n - 1 tokens reaching
// its first token where n > 1; and a prefill chunk that emits nothing,
// which vLLM does not count as a step.
RunRecords predicted_steps(std::initializer_list<int> tokens) {
  RunRecords r;
  IterationRecord chunk;
  chunk.prefill_tokens = 512;
  r.iterations.push_back(chunk);
  for (int n : tokens) {
    IterationRecord it;
    it.emitted_tokens = 1;
    it.first_token_prompt_tokens = n - 1;
    it.prefill_tokens = 99;  // a step's query tokens are not what vLLM counts
    r.iterations.push_back(it);
  }
  return r;
}

nlohmann::json measured(double steps, double tokens, nlohmann::json buckets) {
  return {{"counters", {{"vllm:num_preemptions_total", 2}}},
          {"iteration_tokens", {{"steps", steps}, {"tokens", tokens}, {"buckets", buckets}}}};
}

}  // namespace

TEST_CASE("server steps: measured against predicted, by hand") {
  // Measured: 4 steps, 40 tokens, 2 of them with <= 8 tokens. Predicted: 5
  // steps of 1, 1, 8, 9 and 31 tokens.
  const nlohmann::json m = measured(4, 40, {{{"le", 8}, {"count", 2}}, {{"le", 32}, {"count", 4}}, {{"le", "+Inf"}, {"count", 4}}});
  const auto c = compare_server_steps(m, predicted_steps({1, 1, 8, 9, 31}), 1, "s.json");
  REQUIRE(c);
  CHECK(c->measured_steps == 4);
  CHECK(c->predicted_steps == 5);
  CHECK(c->predicted_tokens == 50);
  REQUIRE(c->cdf.size() == 3);
  CHECK(c->cdf[0].measured == Approx(0.5));
  CHECK(c->cdf[0].predicted == Approx(0.6));
  CHECK(c->cdf[1].predicted == Approx(1.0));
  CHECK(c->measured_preemptions == 2);
  CHECK(c->predicted_preemptions == 1);
  const nlohmann::json j = server_steps_json(*c);
  CHECK(j["steps"]["rel_error"].get<double>() == Approx(0.25));
  CHECK(j["tokens_per_step_mean"]["measured"].get<double>() == Approx(10));
  CHECK(j["tokens_per_step_mean"]["predicted"].get<double>() == Approx(10));
  CHECK(j["tokens_per_step_cdf"][2]["le"] == "+Inf");
  CHECK(format_server_steps(*c).find("steps 4 measured, 5 predicted (+25.0%)") != std::string::npos);
}

TEST_CASE("server steps: absent is nothing, malformed is refused by name") {
  const RunRecords p = predicted_steps({1});
  CHECK_FALSE(compare_server_steps(nullptr, p, 0, "s.json"));
  CHECK_FALSE(compare_server_steps({{"counters", nlohmann::json::object()}, {"iteration_tokens", nullptr}}, p, 0, "s"));
  auto refused = [&](const nlohmann::json& m, const char* words) {
    CHECK_THROWS_WITH(compare_server_steps(m, p, 0, "s.json"), Catch::Contains("s.json") && Catch::Contains(words));
  };
  refused("text", "must be an object or null");
  refused(measured(-1, 0, nlohmann::json::array()), "iteration_tokens.steps must be a finite number >= 0");
  refused(measured(1, 1, nlohmann::json::object()), "buckets must be an array");
  refused(measured(1, 1, {{{"le", 8}}}), "must be {le, count}");
  refused(measured(1, 1, {{{"le", 8}, {"count", 1}}, {{"le", 4}, {"count", 1}}}), "must ascend");
  refused(measured(1, 1, {{{"le", 8}, {"count", -1}}}), "cumulative counts from 0 to steps");
  refused(measured(1, 1, {{{"le", 8}, {"count", 2}}}), "cumulative counts from 0 to steps");
  refused(measured(2, 1, {{{"le", 8}, {"count", 2}}}), "must end with le \"+Inf\" at steps");
  refused(measured(2, 1, {{{"le", 8}, {"count", 1}}, {{"le", "+Inf"}, {"count", 1}}}), "must end with le \"+Inf\" at steps");
  nlohmann::json bad_counters = measured(1, 1, {{{"le", "+Inf"}, {"count", 1}}});
  bad_counters["counters"] = 3;
  refused(bad_counters, "server_metrics.counters must be an object");
  bad_counters["counters"] = {{"vllm:num_preemptions_total", "x"}};
  refused(bad_counters, "num_preemptions_total\"] must be a number");
}
