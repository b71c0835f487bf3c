// A server's iteration log (validate/iteration_log.h): written line by line,
// read back exactly, bad lines named, a cut-off last line dropped, and each
// logged plan costed.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "sim/cost/cost_models.h"
#include "sim/errors.h"
#include "validate/iteration_log.h"

using namespace servesim;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("servesim_iteration_log_" + name)).string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// A decode of one token at `cached` and a prefill chunk of `q` new tokens.
void make_plan(IterationPlan& plan, std::vector<int32_t>& blocks, int cached, int q) {
  blocks.assign(64, 0);
  plan.clear();
  ScheduledSequence decode;
  decode.request_id = 7;
  decode.num_query_tokens = 1;
  decode.num_cached_tokens = cached;
  decode.samples = true;
  decode.num_sample_rows = 1;
  decode.block_table = std::span<const int32_t>(blocks.data(), size_t((cached + 1 + 15) / 16));
  plan.add(decode);
  ScheduledSequence prefill;
  prefill.request_id = 9;
  prefill.num_query_tokens = q;
  prefill.is_prefill = true;
  prefill.block_table = std::span<const int32_t>(blocks.data(), size_t((q + 15) / 16));
  plan.add(prefill);
}

// Costs a plan at 1 ms per query token: known predictions to check against.
class PerTokenCost final : public CostModel {
 public:
  std::string name() const override { return "per-token"; }
  double seconds(const IterationPlan& plan) const override { return 1e-3 * plan.num_tokens(); }
  nlohmann::json describe() const override { return {{"name", name()}}; }
};

}  // namespace

TEST_CASE("iteration log: what the writer writes, the reader reads back exactly") {
  const std::string path = temp_path("round_trip.jsonl");
  IterationPlan plan;
  std::vector<int32_t> blocks;
  {
    IterationLogWriter log(path);
    make_plan(plan, blocks, 100, 37);
    IterationResult result;
    result.duration_s = 0.012345678901234567;
    result.emitted_tokens = {1, 0};
    log.write(plan, result, 1.0 / 3.0);
    IterationPlan empty;  // nothing scheduled: not an iteration
    log.write(empty, result, 2.0);
    make_plan(plan, blocks, 101, 5);
    result.duration_s = 0.25;
    result.emitted_tokens.clear();
    log.write(plan, result, 0.5);
    CHECK(log.lines() == 2);
  }
  const IterationLogRead read = read_iteration_log(path);
  CHECK_FALSE(read.truncated_last_line);
  REQUIRE(read.log.iterations.size() == 2);
  const RecordedIteration& first = read.log.iterations[0];
  CHECK(read.log.starts_s[0] == 1.0 / 3.0);  // shortest round-trip text: exact
  CHECK(first.measured_s == 0.012345678901234567);
  REQUIRE(first.sequences.size() == 2);
  CHECK(first.sequences[0].request_id == 7);
  CHECK(first.sequences[0].num_query_tokens == 1);
  CHECK(first.sequences[0].num_cached_tokens == 100);
  CHECK_FALSE(first.sequences[0].is_prefill);
  CHECK(first.sequences[0].samples);
  CHECK(first.sequences[0].emitted_tokens == 1);
  CHECK(first.sequences[1].is_prefill);
  CHECK_FALSE(first.sequences[1].samples);
  CHECK(first.sequences[1].num_query_tokens == 37);
  CHECK(first.decode_tokens == 1);
  CHECK(first.prefill_tokens == 37);
  CHECK(first.kind() == IterationKind::Mixed);
  CHECK(read.log.iterations[1].sequences[0].emitted_tokens == -1);
  CHECK(read.log.starts_s[1] == 0.5);
  std::filesystem::remove(path);
}

TEST_CASE("iteration log: a write that fails is said and stops the log, the check before leaves a file as it was") {
  IterationPlan plan;
  std::vector<int32_t> blocks;
  make_plan(plan, blocks, 10, 4);
  IterationResult result;
  result.duration_s = 0.01;
  if (std::filesystem::exists("/dev/full")) {  // every write fails with ENOSPC
    IterationLogWriter log("/dev/full");
    log.write(plan, result, 0);
    log.write(plan, result, 0.01);
    CHECK(log.failed());
    CHECK(log.lines() == 0);
  }
  const std::string path = temp_path("kept.jsonl");
  write_file(path, "an earlier log\n");
  check_writable(path);
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  CHECK(line == "an earlier log");
  CHECK_THROWS_WITH(check_writable(temp_path("no/such/dir/log.jsonl")), Catch::Contains("cannot open for writing"));
  std::filesystem::remove(path);
}

