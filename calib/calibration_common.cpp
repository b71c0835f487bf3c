#include "calib/calibration_common.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/cost/profile_model.h"

namespace servesim::calibration {
namespace {

std::string first_line_of(const char* command) {
  std::string out;
  if (FILE* p = popen(command, "r")) {
    char buffer[256];
    if (std::fgets(buffer, sizeof buffer, p)) out = buffer;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

// ---------------------------------------------------------- provenance ---

std::string git_commit() {
  std::vector<std::string> dirs;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().string());
  dirs.push_back(".");
  for (const std::string& dir : dirs) {
    const std::string sha = first_line_of(("git -C " + shell_quote(dir) + " rev-parse HEAD 2>/dev/null").c_str());
    if (sha.size() == 40 && sha.find_first_not_of("0123456789abcdef") == std::string::npos) return sha;
  }
  return "unknown";
}

std::string utc_now_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string compiler_version() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown";
#endif
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        return name;
      }
    }
  return "unknown CPU";
}

nlohmann::json host_identity() {
  nlohmann::json host;
  utsname u{};
  if (uname(&u) == 0) {
    host["os"] = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
    host["hostname"] = u.nodename;
  }
  host["cpu"] = cpu_model_name();
  return host;
}

// -------------------------------------------------------------- tables ---

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Curve make_curve(const std::vector<int64_t>& x, std::vector<double> seconds) {
  Curve c;
  for (int64_t v : x) c.x.push_back(double(v));
  c.seconds = std::move(seconds);
  return c;
}

nlohmann::json grids_json(const CalibrationGrids& g) {
  return {{"tokens", g.tokens},
          {"elementwise_tokens", g.elementwise_tokens},
          {"prefill_query", g.prefill_query},
          {"prefill_cached", g.prefill_cached},
          {"decode_batch", g.decode_batch},
          {"decode_context", g.decode_context},
          {"lm_head_rows", g.lm_head_rows},
          {"sampling_rows", g.sampling_rows}};
}

std::string axis_text(const std::vector<int64_t>& v) {
  return v.size() == 1 ? fmt::format("{}", v.front()) : fmt::format("{} .. {}", v.front(), v.back());
}

// ------------------------------------------------- whole-model measurements ---

OneSequencePlan::OneSequencePlan(int64_t request_id, int64_t query, int64_t cached, bool prefill,
                                 int32_t block_size, int32_t first_block) {
  for (int64_t b = 0; b < ceil_div(query + cached, block_size); ++b) table_.push_back(first_block + int32_t(b));
  ScheduledSequence seq;
  seq.request_id = request_id;
  seq.num_query_tokens = int32_t(query);
  seq.num_cached_tokens = int32_t(cached);
  seq.is_prefill = prefill;
  seq.samples = true;
  seq.block_table = table_;
  plan_.add(seq);
}

int64_t DecodeSteps::cached_of(int64_t i, int64_t sequences, int64_t cached) {
  if (sequences <= 1) return cached;
  return cached / 2 + (cached * i) / (sequences - 1);  // c/2 .. 3c/2, evenly
}

int64_t DecodeSteps::blocks(int64_t sequences, int64_t cached, int64_t steps, int32_t block_size) {
  int64_t total = 0;
  for (int64_t i = 0; i < sequences; ++i) total += ceil_div(cached_of(i, sequences, cached) + steps + 1, block_size);
  return total;
}

DecodeSteps::DecodeSteps(int64_t sequences, int64_t cached, int64_t steps, int32_t block_size, int32_t first_block,
                         int64_t first_id)
    : tables_(size_t(sequences)) {
  int32_t next_block = first_block;
  for (int64_t i = 0; i < sequences; ++i) {
    const int64_t c = cached_of(i, sequences, cached);
    for (int64_t b = 0; b < ceil_div(c + steps + 1, block_size); ++b) tables_[size_t(i)].push_back(next_block++);
    ScheduledSequence seq;
    seq.request_id = first_id + i;
    seq.num_query_tokens = 1;
    seq.num_cached_tokens = int32_t(c);
    seq.is_prefill = false;
    seq.samples = true;
    seq.block_table = tables_[size_t(i)];
    plan_.add(seq);
  }
}

