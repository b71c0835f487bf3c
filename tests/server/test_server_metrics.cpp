// bench's reading of a server's /metrics (engine/client/prometheus_text.h,
// server_metrics.h): the text format's samples, and the change of vLLM's
// counters and tokens-per-step histogram between two scrapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>

#include "engine/client/prometheus_text.h"
#include "engine/client/server_metrics.h"
#include "engine/server/serving_metrics.h"

using namespace servesim;
using Catch::Matchers::Contains;

TEST_CASE("bench: the Prometheus text format's samples, labels and special values", "[server]") {
  const std::vector<PromSample> s = parse_prometheus_text(
      "# HELP x A help line, {not} a sample\n"
      "# TYPE x counter\n"
      "x_total 3\n"
      "y{a=\"1\",b=\"q\\\"uote, and \\\\ and \\n\"} 2.5e-3 1700000000000\n"
      "  z{le=\"+Inf\",} +Inf\r\n"
      "\n"
      "w NaN\n"
      "v{} -Inf\n");
  REQUIRE(s.size() == 5);
  CHECK(s[0].name == "x_total");
  CHECK(s[0].value == 3);
  CHECK(s[1].labels.at("a") == "1");
  CHECK(s[1].labels.at("b") == "q\"uote, and \\ and \n");
  CHECK(s[1].value == Approx(0.0025));
  CHECK(s[2].labels.at("le") == "+Inf");
  CHECK(std::isinf(s[2].value));
  CHECK(std::isnan(s[3].value));
  CHECK(s[4].value < 0);
  CHECK(std::isinf(s[4].value));

  auto refused = [](const char* text, const char* words) {
    CHECK_THROWS_WITH(parse_prometheus_text(text), Contains(words));
  };
  refused("ok 1\n9bad 1\n", "line 2: a sample must start with a metric name");
  refused("x{a=\"1\" 1\n", "labels do not close");
  refused("x{a=1} 1\n", "a label value must be quoted");
  refused("x{a=\"1} 1\n", "does not close with '\"'");
  refused("x\n", "followed by its value");
  refused("x 0x10\n", "not a sample value");
  refused("x one\n", "not a sample value");
}

TEST_CASE("bench: the server's counters and steps over a run, from its own exporter", "[server]") {
  // The server's exporter, before and after three steps of 1, 20 and 300 tokens.
  ServingMetrics metrics("m");
  metrics.add_prompt_tokens(100);
  metrics.observe_iteration_tokens(5000);  // before the run: not counted
  const std::vector<PromSample> before = parse_prometheus_text(metrics.render());
  metrics.add_prompt_tokens(320);
  metrics.add_generation_tokens(7);
  for (int n : {1, 20, 300}) metrics.observe_iteration_tokens(n);
  const ServerMetricsDelta d = server_metrics_delta(before, parse_prometheus_text(metrics.render()));
  CHECK(d.counters.at("vllm:prompt_tokens_total") == 320);
  CHECK(d.counters.at("vllm:generation_tokens_total") == 7);
  CHECK(d.counters.at("vllm:num_preemptions_total") == 0);
  REQUIRE(d.steps);
  CHECK(*d.steps == 3);
  CHECK(*d.step_tokens == 321);
  REQUIRE(d.step_buckets.size() == 14);  // vLLM's 13 bounds and +Inf
  CHECK(d.step_buckets[0] == std::pair<double, double>(1, 1));
  CHECK(d.step_buckets[2] == std::pair<double, double>(16, 1));
  CHECK(d.step_buckets[3] == std::pair<double, double>(32, 2));
  CHECK(d.step_buckets[6] == std::pair<double, double>(256, 2));
  CHECK(d.step_buckets[7] == std::pair<double, double>(512, 3));
  CHECK(std::isinf(d.step_buckets.back().first));
  CHECK(d.step_buckets.back().second == 3);
  const nlohmann::json j = server_metrics_json(d, "http://h/metrics");
  CHECK(j["iteration_tokens"]["steps"] == 3);
  CHECK(j["iteration_tokens"]["mean"].get<double>() == Approx(107));
  CHECK(j["iteration_tokens"]["buckets"].back()["le"] == "+Inf");

  // A server restarted between the scrapes: what fell is left out, and said.
  const ServerMetricsDelta restarted = server_metrics_delta(parse_prometheus_text(metrics.render()), before);
  CHECK_FALSE(restarted.steps);
  CHECK_FALSE(restarted.counters.count("vllm:prompt_tokens_total"));
  CHECK(restarted.counters.at("vllm:num_preemptions_total") == 0);
  REQUIRE(restarted.notes.size() == 3);  // prompt and generation tokens, the histogram
  CHECK_THAT(server_metrics_json(restarted, "u")["notes"][2].get<std::string>(), Contains("restarted"));

  // A server without the histogram (an older vLLM): counters only.
  const ServerMetricsDelta counters_only = server_metrics_delta({}, parse_prometheus_text("vllm:prompt_tokens_total 4\n"));
  CHECK_FALSE(counters_only.steps);
  CHECK(server_metrics_json(counters_only, "u")["iteration_tokens"].is_null());
  CHECK(counters_only.counters.at("vllm:prompt_tokens_total") == 4);
}
