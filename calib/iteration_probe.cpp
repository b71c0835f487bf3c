#include "calib/iteration_probe.h"

#include <omp.h>

#include <algorithm>

#include <fmt/format.h>

#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/host_weights.h"

namespace servesim {
namespace {

constexpr int32_t kContext = 64;  // cached tokens + 1 of each decode sequence
constexpr int32_t kBatches[] = {1, 2, 4, 8, 16};
constexpr int32_t kPrefills[] = {32, 128};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

IterationProbePlans iteration_probe_plans(int32_t block_size) {
  IterationProbePlans out;
  auto table_of = [&](int32_t tokens) {
    std::vector<int32_t> t;
    for (int32_t b = 0; b * block_size < tokens; ++b) t.push_back(int32_t(out.blocks++));
    return t;
  };
  // Every sequence gets its own blocks; the tables' storage is fixed before
  // any plan points into it.
  std::vector<std::vector<int32_t>> decode_tables(16), prefill_tables;
  for (auto& t : decode_tables) t = table_of(kContext);
  for (int32_t T : kPrefills) prefill_tables.push_back(table_of(T));
  out.tables = decode_tables;
  out.tables.insert(out.tables.end(), prefill_tables.begin(), prefill_tables.end());
  for (int32_t b : kBatches) {
    IterationPlan plan;
    for (int32_t i = 0; i < b; ++i) {
      ScheduledSequence s;
      s.request_id = i;
      s.num_query_tokens = 1;
      s.num_cached_tokens = kContext - 1;
      s.samples = true;
      s.block_table = out.tables[size_t(i)];
      plan.add(s);
    }
    out.names.push_back(fmt::format("decode b={}", b));
    out.plans.push_back(std::move(plan));
  }
  for (size_t p = 0; p < std::size(kPrefills); ++p) {
    IterationPlan plan;
    ScheduledSequence s;
    s.request_id = 100 + int64_t(p);
    s.num_query_tokens = kPrefills[p];
    s.num_cached_tokens = 0;
    s.is_prefill = true;
    s.samples = true;
    s.block_table = out.tables[16 + p];
    plan.add(s);
    out.names.push_back(fmt::format("prefill {}", kPrefills[p]));
    out.plans.push_back(std::move(plan));
  }
  return out;
}

struct IterationProber::State {
  IterationProbePlans plans;
  std::unique_ptr<DecoderExecutor> executor;
  int threads = 1;
};

IterationProber::IterationProber(const IterationProbeSettings& s) : settings_(s), state_(std::make_unique<State>()) {
  State& st = *state_;
  st.threads = s.threads > 0 ? s.threads : omp_get_num_procs();
  st.plans = iteration_probe_plans(s.block_size);
  CpuDecoderOptions decoder_options;
  decoder_options.threads = st.threads;
  DecoderExecutorOptions executor_options;
  executor_options.sampling = s.sampling;
  st.executor = std::make_unique<DecoderExecutor>(
      make_cpu_decoder(random_weights(s.model, s.weights_seed), st.plans.blocks, s.block_size, decoder_options),
      executor_options);
}

IterationProber::~IterationProber() = default;

const IterationProbePlans& IterationProber::plans() const { return state_->plans; }

std::vector<double> IterationProber::measure() {
  State& st = *state_;
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(st.threads);
  std::vector<double> out;
  IterationResult result;
  for (const IterationPlan& plan : st.plans.plans) {
    const bool prefill = plan.sequences.front().is_prefill;
    const int reps = prefill ? std::max(3, settings_.repetitions / 3) : std::max(1, settings_.repetitions);
    std::vector<double> times;
    for (int i = 0; i < 1 + reps; ++i) {  // one warm-up run
      result.reset();
      st.executor->execute(plan, result);
      if (prefill) st.executor->on_request_finished(plan.sequences.front().request_id);
      if (i >= 1) times.push_back(result.duration_s);
    }
    out.push_back(median(times));
  }
  omp_set_num_threads(saved_threads);
  return out;
}

}  // namespace servesim
