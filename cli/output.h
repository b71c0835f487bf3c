// What every serving command prints and writes: progress on stderr, the
// table or the JSON summary on stdout, and the output folder.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "sim/metrics.h"
#include "sim/report.h"
#include "engine/serving_loop.h"
#include "sim/speculative_stats.h"

namespace servesim::cli {

// --out, --json, -q.
boost::program_options::options_description output_options();

// Progress reports for a runner: one overwritten line on a terminal, one line
// per report otherwise; nothing with -q.
std::function<void(const RunProgress&)> progress_printer(const std::string& command, bool quiet);

// Writes --out DIR and prints the table (or the JSON with --json). With
// `speculative` (a speculative run), summary.json gains its "speculative"
// object, DIR gets speculative_requests.csv and the table a speculation line.
// With `iterations_streamed`, an IterationsStream already wrote
// iterations.csv there.
void emit_results(const boost::program_options::variables_map& vm, const RunRecords& records,
                  const RunSummary& summary, const nlohmann::json& summary_json, const std::string& title,
                  const SpeculativeStats* speculative = nullptr, bool iterations_streamed = false);

// iterations.csv of --out DIR written as the loop runs, so no iteration is
// kept in memory: attach it to the loop's observers, keep_iterations off,
// then finish() after the run. Only for a loop whose iterations come in
// their final order (not pipeline-parallel engines, whose records are
// merged after their runs).
// A run that fails (finish() never called) leaves nothing behind: neither
// the file nor DIR where the stream created it.
class IterationsStream final : public LoopObserver {
 public:
  IterationsStream(const std::string& out_dir, bool with_replica);  // creates DIR
  ~IterationsStream() override;
  void after_iteration(const IterationPlan&, const IterationResult&, const IterationRecord& record) override {
    writer_->add(record);
  }
  bool needs_plan_items() const override { return false; }
  void finish() {
    writer_->finish();
    finished_ = true;
  }

 private:
  std::string dir_;
  bool created_dir_ = false, finished_ = false;
  std::unique_ptr<IterationsCsvWriter> writer_;
};

bool stderr_is_terminal();

}  // namespace servesim::cli
