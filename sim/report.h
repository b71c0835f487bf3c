// A run's outputs: summary.json, requests.csv, iterations.csv and the short
// table printed on stdout.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/metrics.h"

namespace servesim {

// The summary with `config` (every setting, the seed included) embedded.
nlohmann::json summary_to_json(const RunSummary& summary, const SloTargets& slo,
                               const nlohmann::json& config);

// Writes the three files into `dir` (created if missing), iterations.csv
// only when `with_iterations` (false: an IterationsCsvWriter streamed it
// during the run). Throws InputError if the folder cannot be created or
// written.
void write_run_outputs(const std::string& dir, const RunRecords& records, const nlohmann::json& summary_json,
                       bool with_iterations = true);
// Creates `dir` if missing (InputError naming --out when it cannot).
void create_output_folder(const std::string& dir);

void write_requests_csv(const std::string& path, const RunRecords& records);
void write_iterations_csv(const std::string& path, const RunRecords& records);

// iterations.csv written row by row as a run goes (a run of ten million
// requests has a hundred million iterations, too many to keep): the same
// bytes write_iterations_csv writes from kept records, given the records in
// their order. The file is removed unless finish() is called (a failed run
// leaves no partial file).
class IterationsCsvWriter {
 public:
  // `with_replica`: the replica column (a run of several replicas).
  IterationsCsvWriter(const std::string& path, bool with_replica);
  ~IterationsCsvWriter();
  IterationsCsvWriter(const IterationsCsvWriter&) = delete;
  IterationsCsvWriter& operator=(const IterationsCsvWriter&) = delete;
  void add(const IterationRecord& record);
  void finish();  // flushes and closes; InputError when the write failed

 private:
  struct File;
  std::unique_ptr<File> file_;
  bool with_replica_;
};

// The human table: counts, throughput and latency percentiles in ms.
std::string format_summary_table(const RunSummary& summary, const std::string& title);

}  // namespace servesim
