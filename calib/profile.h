// A device profile: what the calibration microbenchmarks measured for one
// model shape on one device, and the file that carries it (JSON).
//
// Every table holds seconds for ONE layer (or one iteration, for the LM head,
// sampling and overhead), medians of repeated runs of the decoder's own
// kernels. The ProfileModel executor composes iteration times from them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/anchor.h"
#include "calib/placement_ratios.h"
#include "sim/model_spec.h"

namespace servesim {

// Time of an operator against one size (token count, rows, ...), on a grid.
struct Curve {
  std::vector<double> x;        // ascending, > 0
  std::vector<double> seconds;  // same length, > 0
};

// A 2-D grid of measurements: seconds[i][j] at (x[i], y[j]).
struct Grid2D {
  std::vector<double> x, y;
  std::vector<std::vector<double>> seconds;
};

struct DeviceProfile {
  static constexpr const char* kFormat = "servesim-profile/1";

  // Identity.
  std::string device_kind;         // "cpu" | "cuda"
  std::string device_description;  // "AMD EPYC ... (2 threads)"
  int threads = 0;
  std::string dtype = "fp32";      // what the kernels computed in
  int32_t block_size = 16;         // KV block size the attention was timed with
  ModelSpec model;                 // the shape the kernels were timed for (name kept for humans)

  // Per layer, against the batch's token count M.
  Curve gemm_qkv, gemm_o, gemm_gate_up, gemm_down;
  Curve elementwise;  // two RMSNorms, rotary + KV write, SwiGLU, residual adds
  // Per iteration, against the sampling rows S: final norm + LM head GEMM + sampling.
  Curve lm_head;
  Curve sampling;
  // Per layer: one sequence's prefill chunk, x = query tokens, y = cached tokens.
  Grid2D prefill_attention;
  // Per layer: a decode batch, x = sequences, y = context length of each.
  Grid2D decode_attention;
  // Host-side cost of an iteration (layout, launches, bookkeeping): a minimal
  // plan's measured time minus its kernels' predicted time.
  double iteration_overhead_s = 0;
  // In-situ factor of the token-proportional work (GEMMs and elementwise)
  // against the iteration's token count T: a whole-model prefill of T
  // tokens through the real executor, measured, against the tables'
  // prediction (calib/profile_model.h). x = T (ascending, > 0), factor > 0
  // at each; empty in profiles from before it was measured.
  struct InSitu {
    std::vector<double> x, factor;
  } gemm_in_situ;
  // In-situ factor of a whole decode step (every sequence one new token and
  // sampling it) against the number of sequences B: the step measured
  // through the real executor over what the tables (with gemm_in_situ and
  // the overhead) predict for it. The CUDA decoder replays such steps from
  // CUDA graphs, whose kernels run back to back with none of the launch and
  // ramp time each kernel pays when timed alone (an H200's llama-3.1-8b
  // 1-sequence step: 4.87 ms against 5.98 ms of kernels); on the 2-core
  // VM the CPU tables alone put steps of 2-8 sequences 4-9% high. x = B
  // (ascending); empty: factor 1 (older profiles).
  InSitu decode_in_situ;

  // Ceilings measured in the same run.
  double stream_copy_bytes_per_s = 0;
  double stream_triad_bytes_per_s = 0;
  double gemm_flops_per_s = 0;
  // The device's state when the tables were measured (calib/anchor.h), for
  // re-anchoring them on a later run; absent in older profiles.
  std::optional<AnchorProbe> anchor;
  // Whole-model iterations with the threads in the other placement against
  // the tables' (calib/placement_ratios.h); absent when the calibration saw
  // one placement only, or did not look (quick, one thread, cuda).
  std::optional<PlacementRatios> placement_ratios;

  // Provenance: date, commit, compiler, library versions, settings (quick?).
  nlohmann::json metadata = nlohmann::json::object();
  std::string raw_benchmarks_file;  // Google Benchmark JSON beside the profile

  // Throws InputError naming the file and field for a malformed profile.
  static DeviceProfile load(const std::string& path);
  void save(const std::string& path) const;
  nlohmann::json to_json() const;
  static DeviceProfile from_json(const nlohmann::json& j, const std::string& source);

  // True when `m` has the same shape (d, I, L, H, Hkv, dh, V, tied, bias) as
  // the profiled model; require_matches throws InputError listing the
  // differing fields, naming the profile file.
  bool matches(const ModelSpec& m) const;
  void require_matches(const ModelSpec& m, const std::string& source) const;

  // How many of the calibration's anchor probes saw each placement of the
  // threads (metadata.anchor_probes.placement_counts); nullopt when the
  // calibration did not record them.
  std::optional<PlacementCounts> calibration_placement_counts() const;
};

}  // namespace servesim