TEST_CASE("iteration log: a last line cut off mid-write is dropped, a bad line is named") {
  const std::string good =
      R"({"index":0,"start_s":0.1,"measured_s":0.02,"sequences":[[1,16,0,1,1,1]]})"
      "\n";
  const std::string path = temp_path("bad.jsonl");
  write_file(path, good + good + R"({"index":2,"start_s":0.3,"meas)");
  IterationLogRead read = read_iteration_log(path);
  CHECK(read.truncated_last_line);
  CHECK(read.log.iterations.size() == 2);

  // A last line complete but for its newline is kept.
  write_file(path, good + good.substr(0, good.size() - 1));
  read = read_iteration_log(path);
  CHECK_FALSE(read.truncated_last_line);
  CHECK(read.log.iterations.size() == 2);

  auto refused = [&](const std::string& text, const std::string& words) {
    write_file(path, text);
    CHECK_THROWS_WITH(read_iteration_log(path), Catch::Contains(words));
  };
  refused(good + "{not json\n" + good, "line 2: not a JSON object");
  refused(good + "[1,2]\n", "line 2: not a JSON object");
  refused(R"({"start_s":0.1,"measured_s":-1,"sequences":[[1,16,0,1,1,1]]})" "\n", "\"measured_s\" must be finite");
  refused(R"({"start_s":"x","measured_s":1,"sequences":[[1,16,0,1,1,1]]})" "\n", "\"start_s\" must be a number");
  refused(R"({"start_s":0,"measured_s":1,"sequences":[]})" "\n", "\"sequences\" must be a non-empty array");
  refused(R"({"start_s":0,"measured_s":1,"sequences":[[1,0,0,1,1,1]]})" "\n", "query_tokens must be >= 1");
  refused(R"({"start_s":0,"measured_s":1,"sequences":[[1,4,-3,1,1,1]]})" "\n", "cached_tokens must be >= 0");
  refused(R"({"start_s":0,"measured_s":1,"sequences":[[1,4,0,2,1,1]]})" "\n", "prefill and samples must be 0 or 1");
  refused(R"({"start_s":0,"measured_s":1,"sequences":[[1,4,0,1,1]]})" "\n", "must be [request_id");
  refused(R"({"start_s":0,"measured_s":1,"sequences":[[1,4.5,0,1,1,1]]})" "\n", "must be integers");
  // Past 64 signed bits, and sums that would overflow 32 (found in review).
  refused(R"({"start_s":0,"measured_s":1,"sequences":[[1,4,0,1,1,18446744073709551615]]})" "\n", "integers of 64 bits");
  refused(R"({"start_s":0,"measured_s":1,"sequences":[[1,16777216,1,1,1,1]]})" "\n",
          "cached_tokens + query_tokens must be <= 16777216");
  std::string many = R"({"start_s":0,"measured_s":1,"sequences":[)";
  for (int i = 0; i < 200; ++i) many += std::string(i ? "," : "") + "[1,16000000,0,1,1,1]";
  refused(many + "]}\n", "sum past 2147483647");
  refused(good + "\n" + good, "line 2: not a JSON object");
  refused("", "no iterations");
  CHECK_THROWS_WITH(read_iteration_log(temp_path("does_not_exist.jsonl")), Catch::Contains("cannot open"));
  std::filesystem::remove(path);
}

