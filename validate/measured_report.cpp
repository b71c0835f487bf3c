#include "validate/measured_report.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/report.h"
#include "validate/iteration_errors.h"
#include "validate/report.h"

namespace servesim {
namespace {

std::string pct(double e) { return std::isfinite(e) ? fmt::format("{:+.1f}%", e * 100) : std::string("-"); }
std::string cell(double v) { return v >= 0 && std::isfinite(v) ? fmt::format("{}", v) : std::string(); }

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("{}: cannot open for writing", path));
  f << text;
  f.flush();
  if (!f) throw InputError(fmt::format("{}: write failed", path));
}

int64_t output_tokens(const MeasuredRun& run) {
  int64_t n = 0;
  for (const MeasuredRequest& r : run.requests)
    if (r.completed) n += r.output_tokens;
  return n;
}

bool has_itl(const MeasuredRun& run) { return run.itl().count > 0 || run.itl_summary.has_value(); }

}  // namespace

SimulationOutput predict_measured_run(const SimulationSetup& setup, const CostModels& costs, const MeasuredRun& run,
                                      LoopOptions loop) {
  SimulationSetup s = setup;
  // The measured requests' own arrivals, lengths and (for assumed arrivals)
  // seed: nothing is drawn from the workload flags.
  return simulate_workload(s, measured_workload(run), costs, std::move(loop));
}

nlohmann::json measured_report_json(const MeasuredPrediction& p) {
  const MeasuredRun& m = p.measured;
  const RunSummary& s = p.predicted.summary;
  nlohmann::json j;
  j["mode"] = "measured";
  const double duration = m.duration_s();
  j["measured"] = {{"source", m.source},
                   {"format", m.format},
                   {"arrivals", {{"assumed", m.arrivals_assumed}, {"note", m.arrivals_note}}},
                   {"notes", m.notes},
                   {"submitted", int64_t(m.requests.size())},
                   {"completed", m.completed()},
                   {"failed_not_simulated", m.dropped_failed},
                   {"output_tokens", output_tokens(m)},
                   {"duration_s", duration},
                   {"requests_per_s", duration > 0 ? double(m.completed()) / duration : 0.0},
                   {"output_tokens_per_s", duration > 0 ? double(output_tokens(m)) / duration : 0.0}};
  j["ttft_s"] = distribution_comparison_json(m.ttft(), s.ttft_s);
  j["tpot_s"] = distribution_comparison_json(m.tpot(), s.tpot_s);
  j["itl_s"] = has_itl(m) ? distribution_comparison_json(m.itl(), s.itl_s) : nlohmann::json(nullptr);
  j["e2e_s"] = distribution_comparison_json(m.e2e(), s.e2e_s);
  j["predicted_run"] = {{"submitted", s.submitted},
                        {"completed", s.completed},
                        {"rejected", s.rejected},
                        {"output_tokens", s.output_tokens},
                        {"duration_s", s.duration_s},
                        {"requests_per_s", s.requests_per_s},
                        {"output_tokens_per_s", s.output_tokens_per_s},
                        {"iterations", s.iterations},
                        {"preemptions", s.preemptions},
                        {"mean_batch_sequences", s.mean_batch_sequences}};
  j["server_iterations"] =
      p.server_iterations ? logged_iteration_check_json(*p.server_iterations) : nlohmann::json(nullptr);
  j["server_steps"] = p.server_steps ? server_steps_json(*p.server_steps) : nlohmann::json(nullptr);
  j["cost_model"] = p.cost_model;
  j["definitions"] = {
      {"rel_error", "predicted / measured - 1 (positive: the prediction is too slow)"},
      {"measured",
       "the measured run's requests; a vLLM JSON's TTFT is its ttfts, E2E its TTFT plus its itls' sum and TPOT "
       "that sum over output tokens - 1 (vLLM's own definitions); a servesim folder's are its requests.csv's"},
      {"predicted",
       "a simulation of the same requests (prompt and output lengths) at the same arrival times (or, where "
       "measured.arrivals.assumed, the arrivals measured.arrivals.note gives) with the prediction flags"},
      {"itl_s", "every gap between streamed chunks (vLLM's itls) or emissions; a servesim folder's from its "
                "summary.json; null when the measured run keeps none"},
      {"tpot_s", "per request with >= 2 output tokens: (last token - first token) / (tokens - 1)"},
      {"server_iterations",
       "each iteration of the server's --iteration-log costed by the prediction's cost model; the errors are "
       "predicted / measured - 1 as in validate's iteration_mape, the floor the log's own noise; tpot_s: the "
       "logged requests' TPOT on the server's steps (measured) and with each step at its predicted cost, the "
       "gaps between steps kept (predicted): the cost model's error without the schedule's"}};
  j["percentiles"] = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)";
  j["config"] = p.config;
  return j;
}