void DecodeSteps::advance() {
  for (ScheduledSequence& s : plan_.sequences) ++s.num_cached_tokens;  // the tables were sized for `steps`
}

void store_attention_fits(DeviceProfile& p) {
  p.prefill_fit.reset();
  p.decode_fit.reset();
  const ProfileModel model(p, p.model, "the calibration");
  p.prefill_fit = model.prefill_fit();
  p.decode_fit = model.decode_fit();
}

double tables_seconds(const DeviceProfile& p, const IterationPlan& plan) {
  DeviceProfile tables = p;
  tables.iteration_overhead_s = 0;
  tables.gemm_factor = {};
  tables.decode_step_factor = {};
  return ProfileModel(std::move(tables), p.model, "calibration").breakdown(plan).total();
}

double median_execute_s(Executor& executor, const IterationPlan& plan, int warmup, int repetitions) {
  std::vector<double> times;
  IterationResult result;
  for (int i = 0; i < warmup + std::max(repetitions, 1); ++i) {
    result.reset();
    executor.execute(plan, result);
    if (i >= warmup) times.push_back(result.duration_s);
  }
  return median(times);
}

std::vector<int64_t> gemm_factor_lengths(const CalibrationOptions& options, int64_t max_context) {
  std::vector<int64_t> lengths;
  const int64_t longest = std::min<int64_t>(options.max_batched_tokens, max_context);
  for (int64_t t : options.quick ? std::vector<int64_t>{32, 128} : std::vector<int64_t>{32, 128, 512})
    if (t <= longest) lengths.push_back(t);
  return lengths;
}

void measure_gemm_factor(DeviceProfile& p, Executor& executor, const std::vector<int64_t>& lengths,
                     int32_t block_size, int repetitions, const std::function<void(const std::string&)>& say,
                     int lead_steps, int64_t lead_cached) {
  std::vector<double> measured;
  for (int64_t t : lengths)
    measured.push_back(
        median(time_prefills(executor, t, block_size, 1, std::max(repetitions, 1), lead_steps, lead_cached)));
  set_gemm_factor(p, lengths, measured, block_size, say);
}

int64_t prefill_blocks_with_lead(int64_t tokens, int32_t block_size, int lead_steps, int64_t lead_cached) {
  const int64_t lead = lead_steps > 0 ? DecodeSteps::blocks(1, lead_cached, lead_steps, block_size) : 0;
  return ceil_div(tokens, block_size) + lead;
}

std::vector<double> time_prefills(Executor& executor, int64_t tokens, int32_t block_size, int warm_up, int timed,
                                  int lead_steps, int64_t lead_cached, int32_t first_block, int64_t first_id) {
  const OneSequencePlan prefill(first_id, tokens, 0, true, block_size, first_block);
  const int32_t lead_first_block = first_block + int32_t(ceil_div(tokens, block_size));
  std::vector<double> seconds;
  IterationResult result;
  for (int i = 0; i < warm_up + timed; ++i) {
    if (lead_steps > 0)
      time_decode_steps(executor, 1, lead_cached, block_size, lead_steps, 0, lead_first_block, first_id + 1);
    result.reset();
    executor.execute(prefill.plan(), result);
    if (i >= warm_up) seconds.push_back(result.duration_s);
    executor.on_request_finished(first_id);  // each prefill of the request a new one
  }
  return seconds;
}

std::vector<double> time_decode_steps(Executor& executor, int64_t sequences, int64_t cached, int32_t block_size,
                                      int warm_up, int timed, int32_t first_block, int64_t first_id) {
  DecodeSteps steps(sequences, cached, warm_up + timed, block_size, first_block, first_id);
  std::vector<double> seconds;
  IterationResult result;
  for (int i = 0; i < warm_up + timed; ++i) {
    result.reset();
    executor.execute(steps.plan(), result);
    if (i >= warm_up) seconds.push_back(result.duration_s);
    steps.advance();
  }
  for (int64_t id = first_id; id < first_id + sequences; ++id) executor.on_request_finished(id);
  return seconds;
}

