#include "calib/microbench_runner.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

namespace servesim {
namespace {

// Google Benchmark wants Initialize() once per process, before any run. One
// flag is passed, random interleaving (see MicrobenchSession::run); every
// other setting is made per benchmark.
void initialize_benchmark_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    static char name[] = "servesim-calibrate";
    static char interleave[] = "--benchmark_enable_random_interleaving=true";
    static char* argv[] = {name, interleave, nullptr};
    int argc = 2;
    benchmark::Initialize(&argc, argv);
  });
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

// Collects every timed run's seconds per iteration and passes each report on
// to the JSON reporter (the context once, for the whole session).
class MicrobenchSession::Collector final : public benchmark::BenchmarkReporter {
 public:
  explicit Collector(benchmark::JSONReporter& json) : json_(json) {
    SetOutputStream(&std::cerr);
    SetErrorStream(&std::cerr);
  }

  bool ReportContext(const Context& context) override {
    if (!context_reported_) json_.ReportContext(context);
    context_reported_ = true;
    return true;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const std::string& name = run.run_name.function_name;
      if (run.error_occurred) {
        errors_.push_back(fmt::format("{}: {}", name, run.error_message));
        continue;
      }
      if (run.run_type == Run::RT_Iteration && run.iterations > 0)
        seconds_[name].push_back(run.real_accumulated_time / double(run.iterations));
    }
    json_.ReportRuns(runs);
  }
  void Finalize() override {}  // the session closes the JSON document itself
  bool context_reported() const { return context_reported_; }

  std::map<std::string, std::vector<double>> seconds_;
  std::vector<std::string> errors_;

 private:
  benchmark::JSONReporter& json_;
  bool context_reported_ = false;
};

MicrobenchSession::MicrobenchSession(std::ostream& json_out, const MicrobenchSettings& settings)
    : settings_(settings), json_(std::make_unique<benchmark::JSONReporter>()) {
  initialize_benchmark_library();
  benchmark::ClearRegisteredBenchmarks();
  json_->SetOutputStream(&json_out);
  json_->SetErrorStream(&std::cerr);
  collector_ = std::make_unique<Collector>(*json_);
}

MicrobenchSession::~MicrobenchSession() {
  benchmark::ClearRegisteredBenchmarks();
  try {
    finish();
  } catch (...) {
  }
}

void MicrobenchSession::add(const std::string& name, Body body) {
  if (std::find(pending_.begin(), pending_.end(), name) != pending_.end() || collector_->seconds_.count(name))
    throw std::logic_error("benchmark registered twice: " + name);
  benchmark::RegisterBenchmark(name.c_str(), [body = std::move(body)](benchmark::State& state) { body(state); })
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime()
      ->MinTime(settings_.min_time_s)
      ->MinWarmUpTime(settings_.warmup_s)
      ->Repetitions(settings_.repetitions);
  pending_.push_back(name);
}

std::vector<MicrobenchResult> MicrobenchSession::run() {
  if (finished_) throw std::logic_error("MicrobenchSession::run after finish");
  if (pending_.empty()) return {};
  collector_->errors_.clear();
  benchmark::RunSpecifiedBenchmarks(collector_.get(), ".");
  benchmark::ClearRegisteredBenchmarks();
  const std::vector<std::string> names = std::move(pending_);
  pending_.clear();
  if (!collector_->errors_.empty()) throw std::runtime_error("a benchmark failed: " + collector_->errors_.front());
  std::vector<MicrobenchResult> results;
  for (const std::string& name : names) {
    auto it = collector_->seconds_.find(name);
    if (it == collector_->seconds_.end() || it->second.empty())
      throw std::runtime_error("benchmark " + name + " reported no timed run");
    results.push_back({median(it->second), it->second});
  }
  benchmarks_run_ += int(names.size());
  return results;
}

void MicrobenchSession::finish() {
  if (finished_) return;
  finished_ = true;
  if (collector_->context_reported()) json_->Finalize();  // else nothing was opened
}

std::string benchmark_library_version() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&benchmark::Shutdown), &info) == 0 || !info.dli_fname)
    return "unknown";
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(info.dli_fname, ec);
  if (ec) return "unknown";
  const std::string file = real.filename().string();  // libbenchmark.so.1.7.1
  const std::string marker = "libbenchmark.so.";
  if (file.rfind(marker, 0) != 0 || file.size() == marker.size()) return "unknown (statically linked?)";
  return file.substr(marker.size());
}

}  // namespace servesim
