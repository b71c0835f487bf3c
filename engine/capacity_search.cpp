#include "engine/capacity_search.h"

#include <sstream>

#include <fmt/format.h>

#include "engine/parallel_for.h"
#include "sim/errors.h"

namespace servesim {

double SearchPoint::rate_per_gpu() const { return capacity ? capacity->max_request_rate / gpus() : 0.0; }

double SearchPoint::output_tokens_per_s_per_gpu() const {
  if (!capacity) return 0.0;
  return capacity->seeds[capacity->median_seed].at_max.summary.output_tokens_per_s / gpus();
}

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

}  // namespace

std::vector<SearchPoint> search_capacity(const SimulationSetup& base, const SearchAxes& axes,
                                         const CapacityOptions& options,
                                         const std::function<void(int, int)>& progress) {
  options.validate();
  check_capacity_setup(base);
  std::vector<SearchPoint> points;
  for (int32_t tp : axes.tensor_parallel_size)
    for (const std::string& q : axes.quantization)
      for (int32_t seqs : axes.max_num_seqs)
        for (int32_t budget : axes.max_num_batched_tokens) {
          SearchPoint p;
          p.tensor_parallel_size = tp;
          p.pipeline_parallel_size = base.parallel.pipeline_parallel_size;
          p.quantization = q;
          p.max_num_seqs = seqs;
          p.max_num_batched_tokens = budget;
          points.push_back(p);
        }
  parallel_for(
      int(points.size()), options.jobs,
      [&](int i) { points[size_t(i)] = evaluate(base, points[size_t(i)], options); }, progress);
  mark_pareto(points);
  return points;
}

void mark_pareto(std::vector<SearchPoint>& points) {
  auto front = [&](auto latency, bool SearchPoint::*flag) {
    for (SearchPoint& p : points) {
      if (!p.capacity) continue;
      const double thr = p.output_tokens_per_s_per_gpu(), lat = latency(p);
      bool dominated = false;
      for (const SearchPoint& q : points) {
        if (&q == &p || !q.capacity) continue;
        const double qt = q.output_tokens_per_s_per_gpu(), ql = latency(q);
        if (qt >= thr && ql <= lat && (qt > thr || ql < lat)) {
          dominated = true;
          break;
        }
      }
      p.*flag = !dominated;
    }
  };
  auto at_capacity = [](const SearchPoint& p) -> const RunSummary& {
    return p.capacity->seeds[p.capacity->median_seed].at_max.summary;
  };
  front([&](const SearchPoint& p) { return at_capacity(p).tpot_s.p50; }, &SearchPoint::pareto_tpot);
  front([&](const SearchPoint& p) { return at_capacity(p).ttft_s.p50; }, &SearchPoint::pareto_ttft);
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

void write_search_csv(std::ostream& out, const std::vector<SearchPoint>& points) {
  out << "tensor_parallel_size,pipeline_parallel_size,quantization,max_num_seqs,max_num_batched_tokens,gpus,"
         "max_request_rate,rate_min,rate_max,rate_per_gpu,output_tokens_per_s_per_gpu,ttft_p50_s,ttft_p90_s,"
         "tpot_p50_s,tpot_p90_s,limiting_slo,bound_by,pareto_tpot,pareto_ttft,error\n";
  for (const SearchPoint& p : points) {
    out << fmt::format("{},{},{},{},{},{},", p.tensor_parallel_size, p.pipeline_parallel_size, p.quantization,
                       p.max_num_seqs, p.max_num_batched_tokens, p.gpus());
    if (p.capacity) {
      const CapacityResult& c = *p.capacity;
      const RunSummary& s = c.seeds[c.median_seed].at_max.summary;
      out << fmt::format("{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{},{},{},{},",
                         c.max_request_rate, c.min_rate, c.max_rate, p.rate_per_gpu(),
                         p.output_tokens_per_s_per_gpu(), s.ttft_s.p50, s.ttft_s.p90, s.tpot_s.p50, s.tpot_s.p90,
                         c.limiting_slo, c.bound_by, p.pareto_tpot ? 1 : 0, p.pareto_ttft ? 1 : 0);
    } else {
      out << ",,,,,,,,,,,0,0,";
    }
    out << csv_field(p.error) << "\n";
  }
}

}  // namespace servesim
