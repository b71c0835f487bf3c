// `validate --measured` and `fit`: reading measured runs (a servesim run
// folder and a vLLM `bench serve --save-result` JSON) on hand-made files,
// their errors by name, a run predicted with its own settings, the cost file,
// and the fit recovering parameters servesim itself simulated with.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/simulation.h"
#include "sim/errors.h"
#include "sim/report.h"
#include "support/test_support.h"
#include "validate/fit_cost_file.h"
#include "validate/fit_roofline.h"
#include "validate/measured_report.h"
#include "validate/measured_run.h"

using namespace servesim;
using servesim::test::roofline_setup;
namespace fs = std::filesystem;

namespace {

// A fresh folder per test case, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("servesim_measured_" + name + "_" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string file(const std::string& name, const std::string& text) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
};

// Checks that `f` throws InputError whose message holds every one of `parts`.
template <typename F>
void require_input_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    FAIL("no InputError");
  } catch (const InputError& e) {
    const std::string what = e.what();
    INFO(what);
    for (const std::string& part : parts) CHECK(what.find(part) != std::string::npos);
  }
}

// A simulation of `setup` written as a run folder, as `simulate --out` writes it.
SimulationOutput simulate_into(const SimulationSetup& setup, const std::string& dir) {
  SimulationOutput out = simulate(setup);
  write_run_outputs(dir, out.records, summary_to_json(out.summary, setup.slo, nlohmann::json::object()));
  return out;
}

}  // namespace

TEST_CASE("measured: a servesim run folder is read by column name, sorted by arrival and shifted to t = 0") {
  TempDir dir("folder");
  dir.file("requests.csv",
           "id,status,arrival_s,prompt_tokens,output_tokens,ttft_s,tpot_s,e2e_s,rejection_reason\n"
           "0,completed,1.5,100,10,0.2,0.01,0.29,\n"
           "1,completed,1.0,50,1,0.1,,0.1,\n"
           "2,rejected,2.0,9000,5,,,,\"prompt, too long\"\n");
  dir.file("summary.json", R"({"itl_s": {"count": 9, "mean": 0.01, "p50": 0.01, "p90": 0.012, "p95": 0.013,
                              "p99": 0.014, "min": 0.009, "max": 0.015}})");
  const MeasuredRun run = read_measured_run(dir.path.string());
  CHECK(run.format == "servesim");
  REQUIRE(run.requests.size() == 3);
  CHECK(run.requests[0].id == 1);
  CHECK(run.requests[0].arrival_s == 0.0);
  CHECK(run.requests[1].arrival_s == Approx(0.5));
  CHECK(run.requests[1].prompt_tokens == 100);
  CHECK(run.requests[2].completed == false);
  CHECK(run.completed() == 2);
  CHECK(run.ttft().count == 2);
  CHECK(run.ttft().mean == Approx(0.15));
  CHECK(run.tpot().count == 1);  // one request has a single output token
  CHECK(run.itl().p90 == Approx(0.012));
  CHECK(run.duration_s() == Approx(0.5 + 0.29));
  const Workload w = measured_workload(run);
  REQUIRE(w.requests.size() == 3);
  CHECK(w.requests[1].id == 1);
  CHECK(w.requests[1].arrival_s == Approx(0.5));
  CHECK(w.requests[2].prompt_tokens == 9000);
  CHECK_FALSE(w.closed_loop);
}