void set_decode_step_factor(DeviceProfile& p, const std::vector<int64_t>& batches, int64_t cached, int32_t block_size,
                        int warm_up, int timed, const std::vector<std::vector<double>>& measured,
                        const std::function<void(const std::string&)>& say) {
  if (measured.size() != batches.size() || timed < 1)
    throw std::logic_error("set_decode_step_factor: one list of timed steps per batch size");
  DeviceProfile without = p;
  without.decode_step_factor = {};
  const ProfileModel model(std::move(without), p.model, "calibration");
  p.decode_step_factor = {};
  for (size_t i = 0; i < batches.size(); ++i) {
    if (measured[i].empty()) continue;
    // The prediction of each timed step of a run (contexts one token apart).
    DecodeSteps steps(batches[i], cached, warm_up + timed, block_size);
    for (int k = 0; k < warm_up; ++k) steps.advance();
    std::vector<double> predicted;
    for (int k = 0; k < timed; ++k, steps.advance()) predicted.push_back(model.breakdown(steps.plan()).total());
    std::vector<double> ratios;
    for (size_t k = 0; k < measured[i].size(); ++k) ratios.push_back(measured[i][k] / predicted[k % size_t(timed)]);
    p.decode_step_factor.x.push_back(double(batches[i]));
    p.decode_step_factor.factor.push_back(std::max(0.1, median(ratios)));
    if (say)
      say(fmt::format("    in situ: decode steps of {} sequence{} took {:.3f} ms, the tables say {:.3f} ms: x{:.3f}",
                      batches[i], batches[i] == 1 ? "" : "s", median(measured[i]) * 1e3, median(predicted) * 1e3,
                      p.decode_step_factor.factor.back()));
  }
}

void measure_decode_step_factor(DeviceProfile& p, Executor& executor, const std::vector<int64_t>& batches,
                            int64_t cached, int32_t block_size, int repetitions,
                            const std::function<void(const std::string&)>& say) {
  const int timed = std::max(repetitions, 1);
  std::vector<std::vector<double>> measured;
  for (int64_t b : batches)
    measured.push_back(time_decode_steps(executor, b, cached, block_size, kDecodeStepWarmUp, timed));
  set_decode_step_factor(p, batches, cached, block_size, kDecodeStepWarmUp, timed, measured, say);
}

void set_gemm_factor(DeviceProfile& p, const std::vector<int64_t>& lengths, const std::vector<double>& measured_s,
                 int32_t block_size, const std::function<void(const std::string&)>& say) {
  if (measured_s.size() != lengths.size()) throw std::logic_error("set_gemm_factor: one measurement per length");
  DeviceProfile without = p;
  without.gemm_factor = {};
  const ProfileModel tables(std::move(without), p.model, "calibration");  // no in-situ factor yet
  p.gemm_factor = {};
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t t = lengths[i];
    const double measured = measured_s[i];
    const OneSequencePlan prefill(1, t, 0, true, block_size);
    const ProfileBreakdown b = tables.breakdown(prefill.plan());
    const double scaled = b.gemm + b.elementwise;
    const double factor = std::max(0.1, (measured - (b.total() - scaled)) / scaled);
    p.gemm_factor.x.push_back(double(t));
    p.gemm_factor.factor.push_back(factor);
    if (say)
      say(fmt::format("    in situ: a {}-token prefill took {:.2f} ms, the tables say {:.2f} ms: GEMMs x{:.3f}", t,
                      measured * 1e3, b.total() * 1e3, factor));
  }
}

std::vector<double> moment_spread(const std::vector<std::vector<double>>& medians) {
  std::vector<double> out;
  if (medians.empty()) return out;
  for (size_t b = 0; b < medians.front().size(); ++b) {
    double lo = medians.front()[b], hi = lo;
    for (const auto& moment : medians) {
      if (moment.size() != medians.front().size()) throw std::logic_error("moment_spread: ragged medians");
      lo = std::min(lo, moment[b]);
      hi = std::max(hi, moment[b]);
    }
    out.push_back(lo > 0 ? hi / lo : 1.0);
  }
  return out;
}

}  // namespace servesim::calibration
