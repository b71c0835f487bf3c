#include "kernels/decoder/engine.h"

#include <cmath>
#include <unistd.h>

#include <fmt/format.h>

#include "sim/clock.h"
#include "sim/errors.h"

namespace servesim {

int64_t cpu_kv_blocks(const ModelSpec& m, double bytes, int32_t block_size) {
  if (block_size < 1) throw InputError(fmt::format("--block-size must be >= 1 (got {})", block_size));
  const double per_token = 2.0 * double(m.num_hidden_layers * m.num_key_value_heads * m.head_dim) * sizeof(float);
  const double blocks = std::floor(bytes / (per_token * block_size));
  if (!(blocks >= 1))
    throw InputError(fmt::format("--kv-cache-memory {:.0f} bytes holds no {}-token block of {} ({:.0f} bytes each)",
                                 bytes, block_size, m.name, per_token * block_size));
  return int64_t(std::min(blocks, 2147483647.0));
}

namespace {

// Refuses a model that would not fit this machine's memory in fp32.
void check_fits_in_memory(const ModelSpec& m, double kv_bytes) {
  const double weights = double(m.parameter_count()) * sizeof(float);
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (physical > 0 && weights + kv_bytes > 0.8 * physical)
    throw InputError(fmt::format(
        "{} needs {:.1f} GB of fp32 weights plus {:.1f} GB of KV cache on the CPU, more than 80% of "
        "this machine's {:.1f} GB; use a smaller model (tiny-15m, small-110m) or --kv-cache-memory",
        m.name, weights / 1e9, kv_bytes / 1e9, physical / 1e9));
}

}  // namespace

SchedulerConfig engine_scheduler_config(const EngineSetup& setup) {
  SchedulerSettings settings = setup.scheduler;
  if (!settings.num_gpu_blocks)
    settings.num_gpu_blocks = cpu_kv_blocks(setup.model, setup.kv_cache_bytes, settings.block_size);
  // The hardware figures only size the KV cache, which is set above.
  HardwareSpec host{"cpu", "this machine", 1, 1, 1, ""};
  return resolve_scheduler_config(settings, setup.model, host);
}

EngineOutput serve(const EngineSetup& setup, const Workload& workload,
                   std::function<void(const RunProgress&)> progress,
                   std::function<void(const std::string&)> on_ready, const ExecutorWrapper& wrap) {
  if (setup.device != "cpu")
    throw InputError(fmt::format("--device '{}': only 'cpu' is available in this build", setup.device));
  setup.model.validate(setup.model.name);

  EngineOutput out;
  out.scheduler = engine_scheduler_config(setup);
  const double kv_bytes = double(out.scheduler.num_gpu_blocks) * out.scheduler.block_size * 2.0 *
                          double(setup.model.num_hidden_layers * setup.model.num_key_value_heads *
                                 setup.model.head_dim) * sizeof(float);
  check_fits_in_memory(setup.model, kv_bytes);

  HostWeights weights = setup.weights_dir ? load_safetensors_weights(setup.model, *setup.weights_dir)
                                          : random_weights(setup.model, setup.weights_seed);
  out.weights_source = weights.source;
  auto model = make_cpu_decoder(std::move(weights), out.scheduler.num_gpu_blocks,
                                out.scheduler.block_size, CpuDecoderOptions{setup.threads});
  out.device = model->device();
  out.weight_bytes = model->weight_bytes();
  out.kv_cache_bytes = model->kv_cache_bytes();
  DecoderExecutor decoder(std::move(model), setup.decoding);
  std::unique_ptr<Executor> wrapper = wrap ? wrap(decoder) : nullptr;
  Executor& executor = wrapper ? *wrapper : decoder;
  if (on_ready) on_ready(fmt::format("{} on {}: {:.0f} MB of weights ({}), {:.0f} MB of KV cache ({} blocks)",
                                     setup.model.name, out.device, out.weight_bytes / 1e6, out.weights_source,
                                     out.kv_cache_bytes / 1e6, out.scheduler.num_gpu_blocks));

  Scheduler scheduler(out.scheduler);
  WallClock clock;
  Runner runner(scheduler, executor, clock);
  if (progress) runner.on_progress(std::move(progress));
  out.records = runner.run(workload);
  out.summary = summarize_run(out.records, setup.slo);
  return out;
}

nlohmann::json engine_setup_to_json(const EngineSetup& setup, const EngineOutput& out) {
  nlohmann::json j;
  j["model"] = model_to_json(setup.model);
  j["device"] = {{"kind", setup.device}, {"description", out.device}, {"threads", setup.threads}};
  j["weights"] = {{"source", out.weights_source}, {"bytes", out.weight_bytes}};
  j["sampling"] = {{"temperature", setup.decoding.sampling.temperature},
                   {"top_p", setup.decoding.sampling.top_p},
                   {"honor_eos", setup.decoding.honor_eos}};
  j["scheduler"] = scheduler_to_json(out.scheduler, setup.scheduler.gpu_memory_utilization);
  j["scheduler"]["kv_cache_bytes"] = out.kv_cache_bytes;
  j["workload"] = workload_to_json(setup.workload);
  j["executor"] = "decoder";
  j["clock"] = "wall";
  j["seed"] = setup.workload.seed;
  return j;
}

}  // namespace servesim