TEST_CASE("measured: a vLLM bench serve JSON gives TTFT, TPOT and E2E by vLLM's definitions") {
  TempDir dir("vllm");
  const std::string path = dir.file("result.json", R"({
    "backend": "vllm", "request_rate": 4.0, "burstiness": 1.0,
    "input_lens": [128, 256, 64],
    "output_lens": [4, 3, 0],
    "ttfts": [0.05, 0.08, 0.0],
    "itls": [[0.01, 0.02, 0.03], [0.02, 0.02], []],
    "start_times": [100.25, 100.0, 100.5],
    "errors": ["", "", "Internal Server Error"]})");
  const MeasuredRun run = read_measured_run(path);
  CHECK(run.format == "vllm");
  CHECK_FALSE(run.arrivals_assumed);
  CHECK(run.dropped_failed == 1);
  REQUIRE(run.requests.size() == 2);
  // Sorted by start time: request 1 first, at t = 0.
  CHECK(run.requests[0].id == 1);
  CHECK(run.requests[0].arrival_s == 0.0);
  CHECK(run.requests[1].arrival_s == Approx(0.25));
  const MeasuredRequest& a = run.requests[1];
  CHECK(a.prompt_tokens == 128);
  CHECK(a.output_tokens == 4);
  CHECK(a.ttft_s == Approx(0.05));
  CHECK(a.e2e_s == Approx(0.05 + 0.06));
  CHECK(a.tpot_s == Approx(0.06 / 3));
  CHECK(run.requests[0].tpot_s == Approx(0.04 / 2));
  CHECK(run.itl().count == 5);
  CHECK(run.itl().mean == Approx(0.1 / 5));
}

TEST_CASE("measured: a vLLM JSON without start times assumes arrivals from request_rate and says so") {
  TempDir dir("assumed");
  const std::string lists = R"("input_lens": [10, 10, 10, 10], "output_lens": [2, 2, 2, 2],
      "ttfts": [0.1, 0.1, 0.1, 0.1], "itls": [[0.01], [0.01], [0.01], [0.01]])";
  SECTION("a finite rate: gamma gaps, seeded, request 0 at t = 0") {
    const std::string path = dir.file("r.json", "{\"request_rate\": 2.0, " + lists + "}");
    const MeasuredRun a = read_measured_run(path, {7});
    const MeasuredRun b = read_measured_run(path, {7});
    CHECK(a.arrivals_assumed);
    CHECK(a.arrivals_note.find("assumed") != std::string::npos);
    CHECK(a.requests[0].arrival_s == 0.0);
    CHECK(a.requests[3].arrival_s > 0.0);
    CHECK(a.requests[3].arrival_s == b.requests[3].arrival_s);
  }
  SECTION("an infinite rate: every request at t = 0") {
    const std::string path = dir.file("r.json", "{\"request_rate\": \"inf\", " + lists + "}");
    const MeasuredRun run = read_measured_run(path);
    for (const MeasuredRequest& r : run.requests) CHECK(r.arrival_s == 0.0);
    CHECK_FALSE(measured_workload(run).closed_loop);
  }
  SECTION("an infinite rate under max_concurrency: closed loop") {
    const std::string path = dir.file("r.json", "{\"request_rate\": \"inf\", \"max_concurrency\": 2, " + lists + "}");
    const Workload w = measured_workload(read_measured_run(path));
    CHECK(w.closed_loop);
    CHECK(w.concurrency == 2);
  }
  SECTION("a folder holding vllm_result.json") {
    dir.file("vllm_result.json", "{\"request_rate\": \"inf\", " + lists + "}");
    CHECK(read_measured_run(dir.path.string()).format == "vllm");
  }
}

