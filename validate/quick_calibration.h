// A quick calibration for a validation given no profile: the run's device,
// model and limits, coarse grids (calib/calibrate.h).
#pragma once

#include <functional>
#include <string>

#include "calib/calibrate.h"
#include "engine/decoder_run.h"
#include "sim/cost/profile.h"
#include "sim/workload.h"

namespace servesim {

// The options of a quick calibration for `setup`: same device, model,
// threads, block size, sampling and max_num_seqs; the GEMM grid up to the
// run's token budget (on cuda at most kCudaMaxBatchedTokens) and the
// attention grids up to the longest request of `workload` (capped at
// max_model_len).
CalibrationOptions quick_calibration_options(const EngineSetup& setup, const Workload& workload);
// calibrate(quick_calibration_options(setup, workload), progress), with the
// drift probes of calibrate --host-drift when `host_drift`.
DeviceProfile quick_calibration(const EngineSetup& setup, const Workload& workload,
                                std::function<void(const std::string&)> progress = {}, bool host_drift = false);

}  // namespace servesim
