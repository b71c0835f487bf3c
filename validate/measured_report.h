// `validate --measured`: a prediction of a measured run of any engine
// (validate/measured_run.h), simulated at the measured requests' lengths and
// arrival times with the prediction flags' setup, and its errors reported as
// `validate` reports them (validate/report.h): TTFT, TPOT, ITL and E2E,
// measured against predicted, mean and P50/P90/P99, relative error.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/simulation.h"
#include "validate/iteration_log.h"
#include "validate/measured_run.h"
#include "validate/server_steps.h"

namespace servesim {

struct MeasuredPrediction {
  MeasuredRun measured;
  SimulationOutput predicted;  // request i is measured.requests[i]
  nlohmann::json config;       // setup_to_json of the prediction
  nlohmann::json cost_model;   // CostModels::describe()
  // With the server's iteration log: each logged iteration beside its cost.
  std::optional<LoggedIterationCheck> server_iterations;
  // Where the measured run kept the server's own step histogram.
  std::optional<ServerStepsComparison> server_steps;
};

// Simulates `run`'s requests (measured_workload) with `setup` and `costs`
// (built for it, as `simulate` builds them); setup.workload is not used.
SimulationOutput predict_measured_run(const SimulationSetup& setup, const CostModels& costs, const MeasuredRun& run,
                                      LoopOptions loop = {});

// report.json: mode "measured", measured {source, format, arrivals, notes,
// submitted, completed, duration_s, ...}, ttft_s / tpot_s / itl_s / e2e_s
// {measured, predicted {count, mean, p50, p90, p99}, rel_error {mean, p50,
// p90, p99}} (itl_s null when the measured file keeps no ITL), predicted_run,
// server_iterations (null without an iteration log), server_steps (null
// without the server's step histogram), cost_model,
// definitions, percentiles, config.
nlohmann::json measured_report_json(const MeasuredPrediction& p);

// Writes report.json, requests.csv (each measured request beside its
// prediction) and predicted/ (summary.json, requests.csv, iterations.csv);
// with an iteration log also iterations.csv (each logged iteration, measured
// and predicted), iteration_breakdown.csv and server_requests.csv (each
// logged request's TPOT on the server's steps, measured and replayed).
void write_measured_outputs(const std::string& dir, const MeasuredPrediction& p, const nlohmann::json& predicted_summary);

// The stdout table.
std::string format_measured_table(const MeasuredPrediction& p, const std::string& title);

}  // namespace servesim
