// Times work enqueued on one CUDA stream with CUDA events, for the CUDA
// calibration (calib/calibrate_cuda.cpp). Needs the CUDA backend.
//
//   cold(name, launch)  before every launch the L2 cache is flushed
//       (cudaMemsetAsync over twice its size, outside the timed region; the
//       flush nvbench uses), and a pair of events brackets that one launch.
//       While the GPU flushes, the host enqueues the next launch, so the
//       events see the GPU's time alone. A repetition is the mean of k such
//       samples, k chosen from a first sample so that they take at least
//       min_repetition_s (1 .. max_cold_samples).
//   warm(name, launch)  events around a batch of n back-to-back launches
//       (n chosen the same way, 1 .. max_batch_launches), per launch =
//       elapsed / n. Graph::Yes captures the batch in a CUDA graph first, as
//       the decoder replays its decode steps: short kernels then run at the
//       GPU's pace, not the host's launch rate. Graph::No launches eagerly
//       (long operations: the ceilings).
//   host(name, call)    the wall clock around calls that synchronise
//       themselves (host-side work, e.g. sampling on the CPU).
// Every method first runs the work untimed (warm-up: module loading, cuBLAS
// heuristics, first touches), then `repetitions` timed repetitions, and
// returns their median. Each benchmark's repetitions are kept for the raw
// JSON.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/device_buffer.h"

namespace servesim::cuda_calib {

struct TimerSettings {
  int repetitions = 5;
  double min_repetition_s = 0.005;  // the timed launches of one repetition last at least this long
  int max_cold_samples = 64;
  int max_batch_launches = 1024;
};

// One benchmark's timings.
struct Measurement {
  std::string name;                   // "gemm_qkv/M:16"
  std::string method;                 // "cold", "warm (graph)", "warm (eager)", "host"
  int64_t launches_per_repetition = 0;
  std::vector<double> repetitions_s;  // seconds per launch, one per repetition
  double median_s = 0;
  double flops = 0, bytes = 0;        // per launch; 0 when not given
  nlohmann::json to_json() const;
};

class Timer {
 public:
  using Launch = std::function<void()>;  // enqueues one launch on the timer's stream, never synchronises
  enum class Graph { No, Yes };

  // A flush buffer of 2 x l2_bytes is allocated on the current device.
  Timer(cudaStream_t stream, size_t l2_bytes, const TimerSettings& settings);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  double cold(const std::string& name, const Launch& launch, double flops = 0, double bytes = 0);
  double warm(const std::string& name, const Launch& launch, double flops = 0, double bytes = 0,
              Graph graph = Graph::Yes);
  double host(const std::string& name, const std::function<void()>& call, double bytes = 0);

  const std::vector<Measurement>& measurements() const { return measurements_; }
  size_t flush_bytes() const { return flush_.bytes(); }
  const TimerSettings& settings() const { return settings_; }
  // {"context": context, "benchmarks": [every measurement]}.
  nlohmann::json raw_json(const nlohmann::json& context) const;

 private:
  void flush();
  void sync();
  // Seconds between two recorded events (after a sync).
  double elapsed(size_t start_event, size_t stop_event) const;
  void ensure_events(size_t n);
  // How many launches of `one_s` seconds fill a repetition, capped.
  int64_t launches_for(double one_s, int64_t cap) const;
  double keep(Measurement m);

  cudaStream_t stream_;
  TimerSettings settings_;
  cuda::DeviceBuffer<uint8_t> flush_;
  int flush_value_ = 0;
  std::vector<cudaEvent_t> events_;
  std::vector<Measurement> measurements_;
};

}  // namespace servesim::cuda_calib
