// What a validation reports: report.json (and report_replay.json,
// report_predict.json), the CSVs, the measured/replayed/predicted run
// outputs, and the table on stdout. docs/outputs.md gives every field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "validate/validation.h"

namespace servesim {

// report.json for one mode:
//   mode, iteration_mape {all, decode, prefill, mixed, counts {...}, bias {...}, floor},
//   iteration_breakdown {by_kind_sequences, by_kind_sequences_context} (shape_breakdown.h),
//   ttft_s / tpot_s / e2e_s {measured, predicted {count, mean, p50, p90, p99},
//                            rel_error {mean, p50, p90, p99}},
//   measured / predicted_run {completed, duration_s, requests_per_s, output_tokens_per_s, ...},
//   profile, [profile_saved_as], cost_model, host_drift, [speculative], warnings,
//   definitions, percentiles, config.
// {"measured": {count, mean, p50, p90, p99}, "predicted": {...}, "rel_error":
// {mean, p50, p90, p99}} with rel_error = predicted / measured - 1 (null
// where undefined): how report.json compares one latency metric.
nlohmann::json distribution_comparison_json(const Distribution& measured, const Distribution& predicted);

nlohmann::json validation_report_json(const ValidationResult& result, ValidationMode mode);

// Writes into `dir`: report.json (for `mode`), report_replay.json,
// report_predict.json, iterations.csv, iteration_breakdown.csv, requests.csv, and the run outputs of
// measured/, replayed/ and predicted/ (summary.json, requests.csv,
// iterations.csv). Throws InputError if the folder cannot be written.
void write_validation_outputs(const std::string& dir, const ValidationResult& result, ValidationMode mode);

// The stdout table: iteration MAPE per class, then TTFT/TPOT/E2E measured
// against predicted for `mode`, and a one-line summary of the other mode.
std::string format_validation_table(const ValidationResult& result, ValidationMode mode, const std::string& title);

}  // namespace servesim
