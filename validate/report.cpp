#include "validate/report.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/report.h"
#include "validate/host_drift/placement.h"

namespace servesim {

namespace {

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json stats_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}};
}

}  // namespace

nlohmann::json distribution_comparison_json(const Distribution& measured, const Distribution& predicted) {
  return {{"measured", stats_json(measured)},
          {"predicted", stats_json(predicted)},
          {"rel_error",
           {{"mean", number(rel_error(predicted.mean, measured.mean))},
            {"p50", number(rel_error(predicted.p50, measured.p50))},
            {"p90", number(rel_error(predicted.p90, measured.p90))},
            {"p99", number(rel_error(predicted.p99, measured.p99))}}}};
}

namespace {

double busy_s(const RunRecords& r) {
  double s = 0;
  for (const IterationRecord& it : r.iterations) s += it.duration_s;
  return s;
}

nlohmann::json run_json(const RunSummary& s, const RunRecords& r) {
  return {{"submitted", s.submitted},
          {"completed", s.completed},
          {"rejected", s.rejected},
          {"output_tokens", s.output_tokens},
          {"duration_s", s.duration_s},
          {"requests_per_s", s.requests_per_s},
          {"output_tokens_per_s", s.output_tokens_per_s},
          {"iterations", s.iterations},
          {"preemptions", s.preemptions},
          {"iteration_time_s", busy_s(r)}};
}

const RunSummary& summary_of(const ValidationResult& v, ValidationMode mode) {
  return mode == ValidationMode::Replay ? v.replay_summary : v.predict_summary;
}
const RunRecords& records_of(const ValidationResult& v, ValidationMode mode) {
  return mode == ValidationMode::Replay ? v.replay : v.predict;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("{}: cannot open for writing", path));
  f << text;
  f.flush();
  if (!f) throw InputError(fmt::format("{}: write failed", path));
}

std::string cell(double v) { return v >= 0 && std::isfinite(v) ? fmt::format("{}", v) : std::string(); }

double ttft_of(const RequestRecord& r) { return r.completed() ? r.first_token_s - r.arrival_s : -1; }
double e2e_of(const RequestRecord& r) { return r.completed() ? r.finish_s - r.arrival_s : -1; }

const RequestRecord* find(const RunRecords& records, int64_t id) {
  return id >= 0 && size_t(id) < records.requests.size() ? &records.requests[size_t(id)] : nullptr;
}

std::string pct(double e) { return std::isfinite(e) ? fmt::format("{:+.1f}%", e * 100) : std::string("-"); }

// The host-drift lines of the stdout table (nothing with --host-drift off).
void host_drift_lines(const nlohmann::json& h, std::string& t) {
  if (h.value("mode", "off") == "off") return;
  const nlohmann::json& probes = h["drift_probes"];
  if (probes.value("measured", false)) {
    for (const auto& [name, p] : probes["profiles"].items()) {
      const double cal = p["calibration"]["decode_iteration_s"].get<double>();
      const double run = p["run"]["decode_iteration_s"].get<double>();
      const double cal_gemm = p["calibration"]["gemm_flops_per_s"].get<double>();
      const double run_gemm = p["run"]["gemm_flops_per_s"].get<double>();
      t += fmt::format("  device state ({}): the decode probe took x{:.3f} its time at calibration, the GEMM probe "
                       "x{:.3f} (drift probes)\n",
                       name, run / cal, cal_gemm / run_gemm);
    }
  } else if (probes.contains("reason")) {
    t += fmt::format("  device state: not probed ({})\n", probes["reason"].get<std::string>());
  }
  const nlohmann::json& placement = h["placement"];
  if (placement.value("watched", false)) {
    const nlohmann::json& r = placement["run"];
    const int64_t n = r["near"].get<int64_t>() + r["far"].get<int64_t>() + r["unknown"].get<int64_t>();
    t += fmt::format("  threads' placement: near before {} of {} iterations, far before {}, unknown {}",
                     r["near"].get<int64_t>(), n, r["far"].get<int64_t>(), r["unknown"].get<int64_t>());
    if (!placement["calibration"].is_null()) {
      const nlohmann::json& c = placement["calibration"];
      t += fmt::format("; calibration probes: {} near, {} far, {} unknown", c["near"].get<int64_t>(),
                       c["far"].get<int64_t>(), c["unknown"].get<int64_t>());
    }
    if (placement.value("costed_in_placement", false)) t += "; each iteration costed in its placement";
    t += "\n";
  }
  const nlohmann::json& refresh = h["refresh"];
  if (refresh.value("refreshed", false)) {
    const nlohmann::json& d = refresh["drift"];
    auto ratio = [](const nlohmann::json& x) { return x.is_number() ? fmt::format("x{:.3f}", x.get<double>()) : "-"; };
    t += fmt::format("  whole-model factors re-timed around the run (decode steps after / before it {}, prefills "
                     "{}); the predictions follow the interleaved timings\n",
                     ratio(d["decode"]), ratio(d["prefill"]));
  }
}

