#include "engine/capacity_search.h"

#include <sstream>

#include <fmt/format.h>

#include "engine/parallel_for.h"
#include "sim/errors.h"

namespace servesim {

std::vector<int32_t> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> out;
  for (const std::string& item : parse_name_list(text, flag)) {
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 1)
      throw InputError(fmt::format("{}: '{}' is not a positive integer (expected a list such as 1,2,4)", flag, item));
    out.push_back(value);
  }
  return out;
}

std::vector<std::string> parse_name_list(const std::string& text, const std::string& flag) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) throw InputError(fmt::format("{} '{}': an empty item", flag, text));
    out.push_back(item);
  }
  if (out.empty()) throw InputError(fmt::format("{}: expected a comma-separated list", flag));
  return out;
}

std::vector<SearchPoint> search_grid(const SimulationSetup& base, const SearchAxes& axes) {
  std::vector<SearchPoint> points;
  for (int32_t tp : axes.tensor_parallel_size)
    for (const std::string& q : axes.quantization)
      for (int32_t seqs : axes.max_num_seqs)
        for (int32_t budget : axes.max_num_batched_tokens) {
          SearchPoint p;
          p.tensor_parallel_size = tp;
          p.pipeline_parallel_size = base.parallel.pipeline_parallel_size;
          p.replicas = base.num_replicas;
          p.quantization = q;
          p.max_num_seqs = seqs;
          p.max_num_batched_tokens = budget;
          points.push_back(p);
        }
  return points;
}

namespace {

SearchPoint evaluate(const SimulationSetup& base, SearchPoint point, const CapacityOptions& options) {
  try {
    SimulationSetup setup = base;
    setup.parallel.tensor_parallel_size = point.tensor_parallel_size;
    setup.model.quantization.weights = parse_weight_quantization(point.quantization);
    setup.scheduler.max_num_seqs = point.max_num_seqs;
    if (point.max_num_batched_tokens > 0) setup.scheduler.max_num_batched_tokens = point.max_num_batched_tokens;
    setup.parallel.validate_for(setup.model);
    point.max_num_batched_tokens = resolve_scheduler_config(setup).max_num_batched_tokens;
    const CostModels costs = setup_cost_models(setup);
    CapacityOptions one = options;
    one.jobs = 1;
    one.progress = {};
    point.capacity = find_capacity(setup, costs, one);
  } catch (const std::exception& e) {
    // One point that cannot run (it does not fit, its SLOs cannot be met, ...)
    // is a row with its reason; the search goes on.
    point.error = e.what();
  }
  return point;
}

const nlohmann::json& at_capacity(const nlohmann::json& row) { return row["capacity"]["at_capacity"]; }

}  // namespace

nlohmann::json search_row(size_t index, const SearchPoint& p, const CapacityOptions& options) {
  nlohmann::json row = {{"index", index},
                        {"tensor_parallel_size", p.tensor_parallel_size},
                        {"pipeline_parallel_size", p.pipeline_parallel_size},
                        {"quantization", p.quantization},
                        {"max_num_seqs", p.max_num_seqs},
                        {"max_num_batched_tokens", p.max_num_batched_tokens},
                        {"gpus", p.gpus()},
                        {"pareto_tpot", false},
                        {"pareto_ttft", false}};
  if (!p.capacity) {
    row["error"] = p.error;
    return row;
  }
  const CapacityResult& c = *p.capacity;
  row["capacity"] = capacity_to_json(c, options);
  row["max_request_rate"] = c.max_request_rate;
  row["rate_per_gpu"] = c.max_request_rate / p.gpus();
  row["output_tokens_per_s_per_gpu"] = c.seeds[c.median_seed].at_max.summary.output_tokens_per_s / p.gpus();
  return row;
}

nlohmann::json search_capacity(const SimulationSetup& base, const SearchAxes& axes, const CapacityOptions& options,
                               const std::function<void(int, int)>& progress,
                               const std::function<bool(size_t)>& include) {
  options.validate();
  check_capacity_setup(base);
  std::vector<SearchPoint> points = search_grid(base, axes);
  std::vector<size_t> chosen;
  for (size_t i = 0; i < points.size(); ++i)
    if (!include || include(i)) chosen.push_back(i);
  parallel_for(
      int(chosen.size()), options.jobs,
      [&](int k) { points[chosen[size_t(k)]] = evaluate(base, points[chosen[size_t(k)]], options); }, progress);
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i : chosen) rows.push_back(search_row(i, points[i], options));
  mark_pareto(rows);
  return rows;
}

void mark_pareto(nlohmann::json& rows) {
  auto front = [&](const char* latency, const char* flag) {
    for (nlohmann::json& p : rows) {
      p[flag] = false;
      if (!p.contains("capacity")) continue;
      const double thr = p["output_tokens_per_s_per_gpu"].get<double>();
      const double lat = at_capacity(p)[latency]["p50"].get<double>();
      bool dominated = false;
      for (const nlohmann::json& q : rows) {
        if (&q == &p || !q.contains("capacity")) continue;
        const double qt = q["output_tokens_per_s_per_gpu"].get<double>();
        const double ql = at_capacity(q)[latency]["p50"].get<double>();
        if (qt >= thr && ql <= lat && (qt > thr || ql < lat)) {
          dominated = true;
          break;
        }
      }
      p[flag] = !dominated;
    }
  };
  front("tpot_s", "pareto_tpot");
  front("ttft_s", "pareto_ttft");
}

namespace {

// A CSV field: quoted, with quotes doubled, when it holds a comma, a quote or a newline.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

void write_search_csv(std::ostream& out, const nlohmann::json& rows) {
  out << "tensor_parallel_size,pipeline_parallel_size,quantization,max_num_seqs,max_num_batched_tokens,gpus,"
         "max_request_rate,rate_min,rate_max,rate_per_gpu,output_tokens_per_s_per_gpu,ttft_p50_s,ttft_p90_s,"
         "tpot_p50_s,tpot_p90_s,limiting_slo,bound_by,pareto_tpot,pareto_ttft,error\n";
  for (const nlohmann::json& r : rows) {
    out << fmt::format("{},{},{},{},{},{},", r["tensor_parallel_size"].get<int>(),
                       r["pipeline_parallel_size"].get<int>(), r["quantization"].get<std::string>(),
                       r["max_num_seqs"].get<int>(), r["max_num_batched_tokens"].get<int>(), r["gpus"].get<int>());
    if (r.contains("capacity")) {
      const nlohmann::json& c = r["capacity"];
      const nlohmann::json& at = c["at_capacity"];
      auto num = [](const nlohmann::json& v) { return v.get<double>(); };
      out << fmt::format("{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{},{},{},{},",
                         num(c["max_request_rate"]), num(c["spread"]["min"]), num(c["spread"]["max"]),
                         num(r["rate_per_gpu"]), num(r["output_tokens_per_s_per_gpu"]), num(at["ttft_s"]["p50"]),
                         num(at["ttft_s"]["p90"]), num(at["tpot_s"]["p50"]), num(at["tpot_s"]["p90"]),
                         c["limit"]["slo"].get<std::string>(), c["limit"]["bound_by"].get<std::string>(),
                         r["pareto_tpot"].get<bool>() ? 1 : 0, r["pareto_ttft"].get<bool>() ? 1 : 0);
      out << "\n";
    } else {
      out << ",,,,,,,,,,,0,0," << csv_field(r["error"].get<std::string>()) << "\n";
    }
  }
}

}  // namespace servesim