TEST_CASE("iteration log: each logged plan costed, errors by kind") {
  const std::string path = temp_path("check.jsonl");
  // A decode of 4 sequences measured at twice its 4 ms cost; a prefill of
  // 20 tokens measured at its 20 ms cost.
  write_file(path,
             R"({"index":0,"start_s":0,"measured_s":0.008,"sequences":[[1,1,10,0,1,1],[2,1,10,0,1,1],[3,1,10,0,1,1],[4,1,10,0,1,1]]})"
             "\n"
             R"({"index":1,"start_s":0.01,"measured_s":0.02,"sequences":[[5,20,0,1,1,1]]})"
             "\n");
  CostModels costs;
  costs.target = std::make_unique<PerTokenCost>();
  const LoggedIterationCheck c = check_iteration_log(read_iteration_log(path), costs, 16);
  REQUIRE(c.predicted_s.size() == 2);
  CHECK(c.predicted_s[0] == Approx(0.004));
  CHECK(c.predicted_s[1] == Approx(0.020));
  CHECK(c.errors.decode.count == 1);
  CHECK(c.errors.decode.bias == Approx(-0.5));
  CHECK(c.errors.prefill.mape == Approx(0.0).margin(1e-12));
  CHECK(c.errors.all.mape == Approx(0.25));
  const nlohmann::json j = logged_iteration_check_json(c);
  CHECK(j["iterations"] == 2);
  CHECK(j["iteration_mape"]["bias"]["decode"].get<double>() == Approx(-0.5));
  CHECK(j["iteration_breakdown"].is_object());
  const std::string csv = logged_iterations_csv(c);
  CHECK(csv.rfind("index,kind,start_s,", 0) == 0);
  CHECK(csv.find("\n0,decode,0,0,4,0,4,11,0.008,0.004") != std::string::npos);
  CHECK(format_logged_iteration_check(c).find("2 logged") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("iteration log: TPOT on the server's steps, and with each step at its predicted cost") {
  const std::string path = temp_path("tpot.jsonl");
  // Request 1: a 20-token prefill (20 ms, predicted 20 ms) that emits its
  // first token, then two decodes of 8 ms each (predicted 1 ms), 1 ms after
  // the prefill. Request 2 emits one token only: no TPOT.
  write_file(path,
             R"({"index":0,"start_s":0,"measured_s":0.02,"sequences":[[1,20,0,1,1,1]]})"
             "\n"
             R"({"index":1,"start_s":0.021,"measured_s":0.008,"sequences":[[1,1,20,0,1,1]]})"
             "\n"
             R"({"index":2,"start_s":0.029,"measured_s":0.008,"sequences":[[1,1,21,0,1,-1]]})"
             "\n"
             R"({"index":3,"start_s":0.5,"measured_s":0.004,"sequences":[[2,4,0,1,1,1]]})"
             "\n");
  CostModels costs;
  costs.target = std::make_unique<PerTokenCost>();
  const LoggedIterationCheck c = check_iteration_log(read_iteration_log(path), costs, 16);
  REQUIRE(c.tpot_measured_s.count == 1);
  // Measured: (0.037 - 0.020) / 2; replayed: the 1 ms gap kept, each decode 1 ms: (0.023 - 0.020) / 2.
  CHECK(c.tpot_measured_s.p50 == Approx(0.0085));
  CHECK(c.tpot_replayed_s.p50 == Approx(0.0015));
  const nlohmann::json j = logged_iteration_check_json(c);
  CHECK(j["tpot_s"]["rel_error"]["p50"].get<double>() == Approx(0.0015 / 0.0085 - 1));
  REQUIRE(c.requests.size() == 1);
  CHECK(c.requests[0].request_id == 1);
  CHECK(c.requests[0].tokens == 3);
  CHECK(logged_requests_csv(c) == fmt::format("request_id,tokens,measured_tpot_s,replayed_tpot_s\n1,3,{},{}\n",
                                              c.requests[0].measured_s, c.requests[0].replayed_s));
  std::filesystem::remove(path);
}

TEST_CASE("iteration log: a number past a double's range is refused by line") {
  // Found by fuzz_iteration_log: nlohmann::json throws out_of_range, not parse_error.
  const std::string good =
      R"({"index":0,"start_s":0.1,"measured_s":0.02,"sequences":[[1,16,0,1,1,1]]})"
      "\n";
  CHECK_THROWS_WITH(parse_iteration_log(good + R"({"start_s":5e1814918,"measured_s":1,"sequences":[[1,1,0,0,1,1]]})"
                                               "\n",
                                        "log"),
                    Catch::Contains("log line 2: not a JSON object"));
}