nlohmann::json predicted_config(const ValidationResult& v) {
  nlohmann::json c = v.config;
  c["executor"] = "profile";
  c["clock"] = "virtual";
  c["profile"] = v.profile_source;
  c["cost_model"] = v.cost_model;
  return c;
}

}  // namespace

nlohmann::json validation_report_json(const ValidationResult& v, ValidationMode mode) {
  const RunSummary& m = v.measured.summary;
  const RunSummary& p = summary_of(v, mode);
  nlohmann::json j;
  j["mode"] = to_string(mode);
  j["iteration_mape"] = iteration_mape_json(v.iteration, v.noise_floor);
  j["iteration_breakdown"] = shape_breakdown_json(v.iteration_shapes);
  j["ttft_s"] = distribution_comparison_json(m.ttft_s, p.ttft_s);
  j["tpot_s"] = distribution_comparison_json(m.tpot_s, p.tpot_s);
  j["e2e_s"] = distribution_comparison_json(m.e2e_s, p.e2e_s);
  if (mode == ValidationMode::Predict && v.predict_bands) {
    // The median over the draws is `predicted`; beside it their band and
    // the one simulation without jitter.
    const RunSummary& single = v.predict_single_summary;
    for (auto [name, band, measured, one] :
         {std::tuple{"ttft_s", &v.predict_bands->ttft_s, &m.ttft_s, &single.ttft_s},
          std::tuple{"tpot_s", &v.predict_bands->tpot_s, &m.tpot_s, &single.tpot_s},
          std::tuple{"e2e_s", &v.predict_bands->e2e_s, &m.e2e_s, &single.e2e_s}}) {
      j[name]["draws"] = band_json(*band);
      const nlohmann::json alone = distribution_comparison_json(*measured, *one);
      j[name]["single_simulation"] = {{"predicted", alone["predicted"]}, {"rel_error", alone["rel_error"]}};
    }
    j["predict_draws"] = {{"draws", v.predict_bands->ttft_s.draws}, {"jitter", v.predict_jitter}};
  }
  j["measured"] = run_json(m, v.measured.records);
  j["predicted_run"] = run_json(p, records_of(v, mode));
  j["profile"] = v.profile_source;
  if (v.profile_saved_as) j["profile_saved_as"] = *v.profile_saved_as;
  j["cost_model"] = v.cost_model;
  j["host_drift"] = v.host_drift;
  if (v.measured.speculative) {
    // Replay re-costs the measured acceptance; predict draws its own.
    const SpeculativeStats& ms = *v.measured.speculative;
    const SpeculativeStats* ps = mode == ValidationMode::Predict && v.predict_speculative ? &*v.predict_speculative
                                                                                         : &ms;
    j["speculative"] = {
        {"measured", ms.to_json()},
        {"predicted", ps->to_json()},
        {"predict_acceptance_model", v.predict_acceptance},
        {"rel_error_mean_accepted_tokens_per_step",
         number(rel_error(ps->mean_accepted_tokens_per_step(), ms.mean_accepted_tokens_per_step()))}};
  }
  j["warnings"] = v.warnings;
  j["definitions"] = {
      {"rel_error", "predicted / measured - 1 (positive: the prediction is too slow)"},
      {"iteration_mape",
       "mean over the real run's iterations of |predicted cost - measured time| / measured time; "
       "decode: no prefill sequence, prefill: no decode sequence, mixed: both; null when a class is empty"},
      {"iteration_mape.bias", "mean over the same iterations of predicted / measured - 1"},
      {"iteration_mape.floor",
       "the MAPE with each prediction scaled by the rolling median of measured / predicted over the 51 "
       "iterations around it: what a model that knew the run's level at every moment would have, the "
       "iteration-to-iteration noise no cost model predicts"},
      {"replay",
       "the real run's iterations costed by the profile and re-timed on the replay clock; each request "
       "is timed from its arrival read on that clock"},
      {"predict", "an independent simulation of the same workload and scheduler with the profile"},
      {"predict_draws",
       "with --predict-draws N > 1, predict's statistics are the medians over N simulations, each "
       "iteration's cost times a multiplier drawn from `jitter`; `draws` gives each statistic's 10th and "
       "90th percentile over them, `single_simulation` the one simulation without jitter"},
      {"iteration_breakdown",
       "the per-iteration errors by kind x number of sequences (by_kind_sequences) and x mean context "
       "(by_kind_sequences_context); iteration_breakdown.csv holds the same rows"},
      {"tpot_s", "per request with >= 2 output tokens: (last token - first token) / (tokens - 1)"}};
  j["percentiles"] = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)";
  j["config"] = v.config;
  return j;
}

