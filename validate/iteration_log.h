// A server's iteration log: `servesim serve --iteration-log FILE` writes
// every iteration it executes (its sequences' query and cached tokens, the
// measured seconds) as one JSON line, and `servesim validate --measured RUN
// --iteration-log FILE` costs each logged plan with the prediction's cost
// model. The per-request errors of --measured say that a prediction is off;
// the iterations say whether the cost of a step or the steps themselves
// (what the scheduler ran, and when) are what differ.
// The line format and its reader: validate/iteration_log_format.h.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/serving_loop.h"
#include "sim/cost/cost_models.h"
#include "sim/iteration_plan.h"
#include "sim/stats.h"
#include "validate/iteration_errors.h"
#include "validate/iteration_log_format.h"
#include "validate/record.h"
#include "validate/shape_breakdown.h"

namespace servesim {

// Appends one line per iteration to a file, flushed at each line, so the log
// of a server that is still running, or was killed, can be read up to its
// last step.
class IterationLogWriter {
 public:
  // Throws InputError when `path` cannot be opened for writing; truncates it.
  explicit IterationLogWriter(const std::string& path);
  // A write that fails (a full disk) is said once on stderr; the log is
  // then incomplete, and lines() counts only what was written.
  void write(const IterationPlan& plan, const IterationResult& result, double start_s);
  int64_t lines() const { return lines_; }
  bool failed() const { return failed_; }

 private:
  std::string path_;
  std::ofstream file_;
  int64_t lines_ = 0;
  bool failed_ = false;
};
// The same log from a run of the serving loop (`servesim run
// --iteration-log FILE`): each iteration as it ends, with its start on the
// run's clock. The writer is made by open(), once the decoder has loaded, so
// that a run refused before then leaves an earlier log as it was.
class IterationLogObserver final : public LoopObserver {
 public:
  void open(const std::string& path) { writer_ = std::make_unique<IterationLogWriter>(path); }
  void after_iteration(const IterationPlan& plan, const IterationResult& result,
                       const IterationRecord& record) override {
    if (writer_) writer_->write(plan, result, record.start_s);
  }
  const IterationLogWriter* writer() const { return writer_.get(); }

 private:
  std::unique_ptr<IterationLogWriter> writer_;
};

// Throws InputError when `path` cannot be opened for writing, without
// truncating or otherwise changing a file that is there (it may create an
// empty one): a check before a writer is made.
void check_writable(const std::string& path);

// Every logged iteration beside its predicted cost.
struct LoggedIterationCheck {
  std::string source;
  bool truncated_last_line = false;
  std::vector<RecordedIteration> iterations;
  std::vector<double> starts_s, predicted_s;
  IterationErrors errors;
  ShapeBreakdown shapes;
  double noise_floor = 0;  // iteration_errors.h
  // TPOT of each logged request that emitted >= 2 tokens: measured on the
  // server's clock (end of the step that emitted its first token to the end
  // of the one that emitted its last), and replayed: the same steps, each
  // lasting its predicted cost, the gaps between steps kept. The per-request
  // errors of --measured compare two schedules; this compares costs only.
  Distribution tpot_measured_s, tpot_replayed_s;
  struct RequestTpot {
    int64_t request_id = 0;  // the server's id (its order of arrival)
    int64_t tokens = 0;
    double measured_s = 0, replayed_s = 0;
  };
  std::vector<RequestTpot> requests;  // those behind the two distributions, by id
};
// Costs every logged plan with `costs`' target, or with its draft passes and
// verification where `costs` has a draft (the drafts each step accepted are
// the log's).
LoggedIterationCheck check_iteration_log(IterationLogRead read, const CostModels& costs, int32_t block_size);

// report.json's server_iterations: {source, iterations, truncated_last_line,
// iteration_mape {all, decode, prefill, mixed, counts, bias, floor},
// iteration_breakdown, tpot_s {measured, predicted, rel_error}} (tpot_s's
// predicted is the replayed TPOT).
nlohmann::json logged_iteration_check_json(const LoggedIterationCheck& c);
// iterations.csv: index,kind,start_s,prefill_tokens,decode_tokens,
// prefill_sequences,decode_sequences,mean_context,measured_s,predicted_s
std::string logged_iterations_csv(const LoggedIterationCheck& c);
// server_requests.csv: request_id,tokens,measured_tpot_s,replayed_tpot_s
std::string logged_requests_csv(const LoggedIterationCheck& c);
// The stdout lines: MAPE (bias) by kind, the floor, the shape table.
std::string format_logged_iteration_check(const LoggedIterationCheck& c);

}  // namespace servesim
