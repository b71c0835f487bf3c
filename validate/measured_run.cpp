#include "validate/measured_run.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/errors.h"
#include "sim/random.h"

namespace servesim {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("{}: cannot open", path));
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

Distribution summary_of(std::vector<double> values) { return summarize(values); }

// ------------------------------------------------------------------ CSV

// One CSV line's cells; a quoted cell may hold commas ("" is a quote).
std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else if (c != '\r') {
      cells.back() += c;
    }
  }
  return cells;
}

// A number cell (InputError naming the file, row and column); an empty cell
// is `empty_value` where one is allowed.
double number_cell(const std::string& cell, const std::string& file, int64_t row, const std::string& column,
                   std::optional<double> empty_value = std::nullopt) {
  if (cell.empty()) {
    if (empty_value) return *empty_value;
    throw InputError(fmt::format("{}: row {}: {} is empty", file, row, column));
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(cell, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != cell.size() || !std::isfinite(v))
    throw InputError(fmt::format("{}: row {}: {} '{}' is not a number", file, row, column, cell));
  return v;
}

int32_t token_count(double v, const std::string& file, int64_t row, const std::string& column, int32_t min) {
  if (v != std::floor(v) || v < min || v > double(std::numeric_limits<int32_t>::max()))
    throw InputError(fmt::format("{}: row {}: {} must be an integer >= {} (got {})", file, row, column, min, v));
  return int32_t(v);
}

// ------------------------------------------------------------------ JSON

const nlohmann::json& required_list(const nlohmann::json& j, const char* field, const std::string& file) {
  if (!j.contains(field))
    throw InputError(fmt::format("{}: no '{}': a vLLM `bench serve --save-result` JSON keeps the per-request "
                                 "lists input_lens, output_lens, ttfts and itls",
                                 file, field));
  const nlohmann::json& list = j[field];
  if (!list.is_array()) throw InputError(fmt::format("{}: '{}' is not a list", file, field));
  return list;
}

double json_number(const nlohmann::json& v, const std::string& file, const std::string& where) {
  if (!v.is_number()) throw InputError(fmt::format("{}: {} is not a number", file, where));
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw InputError(fmt::format("{}: {} is not finite", file, where));
  return x;
}

double json_time(const nlohmann::json& v, const std::string& file, const std::string& where) {
  const double x = json_number(v, file, where);
  if (x < 0) throw InputError(fmt::format("{}: {} is negative ({} s)", file, where, x));
  return x;
}

void sort_by_arrival(std::vector<MeasuredRequest>& requests) {
  std::stable_sort(requests.begin(), requests.end(), [](const MeasuredRequest& a, const MeasuredRequest& b) {
    return a.arrival_s < b.arrival_s;
  });
}

}  // namespace

Distribution MeasuredRun::ttft() const {
  std::vector<double> v;
  for (const MeasuredRequest& r : requests)
    if (r.completed && r.ttft_s >= 0) v.push_back(r.ttft_s);
  return summary_of(std::move(v));
}

Distribution MeasuredRun::tpot() const {
  std::vector<double> v;
  for (const MeasuredRequest& r : requests)
    if (r.completed && r.tpot_s >= 0) v.push_back(r.tpot_s);
  return summary_of(std::move(v));
}

Distribution MeasuredRun::e2e() const {
  std::vector<double> v;
  for (const MeasuredRequest& r : requests)
    if (r.completed && r.e2e_s >= 0) v.push_back(r.e2e_s);
  return summary_of(std::move(v));
}

Distribution MeasuredRun::itl() const {
  if (!itl_samples.empty()) return summary_of(itl_samples);
  if (itl_summary) return *itl_summary;
  return {};
}

int64_t MeasuredRun::completed() const {
  return std::count_if(requests.begin(), requests.end(), [](const MeasuredRequest& r) { return r.completed; });
}

double MeasuredRun::duration_s() const {
  double end = 0;
  bool any = false;
  for (const MeasuredRequest& r : requests)
    if (r.completed && r.e2e_s >= 0) {
      end = std::max(end, r.arrival_s + r.e2e_s);
      any = true;
    }
  if (!any || requests.empty()) return 0;
  return end - requests.front().arrival_s;
}

