#include "validate/server_steps.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "sim/errors.h"
#include "validate/iteration_errors.h"

namespace servesim {
namespace {

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

double count_field(const nlohmann::json& j, const char* field, const std::string& where) {
  if (!j.contains(field) || !j[field].is_number() || !std::isfinite(j[field].get<double>()) ||
      j[field].get<double>() < 0)
    throw InputError(fmt::format("{}: server_metrics.iteration_tokens.{} must be a finite number >= 0", where, field));
  return j[field].get<double>();
}

nlohmann::json pair_json(double measured, double predicted) {
  return {{"measured", number(measured)},
          {"predicted", number(predicted)},
          {"rel_error", number(rel_error(predicted, measured))}};
}

}  // namespace

std::optional<ServerStepsComparison> compare_server_steps(const nlohmann::json& server_metrics,
                                                          const RunRecords& predicted, int64_t predicted_preemptions,
                                                          const std::string& where) {
  if (server_metrics.is_null()) return std::nullopt;
  if (!server_metrics.is_object()) throw InputError(fmt::format("{}: server_metrics must be an object or null", where));
  if (!server_metrics.contains("iteration_tokens") || server_metrics["iteration_tokens"].is_null()) return std::nullopt;
  const nlohmann::json& it = server_metrics["iteration_tokens"];
  if (!it.is_object()) throw InputError(fmt::format("{}: server_metrics.iteration_tokens must be an object", where));
  ServerStepsComparison c;
  c.measured_steps = count_field(it, "steps", where);
  c.measured_tokens = count_field(it, "tokens", where);
  if (!it.contains("buckets") || !it["buckets"].is_array())
    throw InputError(fmt::format("{}: server_metrics.iteration_tokens.buckets must be an array", where));
  double last_le = -1, last_count = 0;
  for (const nlohmann::json& b : it["buckets"]) {
    const bool inf = b.is_object() && b.contains("le") && b["le"] == "+Inf";
    if (!b.is_object() || !b.contains("le") || (!inf && !b["le"].is_number()) || !b.contains("count") ||
        !b["count"].is_number())
      throw InputError(fmt::format("{}: each of server_metrics.iteration_tokens.buckets must be {{le, count}}", where));
    const double le = inf ? std::numeric_limits<double>::infinity() : b["le"].get<double>();
    const double count = b["count"].get<double>();
    if (!(le > last_le) || !std::isfinite(count) || count < last_count || count > c.measured_steps)
      throw InputError(fmt::format("{}: server_metrics.iteration_tokens.buckets must ascend in le, with cumulative "
                                   "counts from 0 to steps",
                                   where));
    last_le = le;
    last_count = count;
    c.cdf.push_back({le, c.measured_steps > 0 ? count / c.measured_steps : 0.0, 0.0});
  }
  // The prediction's steps counted as vLLM counts them: those that emitted
  // a token, each with its emitted tokens and the prompts of the requests
  // whose first token it emitted.
  for (const IterationRecord& r : predicted.iterations) {
    if (r.emitted_tokens <= 0) continue;
    const double tokens = double(r.first_token_prompt_tokens) + r.emitted_tokens;
    c.predicted_steps += 1;
    c.predicted_tokens += tokens;
    for (ServerStepsComparison::Bound& b : c.cdf)
      if (tokens <= b.le) b.predicted += 1;
  }
  for (ServerStepsComparison::Bound& b : c.cdf)
    b.predicted = c.predicted_steps > 0 ? b.predicted / c.predicted_steps : 0.0;
  if (!c.cdf.empty() && (!std::isinf(c.cdf.back().le) || last_count != c.measured_steps))
    throw InputError(fmt::format("{}: server_metrics.iteration_tokens.buckets must end with le \"+Inf\" at steps",
                                 where));
  if (server_metrics.contains("counters")) {
    const nlohmann::json& counters = server_metrics["counters"];
    if (!counters.is_object()) throw InputError(fmt::format("{}: server_metrics.counters must be an object", where));
    if (counters.contains("vllm:num_preemptions_total")) {
      const nlohmann::json& n = counters["vllm:num_preemptions_total"];
      if (!n.is_number() || !std::isfinite(n.get<double>()) || n.get<double>() < 0)
        throw InputError(
            fmt::format("{}: server_metrics.counters[\"vllm:num_preemptions_total\"] must be a number >= 0", where));
      c.measured_preemptions = n.get<double>();
    }
  }
  c.predicted_preemptions = double(predicted_preemptions);
  return c;
}

nlohmann::json server_steps_json(const ServerStepsComparison& c) {
  nlohmann::json cdf = nlohmann::json::array();
  for (const ServerStepsComparison::Bound& b : c.cdf)
    cdf.push_back({{"le", std::isinf(b.le) ? nlohmann::json("+Inf") : nlohmann::json(b.le)},
                   {"measured", b.measured},
                   {"predicted", b.predicted}});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {{"steps", pair_json(c.measured_steps, c.predicted_steps)},
          {"tokens_per_step_mean",
           pair_json(c.measured_steps > 0 ? c.measured_tokens / c.measured_steps : nan,
                     c.predicted_steps > 0 ? c.predicted_tokens / c.predicted_steps : nan)},
          {"preemptions", c.measured_preemptions ? pair_json(*c.measured_preemptions, c.predicted_preemptions)
                                                 : nlohmann::json(nullptr)},
          {"tokens_per_step_cdf", cdf},
          {"meaning",
           "the server's engine steps during the run (its vllm:iteration_tokens_total histogram's change, scraped by "
           "bench) beside the prediction's iterations: their number, their mean tokens, and the fraction of steps "
           "with at most le tokens"}};
}

std::string format_server_steps(const ServerStepsComparison& c) {
  const double m_mean = c.measured_steps > 0 ? c.measured_tokens / c.measured_steps : 0;
  const double p_mean = c.predicted_steps > 0 ? c.predicted_tokens / c.predicted_steps : 0;
  std::string t = "  server steps (its vllm:iteration_tokens_total; error = predicted / measured - 1)\n";
  t += fmt::format("    steps {:.0f} measured, {:.0f} predicted ({}); tokens per step {:.1f} measured, {:.1f} "
                   "predicted ({})\n",
                   c.measured_steps, c.predicted_steps,
                   format_rel_error(rel_error(c.predicted_steps, c.measured_steps)), m_mean, p_mean,
                   format_rel_error(rel_error(p_mean, m_mean)));
  if (c.measured_preemptions)
    t += fmt::format("    preemptions {:.0f} measured, {:.0f} predicted\n", *c.measured_preemptions,
                     c.predicted_preemptions);
  t += "    steps with at most N tokens:";
  for (const ServerStepsComparison::Bound& b : c.cdf) {
    if (std::isinf(b.le)) continue;
    if (b.measured >= 0.999 && b.predicted >= 0.999) break;
    t += fmt::format(" {:g}: {:.0f}%/{:.0f}%", b.le, b.measured * 100, b.predicted * 100);
  }
  return t + " (measured/predicted)\n";
}

}  // namespace servesim
