#include "calib/cuda_timer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "kernels/cuda/cuda_check.h"

namespace servesim::cuda_calib {
namespace {

using Clock = std::chrono::steady_clock;

// Owns an instantiated graph.
struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

// Records `count` calls of `launch` on `stream` as a graph.
void capture(cudaStream_t stream, const Timer::Launch& launch, int64_t count, GraphExec& out) {
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int64_t i = 0; i < count; ++i) launch();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);  // leave the stream usable
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  const cudaError_t status = cudaGraphInstantiate(&out.exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(status);
}

}  // namespace

nlohmann::json Measurement::to_json() const {
  nlohmann::json j = {{"name", name},
                      {"method", method},
                      {"launches_per_repetition", launches_per_repetition},
                      {"repetitions_s", repetitions_s},
                      {"median_s", median_s}};
  if (flops > 0) {
    j["flops_per_launch"] = flops;
    j["flops_per_s"] = flops / median_s;
  }
  if (bytes > 0) {
    j["bytes_per_launch"] = bytes;
    j["bytes_per_s"] = bytes / median_s;
  }
  return j;
}

Timer::Timer(cudaStream_t stream, size_t l2_bytes, const TimerSettings& settings)
    : stream_(stream), settings_(settings), flush_(2 * std::max<size_t>(l2_bytes, size_t(1) << 20)) {
  settings_.repetitions = std::max(settings_.repetitions, 1);
  settings_.max_cold_samples = std::max(settings_.max_cold_samples, 1);
  settings_.max_batch_launches = std::max(settings_.max_batch_launches, 1);
}

Timer::~Timer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void Timer::ensure_events(size_t n) {
  events_.reserve(n);
  while (events_.size() < n) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
}

void Timer::flush() {
  // A different byte each time, so no flush finds the lines already holding it.
  CUDA_CHECK(cudaMemsetAsync(flush_.data(), flush_value_++ & 0xff, flush_.bytes(), stream_));
}

void Timer::sync() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

double Timer::elapsed(size_t start_event, size_t stop_event) const {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, events_[start_event], events_[stop_event]));
  return double(ms) * 1e-3;
}

int64_t Timer::launches_for(double one_s, int64_t cap) const {
  if (!(one_s > 0)) return cap;
  return int64_t(std::clamp(std::ceil(settings_.min_repetition_s / one_s), 1.0, double(cap)));
}

double Timer::keep(Measurement m) {
  m.median_s = calibration::median(m.repetitions_s);
  // A profile's tables must be > 0; an event pair around real work never reads 0.
  if (!(m.median_s > 0) || !std::isfinite(m.median_s))
    throw std::runtime_error(fmt::format("benchmark {} timed at {} s", m.name, m.median_s));
  const double median = m.median_s;
  measurements_.push_back(std::move(m));
  return median;
}

double Timer::cold(const std::string& name, const Launch& launch, double flops, double bytes) {
  ensure_events(2);
  launch();  // warm-up
  sync();
  flush();
  CUDA_CHECK(cudaEventRecord(events_[0], stream_));
  launch();
  CUDA_CHECK(cudaEventRecord(events_[1], stream_));
  sync();
  const int64_t k = launches_for(elapsed(0, 1), settings_.max_cold_samples);
  ensure_events(size_t(2 * k));

  Measurement m{name, "cold", k, {}, 0, flops, bytes};
  for (int r = 0; r < settings_.repetitions; ++r) {
    // Everything of one repetition is enqueued before the host waits.
    for (int64_t i = 0; i < k; ++i) {
      flush();
      CUDA_CHECK(cudaEventRecord(events_[size_t(2 * i)], stream_));
      launch();
      CUDA_CHECK(cudaEventRecord(events_[size_t(2 * i + 1)], stream_));
    }
    sync();
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += elapsed(size_t(2 * i), size_t(2 * i + 1));
    m.repetitions_s.push_back(sum / double(k));
  }
  return keep(std::move(m));
}

double Timer::warm(const std::string& name, const Launch& launch, double flops, double bytes, Graph graph) {
  ensure_events(2);
  launch();  // warm-up
  sync();
  CUDA_CHECK(cudaEventRecord(events_[0], stream_));
  launch();
  CUDA_CHECK(cudaEventRecord(events_[1], stream_));
  sync();
  const int64_t n = launches_for(elapsed(0, 1), settings_.max_batch_launches);

  GraphExec exec;
  if (graph == Graph::Yes) capture(stream_, launch, n, exec);
  auto batch = [&] {
    if (exec.exec) {
      CUDA_CHECK(cudaGraphLaunch(exec.exec, stream_));
    } else {
      for (int64_t i = 0; i < n; ++i) launch();
    }
  };
  batch();  // the batch's own warm-up (a graph's first launch uploads it)
  sync();
  Measurement m{name, graph == Graph::Yes ? "warm (graph)" : "warm (eager)", n, {}, 0, flops, bytes};
  for (int r = 0; r < settings_.repetitions; ++r) {
    CUDA_CHECK(cudaEventRecord(events_[0], stream_));
    batch();
    CUDA_CHECK(cudaEventRecord(events_[1], stream_));
    sync();
    m.repetitions_s.push_back(elapsed(0, 1) / double(n));
  }
  return keep(std::move(m));
}

double Timer::host(const std::string& name, const std::function<void()>& call, double bytes) {
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  call();  // warm-up
  const auto first = Clock::now();
  call();
  const int64_t k = launches_for(seconds_since(first), settings_.max_batch_launches);
  Measurement m{name, "host", k, {}, 0, 0, bytes};
  for (int r = 0; r < settings_.repetitions; ++r) {
    const auto start = Clock::now();
    for (int64_t i = 0; i < k; ++i) call();
    m.repetitions_s.push_back(seconds_since(start) / double(k));
  }
  return keep(std::move(m));
}

nlohmann::json Timer::raw_json(const nlohmann::json& context) const {
  nlohmann::json benchmarks = nlohmann::json::array();
  for (const Measurement& m : measurements_) benchmarks.push_back(m.to_json());
  return {{"context", context}, {"benchmarks", benchmarks}};
}

}  // namespace servesim::cuda_calib