void write_validation_outputs(const std::string& dir, const ValidationResult& v, ValidationMode mode) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError(fmt::format("--out: cannot create folder '{}': {}", dir, ec.message()));
  const fs::path d(dir);
  write_text((d / "report.json").string(), validation_report_json(v, mode).dump(2) + "\n");
  write_text((d / "report_replay.json").string(), validation_report_json(v, ValidationMode::Replay).dump(2) + "\n");
  write_text((d / "report_predict.json").string(),
             validation_report_json(v, ValidationMode::Predict).dump(2) + "\n");

  std::string t =
      "index,kind,measured_s,predicted_s,rel_error,prefill_tokens,decode_tokens,sequences,core_latency_ns,"
      "placement\n";
  for (size_t k = 0; k < v.iterations.size(); ++k) {
    const RecordedIteration& it = v.iterations[k];
    const double e = rel_error(v.predicted_iteration_s[k], it.measured_s);
    const double ns = k < v.core_latency_ns.size() ? v.core_latency_ns[k] : std::nan("");
    const bool watched = !std::isnan(ns);
    t += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", k, to_string(it.kind()), it.measured_s,
                     v.predicted_iteration_s[k], std::isfinite(e) ? fmt::format("{}", e) : "", it.prefill_tokens,
                     it.decode_tokens, it.sequences.size(), watched ? fmt::format("{:.1f}", ns) : "",
                     watched ? to_string(placement_of(ns)) : "");
  }
  write_text((d / "iterations.csv").string(), t);
  write_text((d / "iteration_breakdown.csv").string(), shape_breakdown_csv(v.iteration_shapes));

  t = "id,prompt_tokens,output_tokens,measured_ttft_s,replay_ttft_s,predict_ttft_s,measured_tpot_s,"
      "replay_tpot_s,predict_tpot_s,measured_e2e_s,replay_e2e_s,predict_e2e_s\n";
  for (const RequestRecord& r : v.measured.records.requests) {
    if (!r.submitted()) continue;
    const RequestRecord* rp = find(v.replay, r.id);
    const RequestRecord* pp = find(v.predict, r.id);
    auto of = [](const RequestRecord* x, double (*f)(const RequestRecord&)) { return x ? f(*x) : -1.0; };
    t += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", r.id, r.prompt_tokens, r.output_tokens,
                     cell(ttft_of(r)), cell(of(rp, ttft_of)), cell(of(pp, ttft_of)), cell(request_tpot_s(r)),
                     cell(of(rp, request_tpot_s)), cell(of(pp, request_tpot_s)), cell(e2e_of(r)),
                     cell(of(rp, e2e_of)), cell(of(pp, e2e_of)));
  }
  write_text((d / "requests.csv").string(), t);

  SloTargets no_slo;  // goodput is not part of the comparison
  nlohmann::json measured = summary_to_json(v.measured.summary, no_slo, v.config);
  nlohmann::json replayed = summary_to_json(v.replay_summary, no_slo, predicted_config(v));
  // predicted/ is the one simulation without jitter, its requests.csv and
  // its summary alike (with --predict-draws N > 1 report.json holds the
  // medians over the draws).
  nlohmann::json predicted = summary_to_json(v.predict_single_summary, no_slo, predicted_config(v));
  if (v.measured.speculative) {
    measured["speculative"] = replayed["speculative"] = v.measured.speculative->to_json();
    if (v.predict_speculative) predicted["speculative"] = v.predict_speculative->to_json();
  }
  write_run_outputs((d / "measured").string(), v.measured.records, measured);
  write_run_outputs((d / "replayed").string(), v.replay, replayed);
  write_run_outputs((d / "predicted").string(), v.predict, predicted);
  if (v.measured.speculative)
    v.measured.speculative->write_requests_csv((d / "measured" / "speculative_requests.csv").string());
}