MeasuredRun read_servesim_run_folder(const std::string& folder) {
  const std::string file = (fs::path(folder) / "requests.csv").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open (a run folder holds requests.csv)", file));
  std::string line;
  if (!std::getline(in, line)) throw InputError(fmt::format("{}: empty (no header)", file));
  const std::vector<std::string> header = split_csv_line(line);
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  for (const char* name : {"arrival_s", "prompt_tokens", "output_tokens"})
    if (!column.count(name)) throw InputError(fmt::format("{}: no column '{}'", file, name));
  const bool has_status = column.count("status") > 0;
  for (const char* name : {"ttft_s", "tpot_s", "e2e_s"})
    if (!column.count(name)) throw InputError(fmt::format("{}: no column '{}'", file, name));

  MeasuredRun run;
  run.source = folder;
  run.format = "servesim";
  int64_t row = 0;
  while (std::getline(in, line)) {
    ++row;
    if (line.empty() || line == "\r") continue;
    const std::vector<std::string> cells = split_csv_line(line);
    auto at = [&](const char* name) -> const std::string& {
      const size_t i = column.at(name);
      if (i >= cells.size())
        throw InputError(fmt::format("{}: row {}: {} cells, fewer than the header's {}", file, row, cells.size(),
                                     header.size()));
      return cells[i];
    };
    MeasuredRequest r;
    r.id = column.count("id") ? int64_t(number_cell(at("id"), file, row, "id")) : row - 1;
    r.arrival_s = number_cell(at("arrival_s"), file, row, "arrival_s");
    if (r.arrival_s < 0) throw InputError(fmt::format("{}: row {}: arrival_s is negative ({})", file, row, r.arrival_s));
    r.prompt_tokens = token_count(number_cell(at("prompt_tokens"), file, row, "prompt_tokens"), file, row,
                                  "prompt_tokens", 1);
    r.output_tokens = token_count(number_cell(at("output_tokens"), file, row, "output_tokens"), file, row,
                                  "output_tokens", 1);
    r.ttft_s = number_cell(at("ttft_s"), file, row, "ttft_s", -1.0);
    r.tpot_s = number_cell(at("tpot_s"), file, row, "tpot_s", -1.0);
    r.e2e_s = number_cell(at("e2e_s"), file, row, "e2e_s", -1.0);
    const std::string status = has_status ? at("status") : (r.e2e_s >= 0 ? "completed" : "unfinished");
    r.completed = status == "completed";
    if (r.completed) {
      // An empty cell is written as such; a negative number is not a time.
      for (auto [name, v] : {std::pair{"ttft_s", r.ttft_s}, std::pair{"e2e_s", r.e2e_s}})
        if (v < 0) throw InputError(fmt::format("{}: row {}: a completed request's {} is empty or negative", file, row, name));
      if (!at("tpot_s").empty() && r.tpot_s < 0)
        throw InputError(fmt::format("{}: row {}: tpot_s is negative ({})", file, row, r.tpot_s));
    }
    run.requests.push_back(r);
  }
  if (run.requests.empty()) throw InputError(fmt::format("{}: no requests", file));
  sort_by_arrival(run.requests);
  const double t0 = run.requests.front().arrival_s;
  for (MeasuredRequest& r : run.requests) r.arrival_s -= t0;

  // ITL samples are not per request in requests.csv: summary.json's
  // distribution where the folder has one.
  const std::string summary_path = (fs::path(folder) / "summary.json").string();
  if (fs::exists(summary_path)) {
    nlohmann::json s;
    try {
      s = nlohmann::json::parse(read_text(summary_path));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: not JSON: {}", summary_path, e.what()));
    }
    if (s.contains("itl_s") && s["itl_s"].is_object()) {
      const nlohmann::json& d = s["itl_s"];
      Distribution itl;
      auto get = [&](const char* k) { return d.contains(k) ? json_time(d[k], summary_path, fmt::format("itl_s.{}", k)) : 0.0; };
      itl.count = d.contains("count") && d["count"].is_number_integer() ? d["count"].get<int64_t>() : 0;
      itl.mean = get("mean"), itl.p50 = get("p50"), itl.p90 = get("p90"), itl.p95 = get("p95"), itl.p99 = get("p99");
      itl.min = get("min"), itl.max = get("max");
      run.itl_summary = itl;
    }
    if (s.contains("server_metrics")) {
      run.server_metrics = s["server_metrics"];
      run.server_metrics_source = summary_path;
    }
  } else {
    run.notes.push_back("no summary.json beside requests.csv: no measured ITL");
  }
  return run;
}