TEST_CASE("measured: bad input is refused naming the file and the field") {
  TempDir dir("bad");
  require_input_error([&] { read_measured_run((dir.path / "missing.json").string()); }, {"missing.json", "no such"});
  require_input_error([&] { read_measured_run(dir.path.string()); }, {"requests.csv", "vllm_result.json"});
  const std::string not_json = dir.file("a.json", "{ nope");
  require_input_error([&] { read_measured_run(not_json); }, {"a.json", "not JSON"});
  const std::string no_inputs = dir.file("b.json", R"({"output_lens": [1], "ttfts": [0.1], "itls": [[]]})");
  require_input_error([&] { read_measured_run(no_inputs); }, {"b.json", "input_lens"});
  const std::string unequal = dir.file("c.json", R"({"input_lens": [1, 2], "output_lens": [1], "ttfts": [0.1, 0.1],
                                                    "itls": [[], []]})");
  require_input_error([&] { read_measured_run(unequal); }, {"c.json", "output_lens", "equal length"});
  const std::string negative = dir.file("d.json", R"({"input_lens": [1], "output_lens": [2], "ttfts": [-0.1],
                                                     "itls": [[0.01]]})");
  require_input_error([&] { read_measured_run(negative); }, {"d.json", "ttfts[0]", "negative"});
  const std::string negative_itl = dir.file("e.json", R"({"input_lens": [1], "output_lens": [2], "ttfts": [0.1],
                                                         "itls": [[-0.01]]})");
  require_input_error([&] { read_measured_run(negative_itl); }, {"e.json", "itls[0][0]", "negative"});
  const std::string short_starts = dir.file("f.json", R"({"input_lens": [1], "output_lens": [2], "ttfts": [0.1],
                                                         "itls": [[0.01]], "start_times": []})");
  require_input_error([&] { read_measured_run(short_starts); }, {"f.json", "start_times"});
  const std::string bad_rate = dir.file("g.json", R"({"input_lens": [1], "output_lens": [2], "ttfts": [0.1],
                                                     "itls": [[0.01]], "request_rate": -3})");
  require_input_error([&] { read_measured_run(bad_rate); }, {"g.json", "request_rate"});

  TempDir folder("bad_folder");
  folder.file("requests.csv", "id,arrival_s,prompt_tokens,output_tokens,ttft_s,tpot_s,e2e_s\n0,-1,10,2,0.1,0.01,0.2\n");
  require_input_error([&] { read_measured_run(folder.path.string()); }, {"requests.csv", "row 1", "arrival_s"});
  folder.file("requests.csv", "id,arrival_s,prompt_tokens,ttft_s,tpot_s,e2e_s\n0,0,10,0.1,0.01,0.2\n");
  require_input_error([&] { read_measured_run(folder.path.string()); }, {"requests.csv", "output_tokens"});
  folder.file("requests.csv", "id,arrival_s,prompt_tokens,output_tokens,ttft_s,tpot_s,e2e_s\n0,0,10,2,x,0.01,0.2\n");
  require_input_error([&] { read_measured_run(folder.path.string()); }, {"requests.csv", "ttft_s", "not a number"});
}

TEST_CASE("measured: a simulated run predicted with its own settings has no error") {
  TempDir dir("self");
  SimulationSetup setup = roofline_setup(SchedulerPolicy::Chunked, 8.0, 300, "lognormal:512:0.8:16:4096",
                                         "lognormal:128:0.8:2:512", 3);
  const SimulationOutput truth = simulate_into(setup, (dir.path / "run").string());
  MeasuredPrediction p;
  p.measured = read_measured_run((dir.path / "run").string());
  const CostModels costs = setup_cost_models(setup);
  p.predicted = predict_measured_run(setup, costs, p.measured);
  REQUIRE(p.predicted.summary.completed == truth.summary.completed);
  const nlohmann::json report = measured_report_json(p);
  for (const char* metric : {"ttft_s", "tpot_s", "e2e_s", "itl_s"})
    for (const char* stat : {"mean", "p50", "p90", "p99"}) {
      INFO(metric << " " << stat);
      CHECK(std::abs(report[metric]["rel_error"][stat].get<double>()) < 1e-9);
    }
  write_measured_outputs((dir.path / "out").string(), p, summary_to_json(p.predicted.summary, {}, {}));
  for (const char* f : {"report.json", "requests.csv", "predicted/summary.json", "predicted/requests.csv"})
    CHECK(fs::exists(dir.path / "out" / f));
  CHECK(format_measured_table(p, "t").find("TTFT") != std::string::npos);
}