std::string format_validation_table(const ValidationResult& v, ValidationMode mode, const std::string& title) {
  std::string t = title + "\n";
  const RunSummary& m = v.measured.summary;
  t += fmt::format("  measured   {} of {} requests completed in {:.3f} s, {} iterations, {:.1f} output tok/s\n",
                   m.completed, m.submitted, m.duration_s, m.iterations, m.output_tokens_per_s);
  t += "  iteration time: predicted cost of each measured iteration, MAPE (bias)\n";
  t += format_iteration_errors(v.iteration, v.noise_floor);
  t += format_shape_breakdown(v.iteration_shapes);

  const RunSummary& p = summary_of(v, mode);
  t += fmt::format("  per request, {} mode (ms; error = predicted / measured - 1)\n", to_string(mode));
  t += fmt::format("    {:<15} {:>10} {:>10} {:>10} {:>10}\n", "", "mean", "p50", "p90", "p99");
  auto block = [&](const char* name, const Distribution& a, const Distribution& b) {
    auto ms = [](double s) { return fmt::format("{:.2f}", s * 1e3); };
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", name, "measured", ms(a.mean), ms(a.p50),
                     ms(a.p90), ms(a.p99));
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", "", "predicted", ms(b.mean), ms(b.p50),
                     ms(b.p90), ms(b.p99));
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", "", "error", pct(rel_error(b.mean, a.mean)),
                     pct(rel_error(b.p50, a.p50)), pct(rel_error(b.p90, a.p90)), pct(rel_error(b.p99, a.p99)));
  };
  block("TTFT", m.ttft_s, p.ttft_s);
  block("TPOT", m.tpot_s, p.tpot_s);
  block("E2E", m.e2e_s, p.e2e_s);
  if (v.predict_bands)
    t += fmt::format("  predict: medians over {} jittered simulations; {}\n", v.predict_bands->ttft_s.draws,
                     band_line(*v.predict_bands));

  const ValidationMode other = mode == ValidationMode::Replay ? ValidationMode::Predict : ValidationMode::Replay;
  const RunSummary& o = summary_of(v, other);
  t += fmt::format("  {} mode: mean error TTFT {}, TPOT {}, E2E {}; P90 TTFT {}, TPOT {}\n", to_string(other),
                   pct(rel_error(o.ttft_s.mean, m.ttft_s.mean)), pct(rel_error(o.tpot_s.mean, m.tpot_s.mean)),
                   pct(rel_error(o.e2e_s.mean, m.e2e_s.mean)), pct(rel_error(o.ttft_s.p90, m.ttft_s.p90)),
                   pct(rel_error(o.tpot_s.p90, m.tpot_s.p90)));
  if (v.measured.speculative) {
    const SpeculativeStats& ms = *v.measured.speculative;
    t += fmt::format("  speculation: measured {:.3f} tokens per step ({} steps, draft acceptance {:.3f})",
                     ms.mean_accepted_tokens_per_step(), ms.steps(), ms.draft_acceptance_rate());
    if (v.predict_speculative)
      t += fmt::format("; predict drew {:.3f}", v.predict_speculative->mean_accepted_tokens_per_step());
    t += "\n";
  }
  host_drift_lines(v.host_drift, t);
  for (const std::string& w : v.warnings) t += "  note: " + w + "\n";
  return t;
}

}  // namespace servesim