MeasuredRun read_vllm_result_json(const std::string& path, const MeasuredReadOptions& options) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("{}: not a JSON object", path));
  const nlohmann::json& input_lens = required_list(j, "input_lens", path);
  const nlohmann::json& output_lens = required_list(j, "output_lens", path);
  const nlohmann::json& ttfts = required_list(j, "ttfts", path);
  const nlohmann::json& itls = required_list(j, "itls", path);
  const size_t n = input_lens.size();
  if (n == 0) throw InputError(fmt::format("{}: input_lens is empty: no requests", path));
  auto same_length = [&](const nlohmann::json& list, const char* field) {
    if (list.size() != n)
      throw InputError(fmt::format("{}: '{}' has {} entries, input_lens {}: the lists must be of equal length", path,
                                   field, list.size(), n));
  };
  same_length(output_lens, "output_lens");
  same_length(ttfts, "ttfts");
  same_length(itls, "itls");
  const nlohmann::json* starts = nullptr;
  if (j.contains("start_times") && !j["start_times"].is_null()) {
    starts = &required_list(j, "start_times", path);
    same_length(*starts, "start_times");
  }
  const nlohmann::json* errors = nullptr;
  if (j.contains("errors") && !j["errors"].is_null()) {
    errors = &required_list(j, "errors", path);
    same_length(*errors, "errors");
  }

  MeasuredRun run;
  run.source = path;
  run.format = "vllm";
  // Arrivals: the saved start times, else drawn as vLLM drew them (gamma
  // gaps of mean 1/request_rate, shape burstiness; request 0 at t = 0).
  std::vector<double> arrival(n, 0.0);
  if (starts) {
    for (size_t i = 0; i < n; ++i) arrival[i] = json_number((*starts)[i], path, fmt::format("start_times[{}]", i));
    const double t0 = *std::min_element(arrival.begin(), arrival.end());
    for (double& a : arrival) a -= t0;
  } else {
    run.arrivals_assumed = true;
    double rate = std::numeric_limits<double>::infinity();
    if (j.contains("request_rate")) {
      const nlohmann::json& r = j["request_rate"];
      if (r.is_string()) {
        if (r.get<std::string>() != "inf")
          throw InputError(fmt::format("{}: request_rate '{}' is neither a number nor \"inf\"", path, r.get<std::string>()));
      } else {
        rate = json_number(r, path, "request_rate");
        if (!(rate > 0)) throw InputError(fmt::format("{}: request_rate must be > 0 (got {})", path, rate));
      }
    } else {
      run.notes.push_back("no request_rate: taken as inf (every request sent at once)");
    }
    double burstiness = 1.0;
    if (j.contains("burstiness") && !j["burstiness"].is_null()) {
      burstiness = json_number(j["burstiness"], path, "burstiness");
      if (!(burstiness > 0)) throw InputError(fmt::format("{}: burstiness must be > 0 (got {})", path, burstiness));
    }
    int64_t max_concurrency = 0;
    if (j.contains("max_concurrency") && !j["max_concurrency"].is_null()) {
      const double c = json_number(j["max_concurrency"], path, "max_concurrency");
      if (c < 1 || c != std::floor(c))
        throw InputError(fmt::format("{}: max_concurrency must be an integer >= 1 (got {})", path, c));
      max_concurrency = int64_t(c);
    }
    if (std::isinf(rate) && max_concurrency > 0) {
      run.closed_loop_concurrency = max_concurrency;
      run.arrivals_note = fmt::format("no start_times: arrivals assumed closed loop, {} requests in flight "
                                      "(request_rate inf, max_concurrency {})", max_concurrency, max_concurrency);
    } else if (std::isinf(rate)) {
      run.arrivals_note = "no start_times: arrivals assumed all at t = 0 (request_rate inf)";
    } else {
      Rng rng(options.seed);
      double t = 0;
      for (size_t i = 0; i < n; ++i) {
        arrival[i] = t;
        t += rng.gamma(burstiness, 1.0 / (rate * burstiness));
      }
      run.arrivals_note = fmt::format("no start_times: arrivals assumed, gamma gaps of mean 1/{} s and shape {} "
                                      "(vLLM's process; seeded by --seed, not the run's own draw)",
                                      rate, burstiness);
      if (max_concurrency > 0)
        run.notes.push_back(fmt::format("max_concurrency {} is not replayed: the assumed arrivals are open loop",
                                        max_concurrency));
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const double in_len = json_number(input_lens[i], path, fmt::format("input_lens[{}]", i));
    const double out_len = json_number(output_lens[i], path, fmt::format("output_lens[{}]", i));
    if (in_len < 1 || in_len != std::floor(in_len) || in_len > double(std::numeric_limits<int32_t>::max()))
      throw InputError(fmt::format("{}: input_lens[{}] must be an integer >= 1 (got {})", path, i, in_len));
    if (out_len < 0 || out_len != std::floor(out_len) || out_len > double(std::numeric_limits<int32_t>::max()))
      throw InputError(fmt::format("{}: output_lens[{}] must be an integer >= 0 (got {})", path, i, out_len));
    const bool errored = errors && (*errors)[i].is_string() && !(*errors)[i].get<std::string>().empty();
    if (!itls[i].is_array()) throw InputError(fmt::format("{}: itls[{}] is not a list", path, i));
    if (errored || out_len == 0) {
      // vLLM keeps a failed request's lengths as 0 output tokens: what it
      // asked for is not in the file, so it is not simulated.
      ++run.dropped_failed;
      continue;
    }
    MeasuredRequest r;
    r.id = int64_t(i);
    r.arrival_s = arrival[i];
    r.prompt_tokens = int32_t(in_len);
    r.output_tokens = int32_t(out_len);
    r.completed = true;
    r.ttft_s = json_time(ttfts[i], path, fmt::format("ttfts[{}]", i));
    double decode = 0;
    for (size_t k = 0; k < itls[i].size(); ++k) {
      const double gap = json_time(itls[i][k], path, fmt::format("itls[{}][{}]", i, k));
      decode += gap;
      run.itl_samples.push_back(gap);
    }
    // vLLM's own definitions: latency = TTFT + the chunks' gaps, TPOT =
    // (latency - TTFT) / (output tokens - 1).
    r.e2e_s = r.ttft_s + decode;
    r.tpot_s = r.output_tokens > 1 ? decode / (r.output_tokens - 1) : -1;
    run.requests.push_back(r);
  }
  if (run.requests.empty())
    throw InputError(fmt::format("{}: every request failed (output_lens 0 or an error): nothing to compare", path));
  if (run.dropped_failed > 0)
    run.notes.push_back(fmt::format("{} failed requests (an error or no output) are not simulated", run.dropped_failed));
  sort_by_arrival(run.requests);
  return run;
}

