#include "validate/iteration_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include <fmt/format.h>

#include "sim/cost/cost_jitter.h"
#include "sim/cost/speculative_cost.h"
#include "sim/errors.h"
#include "validate/report.h"

namespace servesim {
namespace {


// Tokens a logged sequence emitted in its step (-1: one where it samples).
int32_t emitted_by(const RecordedSequence& s) { return s.emitted_tokens >= 0 ? s.emitted_tokens : s.samples ? 1 : 0; }

// See LoggedIterationCheck::tpot_measured_s.
void logged_tpot(LoggedIterationCheck& c) {
  const size_t n = c.iterations.size();
  std::vector<double> measured_end(n), replayed_end(n);
  double replayed_clock = 0;
  for (size_t k = 0; k < n; ++k) {
    const double gap = k == 0 ? c.starts_s[0] : std::max(0.0, c.starts_s[k] - measured_end[k - 1]);
    measured_end[k] = c.starts_s[k] + c.iterations[k].measured_s;
    replayed_clock += gap + c.predicted_s[k];
    replayed_end[k] = replayed_clock;
  }
  struct Emissions {
    size_t first = 0, last = 0;
    int64_t tokens = 0;
  };
  std::unordered_map<int64_t, Emissions> by_request;
  for (size_t k = 0; k < n; ++k)
    for (const RecordedSequence& s : c.iterations[k].sequences) {
      const int32_t emitted = emitted_by(s);
      if (emitted <= 0) continue;
      auto [it, fresh] = by_request.try_emplace(s.request_id);
      if (fresh) it->second.first = k;
      it->second.last = k;
      it->second.tokens += emitted;
    }
  std::vector<double> measured, replayed;
  for (const auto& [id, e] : by_request) {
    if (e.tokens < 2) continue;
    LoggedIterationCheck::RequestTpot& r = c.requests.emplace_back();
    r.request_id = id;
    r.tokens = e.tokens;
    r.measured_s = (measured_end[e.last] - measured_end[e.first]) / double(e.tokens - 1);
    r.replayed_s = (replayed_end[e.last] - replayed_end[e.first]) / double(e.tokens - 1);
    measured.push_back(r.measured_s);
    replayed.push_back(r.replayed_s);
  }
  std::sort(c.requests.begin(), c.requests.end(),
            [](const auto& a, const auto& b) { return a.request_id < b.request_id; });
  c.tpot_measured_s = summarize(measured);
  c.tpot_replayed_s = summarize(replayed);
}

}  // namespace

IterationLogWriter::IterationLogWriter(const std::string& path) : path_(path), file_(path, std::ios::trunc) {
  if (!file_) throw InputError(fmt::format("--iteration-log {}: cannot open for writing", path));
}

void IterationLogWriter::write(const IterationPlan& plan, const IterationResult& result, double start_s) {
  if (plan.sequences.empty() || failed_) return;  // nothing ran (nothing could be scheduled); or a broken log
  file_ << iteration_log_line(lines_, start_s, record_iteration(plan, result)) << '\n';
  file_.flush();
  if (!file_) {
    failed_ = true;
    std::fprintf(stderr, "serve: warning: --iteration-log %s: write failed after %lld lines; no more are written\n",
                 path_.c_str(), static_cast<long long>(lines_));
    return;
  }
  ++lines_;
}

void check_writable(const std::string& path) {
  std::ofstream probe(path, std::ios::app);
  if (!probe) throw InputError(fmt::format("--iteration-log {}: cannot open for writing", path));
}

LoggedIterationCheck check_iteration_log(IterationLogRead read, const CostModels& costs, int32_t block_size) {
  LoggedIterationCheck c;
  c.source = read.log.source;
  c.truncated_last_line = read.truncated_last_line;
  c.iterations = std::move(read.log.iterations);
  c.starts_s = std::move(read.log.starts_s);
  // A speculative server's decodes verify drafts: costed with its draft
  // passes and the drafts each accepted, as validate's replay costs them.
  c.predicted_s = costs.draft ? cost_recorded(c.iterations, SpeculativeCost(*costs.target, *costs.draft), block_size)
                              : cost_recorded(c.iterations, *costs.target, block_size);
  c.errors = iteration_errors(c.iterations, c.predicted_s);
  c.shapes = shape_breakdown(c.iterations, c.predicted_s);
  c.noise_floor = noise_floor(noise_around_rolling_level(measured_times(c.iterations), c.predicted_s));
  logged_tpot(c);
  return c;
}

nlohmann::json logged_iteration_check_json(const LoggedIterationCheck& c) {
  return {{"source", c.source},
          {"iterations", int64_t(c.iterations.size())},
          {"truncated_last_line", c.truncated_last_line},
          {"iteration_mape", iteration_mape_json(c.errors, c.noise_floor)},
          {"iteration_breakdown", shape_breakdown_json(c.shapes)},
          {"tpot_s", distribution_comparison_json(c.tpot_measured_s, c.tpot_replayed_s)}};
}

std::string logged_iterations_csv(const LoggedIterationCheck& c) {
  std::string t =
      "index,kind,start_s,prefill_tokens,decode_tokens,prefill_sequences,decode_sequences,mean_context,measured_s,"
      "predicted_s\n";
  for (size_t k = 0; k < c.iterations.size(); ++k) {
    const RecordedIteration& it = c.iterations[k];
    t += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", k, to_string(it.kind()), c.starts_s[k], it.prefill_tokens,
                     it.decode_tokens, it.prefill_sequences, it.decode_sequences, mean_context(it), it.measured_s,
                     c.predicted_s[k]);
  }
  return t;
}

std::string logged_requests_csv(const LoggedIterationCheck& c) {
  std::string t = "request_id,tokens,measured_tpot_s,replayed_tpot_s\n";
  for (const LoggedIterationCheck::RequestTpot& r : c.requests)
    t += fmt::format("{},{},{},{}\n", r.request_id, r.tokens, r.measured_s, r.replayed_s);
  return t;
}

std::string format_logged_iteration_check(const LoggedIterationCheck& c) {
  std::string t = fmt::format("  server iterations ({}, {} logged): predicted cost of each, MAPE (bias)\n", c.source,
                              c.iterations.size());
  t += format_iteration_errors(c.errors, c.noise_floor);
  const Distribution& m = c.tpot_measured_s;
  const Distribution& r = c.tpot_replayed_s;
  t += fmt::format(
      "    TPOT of its {} requests, the server's steps each at its predicted cost (ms): P50 {:.2f} -> {:.2f} "
      "({}), P90 {:.2f} -> {:.2f} ({})\n",
      m.count, m.p50 * 1e3, r.p50 * 1e3, format_rel_error(rel_error(r.p50, m.p50)), m.p90 * 1e3, r.p90 * 1e3,
      format_rel_error(rel_error(r.p90, m.p90)));
  if (c.truncated_last_line) t += "  note: the log's last line was cut off (the server stopped mid-write): dropped\n";
  return t + format_shape_breakdown(c.shapes);
}

}  // namespace servesim
