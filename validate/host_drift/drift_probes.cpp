#include "validate/host_drift/drift_probes.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "calib/ceilings.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/host_weights.h"
#include "sim/errors.h"

namespace servesim {
namespace {

double field(const nlohmann::json& j, const char* name, const std::string& source) {
  if (!j.contains(name) || !j[name].is_number() || !(j[name].get<double>() > 0))
    throw InputError(fmt::format("{}: anchor.{} must be a number > 0", source, name));
  return j[name].get<double>();
}

}  // namespace

nlohmann::json DriftProbe::to_json() const {
  nlohmann::json j = {{"decode_iteration_s", decode_iteration_s},
                      {"gemm_flops_per_s", gemm_flops_per_s},
                      {"layers", layers},
                      {"context", context},
                      {"gemm_n", gemm_n}};
  auto ns = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  if (!std::isnan(core_latency_before_ns) || !std::isnan(core_latency_after_ns))
    j["core_latency_ns"] = {{"before", ns(core_latency_before_ns)},
                            {"after", ns(core_latency_after_ns)},
                            {"placement", to_string(placement())}};
  return j;
}

DriftProbe DriftProbe::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw InputError(fmt::format("{}: anchor must be an object", source));
  DriftProbe a;
  a.decode_iteration_s = field(j, "decode_iteration_s", source);
  a.gemm_flops_per_s = field(j, "gemm_flops_per_s", source);
  a.layers = int32_t(field(j, "layers", source));
  a.context = int64_t(field(j, "context", source));
  a.gemm_n = int64_t(field(j, "gemm_n", source));
  if (j.contains("core_latency_ns")) {
    const nlohmann::json& c = j["core_latency_ns"];
    auto ns = [&](const char* name) {
      if (!c.is_object() || !c.contains(name) || !(c[name].is_null() || c[name].is_number()))
        throw InputError(fmt::format("{}: anchor.core_latency_ns.{} must be a number or null", source, name));
      return c[name].is_null() ? std::numeric_limits<double>::quiet_NaN() : c[name].get<double>();
    };
    a.core_latency_before_ns = ns("before");
    a.core_latency_after_ns = ns("after");
  }
  return a;
}

struct DriftProber::State {
  std::unique_ptr<DecoderExecutor> executor;
  std::vector<int32_t> table;
  IterationPlan plan;
  std::unique_ptr<ceilings::Gemm> gemm;
  int threads = 1;
};

DriftProber::DriftProber(const DriftProbeSettings& s) : settings_(s), state_(std::make_unique<State>()) {
  State& st = *state_;
  st.threads = s.threads > 0 ? s.threads : omp_get_num_procs();
  ModelSpec m = s.model;
  m.num_hidden_layers = s.layers;
  const int64_t blocks = (s.context + s.block_size - 1) / s.block_size;
  CpuDecoderOptions decoder_options;
  decoder_options.threads = st.threads;
  DecoderExecutorOptions executor_options;
  executor_options.sampling = s.sampling;
  st.executor = std::make_unique<DecoderExecutor>(
      make_cpu_decoder(random_weights(m, s.weights_seed), blocks, s.block_size, decoder_options), executor_options);
  for (int64_t b = 0; b < blocks; ++b) st.table.push_back(int32_t(b));
  ScheduledSequence seq;
  seq.request_id = 1;
  seq.num_query_tokens = 1;
  seq.num_cached_tokens = int32_t(s.context - 1);
  seq.samples = true;
  seq.block_table = st.table;
  st.plan.add(seq);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(st.threads);
  st.gemm = std::make_unique<ceilings::Gemm>(s.gemm_n);  // runs one product first
  omp_set_num_threads(saved_threads);
}

DriftProber::~DriftProber() = default;

DriftProbe DriftProber::measure() {
  State& st = *state_;
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(st.threads);
  DriftProbe probe;
  probe.layers = settings_.layers;
  probe.context = settings_.context;
  probe.gemm_n = settings_.gemm_n;
  probe.core_latency_before_ns = core_to_core_latency_ns(st.threads);
  // The decode probe: one decode token through the real executor.
  IterationResult result;
  std::vector<double> times;
  for (int i = 0; i < 3 + std::max(settings_.repetitions, 1); ++i) {
    result.reset();
    st.executor->execute(st.plan, result);
    if (i >= 3) times.push_back(result.duration_s);  // three warm-up steps
  }
  probe.decode_iteration_s = calibration::median(times);
  // The GEMM probe.
  times.clear();
  for (int i = 0; i < std::max(3, settings_.repetitions / 4); ++i) times.push_back(st.gemm->pass());
  probe.gemm_flops_per_s = st.gemm->flops() / calibration::median(times);
  probe.core_latency_after_ns = core_to_core_latency_ns(st.threads);
  omp_set_num_threads(saved_threads);
  return probe;
}

DriftProbe measure_drift_probe(const DriftProbeSettings& s) { return DriftProber(s).measure(); }

DriftProbe median_probe(const std::vector<DriftProbe>& probes) {
  if (probes.empty()) throw std::logic_error("median_probe: no probes");
  DriftProbe m = probes.front();
  std::vector<double> decode, gemm;
  for (const DriftProbe& p : probes) {
    decode.push_back(p.decode_iteration_s);
    gemm.push_back(p.gemm_flops_per_s);
  }
  m.decode_iteration_s = calibration::median(decode);
  m.gemm_flops_per_s = calibration::median(gemm);
  return m;
}

PlacementCounts placement_counts(const std::vector<DriftProbe>& probes) {
  PlacementCounts counts;
  for (const DriftProbe& p : probes) counts.add(p.placement());
  return counts;
}

std::vector<DriftProbe> probes_in_dominant_placement(const std::vector<DriftProbe>& probes) {
  const Placement dominant = placement_counts(probes).dominant();
  if (dominant == Placement::Unknown) return probes;
  std::vector<DriftProbe> kept;
  for (const DriftProbe& p : probes)
    if (p.placement() == dominant) kept.push_back(p);
  return kept;
}

std::optional<PlacementCounts> calibration_placement_counts(const DeviceProfile& profile) {
  const nlohmann::json& metadata = profile.metadata;
  if (!metadata.is_object() || !metadata.contains("anchor_probes")) return std::nullopt;
  const nlohmann::json& probes = metadata["anchor_probes"];
  if (!probes.is_object() || !probes.contains("placement_counts") || !probes["placement_counts"].is_object())
    return std::nullopt;
  const nlohmann::json& c = probes["placement_counts"];
  PlacementCounts counts;
  counts.near = c.value("near", int64_t(0));
  counts.far = c.value("far", int64_t(0));
  counts.unknown = c.value("unknown", int64_t(0));
  return counts;
}

std::optional<DriftProbe> calibration_drift_probe(const DeviceProfile& profile, const std::string& source) {
  if (profile.anchor.is_null()) return std::nullopt;
  return DriftProbe::from_json(profile.anchor, source);
}

DriftProbeSettings drift_probe_settings_of(const DriftProbe& probe, const ModelSpec& model, int threads, int32_t block_size,
                                  uint64_t weights_seed, const SamplingParams& sampling) {
  DriftProbeSettings s;
  s.model = model;
  s.threads = threads;
  s.layers = probe.layers;
  s.context = probe.context;
  s.block_size = block_size;
  s.weights_seed = weights_seed;
  s.sampling = sampling;
  s.gemm_n = probe.gemm_n;
  return s;
}

}  // namespace servesim
