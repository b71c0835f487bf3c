// A device profile: what the calibration microbenchmarks measured for one
// model shape on one device, and the file that carries it (JSON).
//
// Every table holds seconds for ONE layer (or one iteration, for the LM head,
// sampling and overhead), medians of repeated runs of the decoder's own
// kernels. The ProfileModel (sim/cost/profile_model.h) composes iteration
// times from them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/attention_fit.h"
#include "sim/cost/decode_padding.h"
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
  std::string dtype = "fp32";      // the weights' and KV cache's dtype: fp32 or bf16 (cpu), bf16 (cuda)
  // How the timed kernels stored the linear layers and the KV cache
  // (--quantization, --kv-cache-dtype; JSON "quantization", absent = none
  // and auto): a profile holds the tables of one precision.
  Quantization quantization;
  int32_t block_size = 16;         // KV block size the attention was timed with
  // The model whose kernels were timed (name kept for humans) ...
  ModelSpec model;
  // ... at the shapes of one rank of this TP degree (tensor_parallel_shard
  // of `model`; JSON "tensor_parallel_size", absent = 1).
  int32_t tensor_parallel_size = 1;

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
  // The whole-model factors: how whole forward passes measured through the
  // real executor compare with what the kernel tables predict for them
  // (sim/cost/profile_model.h says how they are applied; JSON keys
  // "gemm_in_situ" and "decode_in_situ"). Empty curves mean factor 1.
  struct FactorCurve {
    std::vector<double> x, factor;  // x ascending and > 0, factor > 0 at each
  };
  // f(T): whole-model prefills of T tokens, their GEMM and elementwise part
  // over the tables'.
  FactorCurve gemm_factor;
  // g(B): whole decode steps of B sequences (each one new token, sampled)
  // over what the tables, f and the overhead predict for them. A GPU that
  // replays such steps from a CUDA graph runs its kernels back to back, with
  // none of the launch and ramp time each pays when timed alone.
  FactorCurve decode_step_factor;
  // How the executor pads such a step before it runs it (JSON
  // "decode_padding"; absent: none). The tables and g are then read at the
  // padded batch (sim/cost/decode_padding.h).
  DecodePadding decode_padding;
  // How the executor launches an iteration's attention (JSON
  // "attention_launches"; sim/cost/profile_model.h costs each rule):
  //   PerChunk ("per_chunk", absent): every prefill chunk on its own, the
  //     other sequences (one new token each, or a speculative verification's
  //     k + 1) together -- the CPU decoder's (its one parallel region over
  //     every sequence costs microseconds against chunks of milliseconds);
  //   TwoLaunches ("two_launches"): every sequence of one new token (decode
  //     steps and one-token prefill chunks) in one launch, every other one
  //     (prefill chunks and speculative verifications) in another -- the
  //     CUDA decoder (kernels/cuda/cuda_backend.cpp, Backend::attention).
  //     The prefill table times one chunk per launch, so S chunks in one
  //     launch pay its fixed cost once, not S times.
  enum class AttentionLaunches { PerChunk, TwoLaunches };
  AttentionLaunches attention_launches = AttentionLaunches::PerChunk;

  // The attention tables' fits (sim/cost/attention_fit.h), as computed when
  // the profile was written; a ProfileModel uses them where they agree with
  // a fit of the tables it holds, and fits the tables itself otherwise.
  std::optional<AttentionFit> prefill_fit, decode_fit;

  // Ceilings measured in the same run.
  double stream_copy_bytes_per_s = 0;
  double stream_triad_bytes_per_s = 0;
  double gemm_flops_per_s = 0;
  // What validate/host_drift/ measured at calibration (the drift probes as
  // "anchor", the placement ratios), kept as the JSON it wrote and read
  // only by it; null when the calibration did not look (the default).
  nlohmann::json anchor, placement_ratios;

  // Provenance: date, commit, compiler, library versions, settings (quick?).
  nlohmann::json metadata = nlohmann::json::object();
  std::string raw_benchmarks_file;  // Google Benchmark JSON beside the profile

  // Whole decode steps whose calibration moments ran further apart than
  // this (slowest moment's median over the fastest's) met the host in two
  // states; the profile predicts one of them (docs/noisy-hosts.md).
  static constexpr double kUnsteadySpread = 1.3;
  // One sentence naming the batch sizes whose whole decode steps ran
  // further apart than kUnsteadySpread between the calibration's moments
  // (metadata.decode_in_situ's "sequences" and "moment_spread", which the
  // CPU calibration records); empty for a steady calibration or a profile
  // without them.
  std::string unsteadiness_warning() const;

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
  // "bf16, w8a16 weights, int8 KV cache".
  std::string precision() const;
};

// The sentence of DeviceProfile::unsteadiness_warning for whole decode
// steps of batches[i] sequences that ran spread[i] apart between the
// calibration's moments, naming those above `limit` beside the smallest
// batch's spread; empty when none is. std::logic_error when the sizes differ.
std::string unsteady_decode_steps_warning(const std::vector<int64_t>& batches, const std::vector<double>& spread,
                                          double limit = DeviceProfile::kUnsteadySpread);

}  // namespace servesim