TEST_CASE("fit: the cost file round-trips and is checked field by field") {
  TempDir dir("cost");
  RooflineOptions r;
  r.compute_efficiency = 0.5, r.memory_efficiency = 0.75, r.iteration_overhead_s = 3e-4;
  const std::string path = (dir.path / "cost.json").string();
  write_cost_file(path, cost_file_json(r, "llama-3.1-8b", "h200", {{"runs", 1}}));
  const CostFile f = read_cost_file(path);
  CHECK(f.hardware == "h200");
  const RooflineOptions back = apply_cost_file(f, RooflineOptions{});
  CHECK(back.compute_efficiency == 0.5);
  CHECK(back.memory_efficiency == 0.75);
  CHECK(back.iteration_overhead_s == 3e-4);
  CHECK(back.sequence_overhead_s == 0);
  CHECK_FALSE(f.sequence_overhead_s.has_value());  // not written while unmodelled
  r.sequence_overhead_s = 2e-5;
  write_cost_file(path, cost_file_json(r, "llama-3.1-8b", "h200", {}));
  CHECK(apply_cost_file(read_cost_file(path), RooflineOptions{}).sequence_overhead_s == 2e-5);
  const std::string negative =
      dir.file("n.json", R"({"servesim_cost_file": 1, "roofline": {"sequence_overhead_s": -1}})");
  require_input_error([&] { read_cost_file(negative); }, {"n.json", "sequence_overhead_s", ">= 0"});
  const std::string partial = dir.file("p.json", R"({"servesim_cost_file": 1, "roofline": {"memory_efficiency": 0.6}})");
  const RooflineOptions p = apply_cost_file(read_cost_file(partial), RooflineOptions{});
  CHECK(p.memory_efficiency == 0.6);
  CHECK(p.compute_efficiency == RooflineOptions{}.compute_efficiency);
  const std::string typo = dir.file("t.json", R"({"servesim_cost_file": 1, "roofline": {"compute_eff": 0.6}})");
  require_input_error([&] { read_cost_file(typo); }, {"t.json", "roofline.compute_eff", "unknown"});
  const std::string range = dir.file("r.json", R"({"servesim_cost_file": 1, "roofline": {"compute_efficiency": 1.5}})");
  require_input_error([&] { read_cost_file(range); }, {"r.json", "compute_efficiency", "(0, 1]"});
  const std::string other = dir.file("o.json", R"({"roofline": {"compute_efficiency": 0.5}})");
  require_input_error([&] { read_cost_file(other); }, {"o.json", "servesim_cost_file"});
}

// A light load (batches of one or two: the decode and prefill costs) and a
// heavier one with long contexts (batches of about 15 whose KV bytes are half
// the weights': they separate the memory efficiency from the overhead),
// simulated with `truth` as the "measured" runs.
static std::vector<MeasuredRun> runs_costed_with(const TempDir& dir, const RooflineOptions& truth) {
  struct Load {
    const char* name;
    double rate;
    const char *prompt, *output;
  };
  std::vector<MeasuredRun> runs;
  for (const Load& load : {Load{"light", 0.5, "lognormal:1024:0.6:64:4096", "lognormal:192:0.6:8:512"},
                           Load{"heavy", 4.0, "lognormal:4096:0.3:1024:8192", "lognormal:256:0.3:64:512"}}) {
    const std::string name = load.name;
    SimulationSetup s = roofline_setup(SchedulerPolicy::Chunked, load.rate, 200, load.prompt, load.output, 11);
    s.cost.roofline = truth;
    simulate_into(s, (dir.path / name).string());
    runs.push_back(read_measured_run((dir.path / name).string()));
  }
  return runs;
}

TEST_CASE("fit: recovers the efficiencies and overhead a simulated run was costed with") {
  TempDir dir("fit");
  RooflineOptions truth;
  truth.compute_efficiency = 0.45;
  truth.memory_efficiency = 0.62;
  truth.iteration_overhead_s = 1.2e-3;
  const std::vector<MeasuredRun> runs = runs_costed_with(dir, truth);
  SimulationSetup setup = roofline_setup(SchedulerPolicy::Chunked, 1, 1, "1", "1", 0);  // defaults as the start

  SECTION("all three from two loads") {
    const FitResult fit = fit_roofline(setup, runs);
    INFO("fitted " << fit.fitted.compute_efficiency << " " << fit.fitted.memory_efficiency << " "
                   << fit.fitted.iteration_overhead_s << " objective " << fit.objective << " after "
                   << fit.evaluations << " evaluations");
    CHECK(fit.objective < fit.start_objective);
    CHECK(fit.objective < 1e-5);
    CHECK(fit.fitted.compute_efficiency == Approx(truth.compute_efficiency).epsilon(0.03));
    CHECK(fit.fitted.memory_efficiency == Approx(truth.memory_efficiency).epsilon(0.03));
    CHECK(fit.fitted.iteration_overhead_s == Approx(truth.iteration_overhead_s).epsilon(0.05));
  }
  SECTION("compute efficiency and overhead from the light run, memory efficiency held") {
    setup.cost.roofline.memory_efficiency = truth.memory_efficiency;
    FitOptions options;
    options.parameters = {FitParameter::ComputeEfficiency, FitParameter::IterationOverhead};
    const FitResult fit = fit_roofline(setup, std::span(runs).first(1), options);
    INFO("fitted " << fit.fitted.compute_efficiency << " " << fit.fitted.iteration_overhead_s << " objective "
                   << fit.objective);
    CHECK(fit.fitted.memory_efficiency == truth.memory_efficiency);
    CHECK(fit.fitted.compute_efficiency == Approx(truth.compute_efficiency).epsilon(0.03));
    CHECK(fit.fitted.iteration_overhead_s == Approx(truth.iteration_overhead_s).epsilon(0.05));
  }
  SECTION("refused without a run or a parameter") {
    require_input_error([&] { fit_roofline(setup, std::span<const MeasuredRun>()); }, {"--measured"});
    FitOptions none;
    none.parameters.clear();
    require_input_error([&] { fit_roofline(setup, runs, none); }, {"--fit-parameters"});
    CHECK_THROWS_AS(parse_fit_parameter("speed"), InputError);
  }
}

