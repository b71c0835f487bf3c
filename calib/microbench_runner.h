// Google Benchmark plumbing for the calibration: benchmarks registered at
// run time (one family at a time), each one's median seconds per iteration
// collected, and every run written as Google Benchmark's own JSON.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

namespace servesim {

struct MicrobenchSettings {
  int repetitions = 3;       // timed runs of each benchmark; the median is kept
  double min_time_s = 0.01;  // each run repeats the body until it has taken this long
  double warmup_s = 0.005;   // untimed runs first (at least one call)
};

// Seconds of a benchmark: the median over repetitions of (wall time of a
// run / its iterations), and the repetitions themselves.
struct MicrobenchResult {
  double median_s = 0;
  std::vector<double> repetitions_s;
};

class MicrobenchSession {
 public:
  using Body = std::function<void(benchmark::State&)>;

  // The raw JSON goes to `json_out` (which must outlive the session); one
  // document holds every family run through this session.
  MicrobenchSession(std::ostream& json_out, const MicrobenchSettings& settings);
  ~MicrobenchSession();
  MicrobenchSession(const MicrobenchSession&) = delete;
  MicrobenchSession& operator=(const MicrobenchSession&) = delete;

  // Registers one benchmark, timed on the wall clock; the body runs the
  // work once per `for (auto _ : state)` iteration. Names are unique.
  void add(const std::string& name, Body body);
  // Runs what was added since the last call and forgets the registrations;
  // throws std::runtime_error if one failed. The repetitions of all of them
  // run in a random order (Google Benchmark's random interleaving), so each
  // benchmark's median comes from moments spread over the whole call: on a
  // machine that changes speed partway through (a shared VM can,
  // docs/noisy-hosts.md), every point of a family sees the same mixture of
  // states instead of the points measured before the change seeing one and
  // the rest the other.
  std::vector<MicrobenchResult> run();
  // Closes the JSON document (also done by the destructor).
  void finish();

  const MicrobenchSettings& settings() const { return settings_; }
  int benchmarks_run() const { return benchmarks_run_; }

 private:
  class Collector;
  MicrobenchSettings settings_;
  std::unique_ptr<benchmark::JSONReporter> json_;
  std::unique_ptr<Collector> collector_;
  std::vector<std::string> pending_;
  bool finished_ = false;
  int benchmarks_run_ = 0;
};

// The Google Benchmark library's version ("1.7.1"), read from the shared
// library's file name; "unknown" when it is linked statically.
std::string benchmark_library_version();

}  // namespace servesim
