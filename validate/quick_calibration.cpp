#include "validate/quick_calibration.h"

#include <algorithm>

#include "kernels/decoder/device_choice.h"
#include "validate/host_drift/host_drift.h"

namespace servesim {

CalibrationOptions quick_calibration_options(const EngineSetup& setup, const Workload& workload) {
  const SchedulerConfig config = engine_scheduler_config(setup);
  CalibrationOptions o;
  o.device = setup.device;
  o.model = setup.model;
  o.precision = setup.precision;  // the tables of the kernels the run serves with
  o.threads = setup.threads;
  o.quick = true;
  o.block_size = config.block_size;
  o.max_batched_tokens = config.max_num_batched_tokens;
  // A CUDA calibration times at most kCudaMaxBatchedTokens tokens (without
  // chunking the budget is max_model_len, 131072 for Llama 3.1); larger
  // batches are extrapolated by the cost model's roofline rule.
  if (parse_device(setup.device).cuda) o.max_batched_tokens = std::min(o.max_batched_tokens, kCudaMaxBatchedTokens);
  int64_t longest = 1;
  for (const Request& r : workload.requests)
    longest = std::max<int64_t>(longest, int64_t(r.prompt_tokens) + r.output_tokens);
  o.max_context = std::min<int64_t>(longest, config.max_model_len);
  o.weights_seed = setup.weights_seed;
  o.max_num_seqs = config.max_num_seqs;
  o.sampling = setup.decoding.sampling;
  return o;
}

DeviceProfile quick_calibration(const EngineSetup& setup, const Workload& workload,
                                std::function<void(const std::string&)> progress, bool host_drift) {
  const CalibrationOptions options = quick_calibration_options(setup, workload);
  const CalibrationHooks hooks = host_drift ? host_drift_calibration_hooks(options, -1, progress) : CalibrationHooks{};
  return calibrate(options, std::move(progress), hooks);
}

}  // namespace servesim