TEST_CASE("fit: recovers a per-sequence overhead, when named") {
  // An engine whose host work grows with the batch (a sampler per sequence):
  // 0.3 ms per sampling sequence, a fifth of a 15-sequence decode step.
  TempDir dir("fit-seq");
  RooflineOptions truth;
  truth.compute_efficiency = 0.45;
  truth.memory_efficiency = 0.62;
  truth.iteration_overhead_s = 1.2e-3;
  truth.sequence_overhead_s = 3e-4;
  const std::vector<MeasuredRun> runs = runs_costed_with(dir, truth);
  SimulationSetup setup = roofline_setup(SchedulerPolicy::Chunked, 1, 1, "1", "1", 0);
  CHECK(parse_fit_parameter("sequence-overhead") == FitParameter::SequenceOverhead);

  SECTION("all four fit the runs; without it they fit worse") {
    // Two batch sizes do not pin memory efficiency, iteration and sequence
    // overheads apart (a decode step is weights / efficiency + overhead + S
    // x per sequence), so only the fit's quality is asserted here.
    FitOptions options;
    options.parameters = {FitParameter::ComputeEfficiency, FitParameter::MemoryEfficiency,
                          FitParameter::IterationOverhead, FitParameter::SequenceOverhead};
    const FitResult fit = fit_roofline(setup, runs, options);
    INFO("fitted " << fit.fitted.compute_efficiency << " " << fit.fitted.memory_efficiency << " "
                   << fit.fitted.iteration_overhead_s << " " << fit.fitted.sequence_overhead_s << " objective "
                   << fit.objective << " after " << fit.evaluations << " evaluations");
    CHECK(fit.start.sequence_overhead_s == Approx(1e-5));  // an unmodelled one starts at 10 us
    CHECK(fit.objective < 1e-4);
    CHECK(fit.fitted.compute_efficiency == Approx(truth.compute_efficiency).epsilon(0.05));
    const FitResult three = fit_roofline(setup, runs);  // the per-sequence cost has nowhere to go
    INFO("without it: objective " << three.objective);
    CHECK(three.objective > 10 * fit.objective);
  }
  SECTION("with the memory efficiency held, the two overheads come apart") {
    setup.cost.roofline.memory_efficiency = truth.memory_efficiency;
    FitOptions options;
    options.parameters = {FitParameter::ComputeEfficiency, FitParameter::IterationOverhead,
                          FitParameter::SequenceOverhead};
    const FitResult fit = fit_roofline(setup, runs, options);
    INFO("fitted " << fit.fitted.compute_efficiency << " " << fit.fitted.iteration_overhead_s << " "
                   << fit.fitted.sequence_overhead_s << " objective " << fit.objective);
    CHECK(fit.fitted.sequence_overhead_s == Approx(truth.sequence_overhead_s).epsilon(0.1));
    CHECK(fit.fitted.iteration_overhead_s == Approx(truth.iteration_overhead_s).epsilon(0.1));
    CHECK(fit.fitted.compute_efficiency == Approx(truth.compute_efficiency).epsilon(0.03));
  }
}
