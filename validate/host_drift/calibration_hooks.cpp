// calibrate --host-drift (validate/host_drift/host_drift.h).
#include <omp.h>

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/host_weights.h"
#include "validate/host_drift/drift_probes.h"
#include "validate/host_drift/host_drift.h"
#include "validate/host_drift/placement_ratios.h"

namespace servesim {
namespace {

// n of the drift probe's GEMM: a few milliseconds on 2 cores.
constexpr int64_t kDriftProbeGemmSize = 1024;
constexpr double kDefaultPlacementSeconds = 180;

struct CalibrationDrift {
  CalibrationOptions options;
  double placement_seconds = 0;
  std::function<void(const std::string&)> say;
  int threads = 1;
  std::unique_ptr<DriftProber> prober;
  std::vector<DriftProbe> probes;  // one per moment

  void at_moment() {
    if (!prober) {
      const CalibrationGrids grids = calibration_grids(options);
      DriftProbeSettings s;
      s.model = options.model;
      s.threads = threads;
      s.layers = int32_t(options.model.num_hidden_layers);  // the whole model: a decode step as a run makes it
      s.context = grids.decode_context.front();
      s.block_size = options.block_size;
      s.weights_seed = options.weights_seed;
      s.sampling = options.sampling;
      s.gemm_n = kDriftProbeGemmSize;
      s.repetitions = options.quick ? 10 : 20;
      prober = std::make_unique<DriftProber>(s);
    }
    probes.push_back(prober->measure());
  }

  // The moments in the placement most probes saw (all when none dominates):
  // the tables' medians are that placement's too.
  bool keeps(size_t moment) const {
    const Placement dominant = placement_counts(probes).dominant();
    return dominant == Placement::Unknown || (moment < probes.size() && probes[moment].placement() == dominant);
  }

  void finish(DeviceProfile& p) {
    prober.reset();  // its memory goes to the placement ratios' decoder
    const PlacementCounts placements = placement_counts(probes);
    p.anchor = median_probe(probes_in_dominant_placement(probes)).to_json();
    if (placements.near > 0 && placements.far > 0)
      say(fmt::format("warning: the threads' placement changed during the calibration ({} probes near, {} far, {} "
                      "unknown); the drift probe is the median of the {} probes' and the tables mix both speeds",
                      placements.near, placements.far, placements.unknown, to_string(placements.dominant())));
    nlohmann::json& a = p.metadata["anchor_probes"];
    for (const DriftProbe& probe : probes) {
      a["decode_iteration_s"].push_back(probe.decode_iteration_s);
      a["gemm_flops_per_s"].push_back(probe.gemm_flops_per_s);
      a["placement"].push_back(to_string(probe.placement()));
    }
    a["placement_counts"] = {{"near", placements.near}, {"far", placements.far}, {"unknown", placements.unknown}};
    // Each placement's own median (from 2 probes on): what a validation's
    // probe taken in that placement is compared with (the drift gate).
    for (Placement placement : {Placement::Near, Placement::Far}) {
      std::vector<DriftProbe> in_placement;
      for (const DriftProbe& probe : probes)
        if (probe.placement() == placement) in_placement.push_back(probe);
      if (in_placement.size() >= 2) a["by_placement"][to_string(placement)] = median_probe(in_placement).to_json();
    }
    a["meaning"] = "the drift probes (calibrate --host-drift) at every moment of the calibration, each with the "
                   "threads' placement; the profile's anchor is the median of those in the placement most saw, "
                   "and only that placement's moments set the whole-model timings; by_placement: the median in "
                   "each placement that 2 or more probes saw";
    measure_ratios(p, placements);
  }

  void measure_ratios(DeviceProfile& p, const PlacementCounts& placements) {
    p.metadata["placement_ratios"] = nullptr;
    p.metadata["settings"]["placement_seconds"] = placement_seconds;
    if (!(placement_seconds > 0) || threads < 2) return;
    const int32_t bs = options.block_size;
    const int64_t max_context = max_context_of(options);
    PlacementRatioSettings ladder;
    ladder.threads = threads;
    ladder.max_seconds = placement_seconds;
    ladder.context = std::min<int64_t>(256, max_context - 1);
    // The default ladder, within the calibration's limits; a profile's
    // ladders are never empty (PlacementRatios::from_json).
    std::erase_if(ladder.decode_batches, [&](int64_t b) { return b > options.max_num_seqs; });
    std::erase_if(ladder.prefill_tokens,
                  [&](int64_t t) { return t > options.max_batched_tokens || t > max_context; });
    if (ladder.prefill_tokens.empty())
      ladder.prefill_tokens.push_back(std::min<int64_t>(options.max_batched_tokens, max_context));
    const int64_t blocks = std::max(ladder.decode_batches.back() * calibration::ceil_div(ladder.context + 1, bs),
                                    calibration::ceil_div(ladder.prefill_tokens.back(), bs));
    CpuDecoderOptions decoder_options;
    decoder_options.threads = threads;
    DecoderExecutorOptions executor_options;
    executor_options.sampling = options.sampling;
    DecoderExecutor executor(
        make_cpu_decoder(random_weights(options.model, options.weights_seed), blocks, bs, decoder_options),
        executor_options);
    const Placement reference = placements.dominant() == Placement::Unknown ? Placement::Near : placements.dominant();
    say(fmt::format("placement ratios: whole-model decode steps of {} sequences and prefills of {} tokens, each "
                    "with the threads {} and {}, for at most {:.0f} s",
                    calibration::axis_text(ladder.decode_batches), calibration::axis_text(ladder.prefill_tokens),
                    to_string(reference), reference == Placement::Near ? "far" : "near", placement_seconds));
    const std::optional<PlacementRatios> ratios = measure_placement_ratios(executor, bs, reference, ladder, say);
    if (!ratios) {
      say("placement ratios: the threads stayed in one placement (none measured)");
      p.metadata["placement_ratios"] = "the threads stayed in one placement";
      return;
    }
    p.placement_ratios = ratios->to_json();
    std::string line = "placement ratios (other / reference):";
    for (size_t k = 0; k < ratios->decode_batch.size(); ++k)
      line += fmt::format(" decode {} {:.3f};", ratios->decode_batch[k], ratios->decode_ratio[k]);
    for (size_t k = 0; k < ratios->prefill_tokens.size(); ++k)
      line += fmt::format(" prefill {} {:.3f};", ratios->prefill_tokens[k], ratios->prefill_ratio[k]);
    say(line);
  }
};

}  // namespace

CalibrationHooks host_drift_calibration_hooks(const CalibrationOptions& options, double placement_seconds,
                                              std::function<void(const std::string&)> say) {
  auto drift = std::make_shared<CalibrationDrift>();
  drift->options = options;
  drift->placement_seconds =
      placement_seconds >= 0 ? placement_seconds : options.quick ? 0 : kDefaultPlacementSeconds;
  drift->say = [say = std::move(say)](const std::string& line) {
    if (say) say(line);
  };
  drift->threads = options.threads > 0 ? options.threads : omp_get_num_procs();
  CalibrationHooks hooks;
  hooks.at_moment = [drift] { drift->at_moment(); };
  hooks.keeps_moment = [drift](size_t moment) { return drift->keeps(moment); };
  hooks.finish = [drift](DeviceProfile& p) { drift->finish(p); };
  return hooks;
}

}  // namespace servesim
