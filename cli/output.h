// What every serving command prints and writes: progress on stderr, the
// table or the JSON summary on stdout, and the output folder.
#pragma once

#include <functional>
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "sim/metrics.h"
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
void emit_results(const boost::program_options::variables_map& vm, const RunRecords& records,
                  const RunSummary& summary, const nlohmann::json& summary_json, const std::string& title,
                  const SpeculativeStats* speculative = nullptr);

bool stderr_is_terminal();

}  // namespace servesim::cli
