// `servesim fit`: the roofline's efficiencies and per-iteration overhead
// (sim/cost/roofline_model.h RooflineOptions) fitted to measured runs of an
// engine whose kernels servesim cannot time.
//
// Objective: the mean, over the fitted runs and over the terms {mean, P50,
// P90} x {TTFT, TPOT}, of (predicted / measured - 1)^2, each candidate's prediction
// a simulation of the run's measured requests at their arrival times
// (validate/measured_report.h predict_measured_run). A light-load run's TPOT
// pins the decode cost (memory-bound: memory efficiency and overhead), its
// TTFT the prefill cost (compute efficiency); runs at more loads (batch
// sizes) separate the memory efficiency from the overhead. The means are
// smooth in the parameters where a percentile follows one request's value,
// kinked where the request it falls on changes: they keep the search from
// stalling on a kink.
//
// Search (each point's parameters as logarithms, kept in bounds: efficiencies
// in [0.01, 1], overhead in [1 us, 100 ms], per-sequence overhead in [0.1 us,
// 100 ms]): the overhead trades against the memory efficiency along a long
// valley whose floor is rugged (a small change of the costs moves iteration
// boundaries past arrivals and flips scheduling decisions), where one simplex
// over every parameter stalls. So, when the overhead is fitted, it is searched
// alone -- a log grid of 12 points from 10 us to 20 ms, then golden section in
// the best point's bracket -- each point with the other parameters that fit it
// best (Nelder-Mead, Nelder & Mead 1965, coefficients 1, 2, 1/2, 1/2,
// warm-started); then, when named, the per-sequence overhead the same way (its
// grid from 1 us). Then a Nelder-Mead over every fitted parameter polishes the
// best point, restarted with small steps while that improves it. A descent
// stops when its simplex's objective values agree within 1e-10 and its points
// within 1e-5 in log, or at its budget; the whole search after max_evaluations.
// The result is the best point evaluated.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/simulation.h"
#include "validate/measured_run.h"

namespace servesim {

// SequenceOverhead is fitted only when named (not in the default set); it is
// searched with the efficiencies, in [0.1 us, 100 ms].
enum class FitParameter { ComputeEfficiency, MemoryEfficiency, IterationOverhead, SequenceOverhead };
// "compute-efficiency", "memory-efficiency", "iteration-overhead", "sequence-overhead"
// (InputError otherwise).
FitParameter parse_fit_parameter(const std::string& name);
const char* to_string(FitParameter p);

struct FitOptions {
  std::vector<FitParameter> parameters = {FitParameter::ComputeEfficiency, FitParameter::MemoryEfficiency,
                                          FitParameter::IterationOverhead};
  int max_evaluations = 3000;
  // Each evaluation's (evaluations so far, objective, the candidate).
  std::function<void(int, double, const RooflineOptions&)> progress;
};

// One run's errors under a candidate.
struct FitRunErrors {
  std::string source;
  Distribution measured_ttft, measured_tpot, predicted_ttft, predicted_tpot;
  double objective = 0;  // mean of the squared terms that are defined
  int terms = 0;
};

struct FitResult {
  RooflineOptions start, fitted;
  double start_objective = 0, objective = 0;
  int evaluations = 0;
  std::vector<FitRunErrors> runs;  // under `fitted`
};

// The errors of `roofline` on each run (setup.cost.roofline replaced).
std::vector<FitRunErrors> evaluate_roofline(const SimulationSetup& setup, const RooflineOptions& roofline,
                                            std::span<const MeasuredRun> runs);
// The objective: the mean of the squared terms over every run.
double fit_objective(std::span<const FitRunErrors> errors);

// InputError without runs, with a --profile setup, or without a parameter.
FitResult fit_roofline(const SimulationSetup& setup, std::span<const MeasuredRun> runs, const FitOptions& options = {});

// {source, objective, ttft_s/tpot_s {measured, predicted {p50, p90}, rel_error {p50, p90}}}.
nlohmann::json fit_run_errors_json(const FitRunErrors& e);

}  // namespace servesim