void write_measured_outputs(const std::string& dir, const MeasuredPrediction& p, const nlohmann::json& predicted_summary) {
  namespace fs = std::filesystem;
  create_output_folder(dir);
  const fs::path d(dir);
  write_text((d / "report.json").string(), measured_report_json(p).dump(2) + "\n");
  std::string t =
      "id,arrival_s,prompt_tokens,output_tokens,measured_ttft_s,predicted_ttft_s,measured_tpot_s,predicted_tpot_s,"
      "measured_e2e_s,predicted_e2e_s\n";
  const std::vector<RequestRecord>& predicted = p.predicted.records.requests;
  for (size_t i = 0; i < p.measured.requests.size(); ++i) {
    const MeasuredRequest& r = p.measured.requests[i];
    const RequestRecord* q = i < predicted.size() ? &predicted[i] : nullptr;
    const bool done = q && q->completed();
    t += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", r.id, r.arrival_s, r.prompt_tokens, r.output_tokens,
                     cell(r.completed ? r.ttft_s : -1), cell(done ? q->first_token_s - q->arrival_s : -1),
                     cell(r.completed ? r.tpot_s : -1), cell(q ? request_tpot_s(*q) : -1),
                     cell(r.completed ? r.e2e_s : -1), cell(done ? q->finish_s - q->arrival_s : -1));
  }
  write_text((d / "requests.csv").string(), t);
  write_run_outputs((d / "predicted").string(), p.predicted.records, predicted_summary);
  if (p.server_iterations) {
    write_text((d / "iterations.csv").string(), logged_iterations_csv(*p.server_iterations));
    write_text((d / "iteration_breakdown.csv").string(), shape_breakdown_csv(p.server_iterations->shapes));
    write_text((d / "server_requests.csv").string(), logged_requests_csv(*p.server_iterations));
  }
}

std::string format_measured_table(const MeasuredPrediction& p, const std::string& title) {
  const MeasuredRun& m = p.measured;
  const RunSummary& s = p.predicted.summary;
  std::string t = title + "\n";
  t += fmt::format("  measured   {} ({}): {} of {} requests completed in {:.3f} s\n", m.source, m.format,
                   m.completed(), m.requests.size(), m.duration_s());
  t += fmt::format("  predicted  {} of {} requests completed in {:.3f} s, {} iterations, mean batch {:.1f}\n",
                   s.completed, s.submitted, s.duration_s, s.iterations, s.mean_batch_sequences);
  if (m.arrivals_assumed) t += "  note: " + m.arrivals_note + "\n";
  for (const std::string& n : m.notes) t += "  note: " + n + "\n";
  t += "  per request (ms; error = predicted / measured - 1)\n";
  t += fmt::format("    {:<15} {:>10} {:>10} {:>10} {:>10}\n", "", "mean", "p50", "p90", "p99");
  auto block = [&](const char* name, const Distribution& a, const Distribution& b) {
    auto ms = [](double x) { return fmt::format("{:.2f}", x * 1e3); };
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", name, "measured", ms(a.mean), ms(a.p50),
                     ms(a.p90), ms(a.p99));
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", "", "predicted", ms(b.mean), ms(b.p50),
                     ms(b.p90), ms(b.p99));
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", "", "error", pct(rel_error(b.mean, a.mean)),
                     pct(rel_error(b.p50, a.p50)), pct(rel_error(b.p90, a.p90)), pct(rel_error(b.p99, a.p99)));
  };
  block("TTFT", m.ttft(), s.ttft_s);
  block("TPOT", m.tpot(), s.tpot_s);
  if (has_itl(m)) block("ITL", m.itl(), s.itl_s);
  block("E2E", m.e2e(), s.e2e_s);
  if (p.server_steps) t += format_server_steps(*p.server_steps);
  if (p.server_iterations) t += format_logged_iteration_check(*p.server_iterations);
  return t;
}

}  // namespace servesim