MeasuredRun read_measured_run(const std::string& path, const MeasuredReadOptions& options) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "requests.csv")) return read_servesim_run_folder(path);
    const fs::path vllm = fs::path(path) / "vllm_result.json";
    if (fs::exists(vllm)) return read_vllm_result_json(vllm.string(), options);
    throw InputError(fmt::format("{} {}: the folder has neither requests.csv (a servesim run or bench "
                                 "folder) nor vllm_result.json",
                                 options.flag, path));
  }
  if (!fs::exists(path, ec)) throw InputError(fmt::format("{} {}: no such file or folder", options.flag, path));
  return read_vllm_result_json(path, options);
}

Workload measured_workload(const MeasuredRun& run) {
  Workload w;
  w.requests.reserve(run.requests.size());
  for (size_t i = 0; i < run.requests.size(); ++i) {
    Request r;
    r.id = int64_t(i);
    r.arrival_s = run.closed_loop_concurrency > 0 ? 0.0 : run.requests[i].arrival_s;
    r.prompt_tokens = run.requests[i].prompt_tokens;
    r.output_tokens = run.requests[i].output_tokens;
    w.requests.push_back(r);
  }
  if (run.closed_loop_concurrency > 0) {
    w.closed_loop = true;
    w.concurrency = run.closed_loop_concurrency;
  }
  return w;
}

}  // namespace servesim
