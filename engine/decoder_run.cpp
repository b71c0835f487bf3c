#include "engine/decoder_run.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unistd.h>

#include <fmt/format.h>

#include "kernels/decoder/speculative_executor.h"
#include "sim/clock.h"
#include "sim/config_json.h"
#include "sim/errors.h"

namespace servesim {

double cpu_kv_bytes_per_token(const ModelSpec& m, const DecoderPrecision& precision) {
  return decoder_kv_bytes_per_token(m, DeviceChoice{}, precision);
}

int64_t cpu_kv_blocks(const ModelSpec& m, double bytes, int32_t block_size, const ModelSpec* draft,
                      const DecoderPrecision& precision) {
  return decoder_kv_blocks(m, DeviceChoice{}, bytes, block_size, draft, precision);
}

int64_t decoder_kv_blocks(const ModelSpec& m, const DeviceChoice& device, double bytes, int32_t block_size,
                          const ModelSpec* draft, const DecoderPrecision& precision) {
  if (block_size < 1) throw InputError(fmt::format("--block-size must be >= 1 (got {})", block_size));
  const double per_token = decoder_kv_bytes_per_token(m, device, precision) +
                           (draft ? decoder_kv_bytes_per_token(*draft, device, precision) : 0.0);
  const double blocks = std::floor(bytes / (per_token * block_size));
  if (!(blocks >= 1))
    throw InputError(fmt::format("--kv-cache-memory {:.0f} bytes holds no {}-token block of {}{} ({:.0f} bytes each)",
                                 bytes, block_size, m.name, draft ? " and its draft " + draft->name : "",
                                 per_token * block_size));
  return int64_t(std::min(blocks, 2147483647.0));
}

namespace {

// Refuses models that would not fit this machine's memory. The weights are
// counted in fp32: the host copy is fp32 while the decoder converts it.
void check_fits_in_memory(const std::string& what, double weight_bytes, double kv_bytes) {
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (physical > 0 && weight_bytes + kv_bytes > 0.8 * physical)
    throw InputError(fmt::format(
        "{} needs {:.1f} GB of fp32 weights plus {:.1f} GB of KV cache on the CPU, more than 80% of "
        "this machine's {:.1f} GB; use a smaller model (tiny-15m, small-110m) or --kv-cache-memory",
        what, weight_bytes / 1e9, kv_bytes / 1e9, physical / 1e9));
}

// A model's weights on the host, or nothing where the CUDA decoder makes
// random weights on the device itself.
struct WeightsSource {
  std::optional<HostWeights> host;
  ModelSpec spec;
  uint64_t seed = 0;
  std::optional<ModelSpec> layers_of;  // a random self-draft on CUDA: its target
  std::string description() const { return host ? host->source : fmt::format("random (seed {})", seed); }
};

WeightsSource target_weights(const EngineSetup& setup, const DeviceChoice& device) {
  WeightsSource w{std::nullopt, setup.model, setup.weights_seed, std::nullopt};
  if (setup.weights_dir) w.host = load_safetensors_weights(setup.model, *setup.weights_dir);
  else if (!device.cuda) w.host = random_weights(setup.model, setup.weights_seed);
  return w;
}

// The draft's weights: the self-draft's copied from the target's (or, for
// random weights on CUDA, made from the target's streams), or the separate
// draft's from its folder or seed. Built before the target's host weights
// are consumed.
WeightsSource draft_weights(const SpeculativeSetup& s, const ModelSpec& draft, const WeightsSource& target,
                            const DeviceChoice& device) {
  WeightsSource w{std::nullopt, draft, s.draft_weights_seed, std::nullopt};
  if (s.self_draft_layers != 0) {
    if (target.host) {
      w.host = self_draft_weights(*target.host, s.self_draft_layers);
    } else {
      w.seed = target.seed;
      w.layers_of = target.spec;
    }
    return w;
  }
  if (!s.draft_weights_dir) {
    if (!device.cuda) w.host = random_weights(draft, s.draft_weights_seed);
    return w;
  }
  try {
    w.host = load_safetensors_weights(draft, *s.draft_weights_dir);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--draft-weights: {}", e.what()));  // not the target's --weights
  }
  return w;
}

std::unique_ptr<DecoderModel> make_decoder(WeightsSource&& w, const DeviceChoice& device, int64_t blocks,
                                           int32_t block_size, int threads, const DecoderPrecision& precision) {
  if (!device.cuda)
    return make_cpu_decoder(std::move(*w.host), blocks, block_size,
                            CpuDecoderOptions{threads, cpu_precision(precision.on(device))});
  CudaDecoderOptions cuda;
  cuda.device = device.index;
  if (w.host) return make_cuda_decoder(std::move(*w.host), blocks, block_size, cuda);
  return make_cuda_decoder_random(w.spec, w.seed, blocks, block_size, cuda, w.layers_of ? &*w.layers_of : nullptr);
}

}  // namespace

SchedulerConfig engine_scheduler_config(const EngineSetup& setup) {
  check_speculative_setup(setup.speculative, setup.scheduler.num_speculative_tokens, setup.model);
  const std::optional<ModelSpec> draft = draft_model_spec(setup.speculative, setup.model);
  SchedulerSettings settings = setup.scheduler;
  const DeviceChoice device = parse_device(setup.device);
  if (!settings.num_gpu_blocks)
    settings.num_gpu_blocks = decoder_kv_blocks(setup.model, device, setup.kv_cache_bytes, settings.block_size,
                                                draft ? &*draft : nullptr, setup.precision);
  // The hardware figures only size the KV cache, which is set above.
  HardwareSpec host{device.kind(), "this machine", 1, 1, 1, "", 0, 0, ""};
  return resolve_scheduler_config(settings, setup.model, host);
}

namespace {

// The executor `setup` serves with: the decoder, or with a draft the
// speculative executor over both, built and warmed up; `out` receives what
// was built (device, weights, KV bytes, warm-ups; out.scheduler must be
// resolved). The decoder holds `extra_kv_blocks` beyond the scheduler's;
// `acceptance` says in the ready line how drafts are accepted.
struct BuiltExecutor {
  std::unique_ptr<ServedExecutor> executor;
  const SpeculativeExecutor* speculative = nullptr;  // executor, when it speculates
  std::string draft_note;  // ", draft NAME (...)" for the ready line, or empty
};

BuiltExecutor build_executor(const EngineSetup& setup, const DeviceChoice& device, int64_t extra_kv_blocks,
                             const std::string& acceptance, EngineOutput& out) {
  const std::optional<ModelSpec> draft_spec = draft_model_spec(setup.speculative, setup.model);
  const double tokens = double(out.scheduler.num_gpu_blocks) * out.scheduler.block_size;
  if (!device.cuda)
    check_fits_in_memory(
        draft_spec ? setup.model.name + " with draft " + draft_spec->name : setup.model.name,
        double(setup.model.parameter_count() + (draft_spec ? draft_spec->parameter_count() : 0)) * sizeof(float),
        tokens * (cpu_kv_bytes_per_token(setup.model, setup.precision) +
                  (draft_spec ? cpu_kv_bytes_per_token(*draft_spec, setup.precision) : 0.0)));

  WeightsSource weights = target_weights(setup, device);
  out.weights_source = weights.description();
  std::optional<WeightsSource> draft_source;
  if (draft_spec) draft_source = draft_weights(setup.speculative, *draft_spec, weights, device);
  if (extra_kv_blocks < 0) throw std::invalid_argument("run_engine: extra_kv_blocks must be >= 0");
  auto model = make_decoder(std::move(weights), device, out.scheduler.num_gpu_blocks + extra_kv_blocks,
                            out.scheduler.block_size, setup.threads, setup.precision);
  out.device = model->device();
  out.weight_bytes = model->weight_bytes();
  out.kv_cache_bytes = model->kv_cache_bytes();
  WarmUpSettings warm_up_settings = setup.warm_up;
  warm_up_settings.prefill_tokens = std::min(warm_up_settings.prefill_tokens, out.scheduler.max_num_batched_tokens);
  warm_up_settings.max_batched_tokens = out.scheduler.max_num_batched_tokens;
  // A verification pass samples k + 1 rows per sequence.
  warm_up_settings.max_sample_rows =
      std::min(out.scheduler.max_num_batched_tokens,
               out.scheduler.max_num_seqs * (1 + std::max(0, out.scheduler.num_speculative_tokens)));
  out.warm_up = warm_up(*model, warm_up_settings);

  BuiltExecutor built;
  if (!draft_source) {
    built.executor = std::make_unique<DecoderExecutor>(std::move(model), setup.decoding);
    return built;
  }
  out.draft_weights_source = draft_source->description();
  if (draft_source->layers_of)
    out.draft_weights_source =
        fmt::format("the first {} layers of {}", setup.speculative.self_draft_layers, out.weights_source);
  // Same blocks as the target: the draft's cache is addressed by its block ids.
  auto draft = make_decoder(std::move(*draft_source), device, out.scheduler.num_gpu_blocks, out.scheduler.block_size,
                            setup.threads, setup.precision);
  out.draft_warm_up = warm_up(*draft, warm_up_settings);
  out.draft_weight_bytes = draft->weight_bytes();
  out.draft_kv_cache_bytes = draft->kv_cache_bytes();
  out.kv_cache_bytes += out.draft_kv_cache_bytes;
  built.draft_note = fmt::format(", draft {} ({:.0f} MB of weights, {}; {})", draft->spec().name,
                                 out.draft_weight_bytes / 1e6, out.draft_weights_source, acceptance);
  SpeculativeExecutorOptions spec_options;
  spec_options.decoding = setup.decoding;
  spec_options.num_speculative_tokens = out.scheduler.num_speculative_tokens;
  spec_options.acceptance_rate = setup.speculative.acceptance_rate;
  auto executor = std::make_unique<SpeculativeExecutor>(std::move(model), std::move(draft), spec_options);
  built.speculative = executor.get();
  built.executor = std::move(executor);
  return built;
}

}  // namespace

EngineOutput run_engine(const EngineSetup& setup, const Workload& workload, const EngineRunOptions& options) {
  const DeviceChoice device = parse_device(setup.device);
  require_device(device);
  setup.model.validate(setup.model.name);
  setup.precision.on(device);  // refuses what the device's decoder does not build

  EngineOutput out;
  out.scheduler = engine_scheduler_config(setup);
  BuiltExecutor built = build_executor(
      setup, device, options.extra_kv_blocks,
      acceptance_mode(setup.speculative, setup.decoding.sampling.temperature) + " acceptance", out);
  Executor& served = *built.executor;
  if (options.on_ready)
    options.on_ready(fmt::format("{} on {}: {:.0f} MB of weights ({}){}, {:.0f} MB of KV cache ({} blocks); {}", setup.model.name,
                         out.device, out.weight_bytes / 1e6, out.weights_source, built.draft_note,
                         out.kv_cache_bytes / 1e6, out.scheduler.num_gpu_blocks,
                         out.warm_up.prefill_tokens > 0
                             ? fmt::format("warmed up: a {}-token prefill and {} decode steps, {:.2f} s",
                                           out.warm_up.prefill_tokens, out.warm_up.decode_steps,
                                           out.warm_up.seconds + out.draft_warm_up.seconds)
                             : std::string("no warm-up")));

  if (options.before_run) options.before_run(served);
  Scheduler scheduler(out.scheduler);
  std::unique_ptr<Clock> clock = options.make_clock ? options.make_clock() : std::make_unique<WallClock>();
  LoopOptions loop;
  loop.progress = options.progress;
  loop.observers = options.observers;
  out.records = run_serving_loop(scheduler, served, *clock, workload, loop);
  if (options.after_run) options.after_run(served);
  out.summary = summarize_run(out.records, setup.slo);
  if (built.speculative) out.speculative = *built.speculative->speculative_stats();
  return out;
}

ServedDecoder build_served_decoder(const EngineSetup& setup) {
  const DeviceChoice device = parse_device(setup.device);
  require_device(device);
  setup.model.validate(setup.model.name);
  setup.precision.on(device);
  ServedDecoder out;
  out.scheduler = engine_scheduler_config(setup);
  EngineOutput& d = out.description;
  d.scheduler = out.scheduler;
  // Each request samples at its own temperature, which decides its rule.
  BuiltExecutor built = build_executor(setup, device, 0,
                                       setup.speculative.acceptance_rate
                                           ? "controlled acceptance"
                                           : "exact acceptance at temperature 0, rejection sampling above",
                                       d);
  out.ready_line = fmt::format("{} on {}: {:.0f} MB of weights ({}){}, {:.0f} MB of KV cache ({} blocks of {} tokens)",
                               setup.model.name, d.device, d.weight_bytes / 1e6, d.weights_source, built.draft_note,
                               d.kv_cache_bytes / 1e6, out.scheduler.num_gpu_blocks, out.scheduler.block_size);
  out.executor = std::move(built.executor);
  return out;
}

nlohmann::json engine_setup_to_json(const EngineSetup& setup, const EngineOutput& out) {
  nlohmann::json j;
  j["model"] = model_to_json(setup.model);
  const DeviceChoice device = parse_device(setup.device);
  j["device"] = {{"kind", device.kind()}, {"name", device.name()}, {"description", out.device}};
  if (!device.cuda) j["device"]["threads"] = setup.threads;
  j["weights"] = {{"source", out.weights_source}, {"bytes", out.weight_bytes}};
  const DecoderPrecision precision = setup.precision.on(device);
  j["precision"] = precision.quantization.to_json();
  j["precision"]["dtype"] = precision.dtype;
  j["sampling"] = {{"temperature", setup.decoding.sampling.temperature},
                   {"top_p", setup.decoding.sampling.top_p},
                   {"honor_eos", setup.decoding.honor_eos}};
  j["scheduler"] = scheduler_to_json(out.scheduler, setup.scheduler.gpu_memory_utilization);
  j["scheduler"]["kv_cache_bytes"] = out.kv_cache_bytes;
  j["workload"] = workload_to_json(setup.workload);
  j["executor"] = setup.scheduler.num_speculative_tokens > 0 ? "speculative decoder" : "decoder";
  if (setup.scheduler.num_speculative_tokens > 0)
    j["speculative"] = speculative_setup_to_json(setup.speculative, out.scheduler, setup.model,
                                                 setup.decoding.sampling.temperature, out.draft_weights_source,
                                                 out.draft_weight_bytes);
  j["clock"] = "wall";
  j["warm_up"] = out.warm_up.to_json();
  if (setup.scheduler.num_speculative_tokens > 0) j["draft_warm_up"] = out.draft_warm_up.to_json();
  j["seed"] = setup.workload.seed;
  return j;
}

}  // namespace servesim
