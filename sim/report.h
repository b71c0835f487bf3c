// A run's outputs: summary.json, requests.csv, iterations.csv and the short
// table printed on stdout.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sim/metrics.h"

namespace servesim {

// The summary with `config` (every setting, the seed included) embedded.
nlohmann::json summary_to_json(const RunSummary& summary, const SloTargets& slo,
                               const nlohmann::json& config);

// Writes the three files into `dir` (created if missing). Throws InputError
// if the folder cannot be created or written.
void write_run_outputs(const std::string& dir, const RunRecords& records,
                       const nlohmann::json& summary_json);

void write_requests_csv(const std::string& path, const RunRecords& records);
void write_iterations_csv(const std::string& path, const RunRecords& records);

// The human table: counts, throughput and latency percentiles in ms.
std::string format_summary_table(const RunSummary& summary, const std::string& title);

}  // namespace servesim
