// Calibration: times the decoder's own kernels on this device with Google
// Benchmark (on the CPU) or CUDA events (on a GPU, calib/calibrate_cuda.h)
// and turns the medians into a DeviceProfile.
//
// The CPU calibration is described below; the CUDA one fills the same
// tables with the CUDA decoder's kernels (bf16), the same grids (with the
// differences stated at calibration_grids), and flushes the GPU's L2 cache
// before each timed launch instead of rotating through copies.
//
// What each table holds (seconds; medians over repetitions of the wall time
// per call, after a warm-up):
//   gemm_qkv/o/gate_up/down(M)  one layer's projection on M tokens: the
//       decoder's cpu::matmul on the model's weight shapes (qkv with its bias;
//       o and down accumulate into the residual, as the decoder does them).
//   elementwise(M)   one layer's two RMSNorms, rotary + KV-cache write and
//       SwiGLU on M tokens of one sequence (the residual adds happen inside
//       the o and down GEMMs). The per-iteration rotary tables and embedding
//       gather are left to iteration_overhead_s.
//   prefill_attention  one layer's attention for one sequence's chunk:
//       x = query tokens q, y = cached tokens c + 1 (prefill_grid_y in
//       calib/profile_model.h), so a first chunk (c = 0) sits at y = 1.
//       Every cell is measured, also those with c + q beyond max_context.
//   decode_attention  one layer's attention for b sequences of one query
//       token each: x = b, y = context length L = cached tokens c + 1
//       (decode_grid_y), each sequence with its own KV blocks.
//   lm_head(S)       final RMSNorm of S rows + the LM-head GEMM.
//   sampling(S)      copying the [S, V] logits out of the backend and
//       choosing each row's token (options.sampling; greedy by default).
//   iteration_overhead_s  a 1-token decode iteration at the smallest decode
//       context through DecoderExecutor, minus its kernels as the tables
//       predict them, clamped at 0.
// Each projection's weights, the LM head and each attention cell's K and V
// rotate through copies that together hold 4x the core's last-level cache
// (or, for a model smaller than that, as much as a forward pass streams
// between two uses of one layer), so a kernel meets memory as it does inside
// a whole forward pass and not a cache that the previous call left warm.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/cost/profile.h"
#include "kernels/decoder/decoder_precision.h"
#include "kernels/decoder/sampler.h"
#include "sim/model_spec.h"

namespace servesim {

// The largest token count M a CUDA calibration times (--max-num-batched-tokens).
inline constexpr int32_t kCudaMaxBatchedTokens = 16384;
// The largest decode attention cell's K and V, one layer (the GPU's memory
// is larger, and flushing its L2 needs no copies of the cell).
inline constexpr double kCpuDecodeKvBudgetBytes = 2.0 * double(int64_t(1) << 30);
inline constexpr double kCudaDecodeKvBudgetBytes = 8.0 * double(int64_t(1) << 30);

struct CalibrationOptions {
  std::string device = "cpu";            // cpu, cuda or cuda:N (parse_device)
  ModelSpec model;
  int threads = 0;                       // 0: every core (cpu only)
  bool quick = false;                    // coarse grids, few repeats: tests and first looks
  int32_t block_size = 16;               // KV block size to time attention with
  int32_t max_batched_tokens = 2048;     // largest token count M on the GEMM grid
  int64_t max_context = 0;               // largest context on the attention grids (0: model's max)
  uint64_t weights_seed = 0;             // random weights of the model's shape
  // The weights' and KV cache's storage the kernels are timed with (cpu:
  // fp32 or bf16, w8a16, an int8 KV cache; cuda: bf16 only). The profile
  // records it, and a run or simulation of another precision is refused.
  DecoderPrecision precision;
  std::string raw_benchmarks_path;       // raw timings as JSON ("" = not kept; cpu: Google Benchmark's)

  // Added with the implementation; the defaults suit every caller.
  int32_t max_num_seqs = 256;            // largest S (lm_head, sampling); caps the decode batch axis
  SamplingParams sampling;               // what `sampling` times (greedy by default)
  // cpu: each STREAM array (0: 4x the LLC; quick: at most 256 MiB);
  // cuda: the copy and saxpy buffers (0: max(8x L2, 64 MiB)).
  int64_t stream_array_bytes = 0;
  int64_t gemm_ceiling_size = 0;         // n of the n^3 GEMM ceiling (0: cpu 2048, quick 1024; cuda 8192, quick 4096)
  int repetitions = 0;                   // timed runs per benchmark (0: 5; cuda quick: 3)
  double min_time_s = 0;                 // least time of each run (0: cpu 0.03 s, quick 0.01 s; cuda 5 ms, quick 1 ms)
};

// The longest context the options calibrate: max_context, else the model's
// max_position_embeddings.
int64_t max_context_of(const CalibrationOptions& options);

// What a caller adds to a CPU calibration (validate/host_drift/ does, with
// `calibrate --host-drift`); every part optional.
struct CalibrationHooks {
  // At every moment of the calibration: before each benchmark family and
  // once at the end (moments 0, 1, ...).
  std::function<void()> at_moment;
  // Whether the whole-model timings taken at `moment` set the profile's
  // iteration overhead and whole-model factors (every moment's when unset).
  std::function<bool(size_t moment)> keeps_moment;
  // Once the profile is complete, its decoders freed: may add to it.
  std::function<void(DeviceProfile& profile)> finish;
};

// The sizes each table is measured at (ascending), from the options.
//   tokens M (GEMMs): full every M from 1 to 64 on the CPU, then 128, 256,
//       ..., max_batched_tokens; on CUDA the edges of cuBLASLt's algorithm
//       buckets (kernels/decoder/gemm_buckets.h): 1, 2, 4, 8, 16, ..., 256
//       by 8, then each wider bucket's bottom and top, 257, 320, 321, 384,
//       385, 448, ..., max_batched_tokens; quick every M from 1 to 32, then
//       64, 256, max_batched_tokens on the CPU, 1, 4, 16, 64, 256, then the
//       buckets' edges as in full, to max_batched_tokens, on CUDA (values
//       above it dropped).
//   elementwise M: on the CPU full 1, 2, 3, 4, 6, 8, 12, ..., 48, 64, 128,
//       ..., max_batched_tokens and quick 1, 2, 4, 8, 16, 64, 256,
//       max_batched_tokens (its cost has no kernel change to follow); on
//       CUDA full 1, 2, 4, ..., max_batched_tokens, quick 1, 4, 16, 64, 256,
//       max_batched_tokens.
//   prefill q: full 1, 2, 4, ..., max_batched_tokens; quick 16, 128, 512
//       (capped at max_batched_tokens).
//   prefill c + 1: full 1, 16, 32, 64, ..., max_context; quick 1, 256,
//       max_context.
//   decode b: full 1, 2, 4, ..., 64; quick 1, 8, 32 (both capped at
//       max_num_seqs).
//   decode L: full 16, 32, ..., max_context; quick 16, a power of two near
//       sqrt(16 max_context), max_context. The longest L is lowered so that
//       the largest cell's K and V (one layer) fit in 2 GiB.
//   LM head rows S: full every S from 1 to 64 on the CPU, then 128, ...,
//       max_num_seqs (CUDA: the algorithm buckets' edges, as the GEMMs);
//       quick every S from 1 to 32, then 64, max_num_seqs on the CPU, 1, 8,
//       64, max_num_seqs on CUDA (S never exceeds max_batched_tokens).
//   sampling rows S: on the CPU full 1, 2, 3, 4, 6, 8, 12, ..., 48, 64,
//       128, ..., max_num_seqs and quick 1, 2, 4, 8, 16, 64, max_num_seqs;
//       on CUDA full 1, 2, 4, ..., max_num_seqs, quick as the LM head.
// max_context = 0 means the model's max_position_embeddings. Each axis ends
// with its maximum even where that is not a power of two.
// On cuda: max_batched_tokens is at most kCudaMaxBatchedTokens; decode b is
// full 1, 2, 4, ..., max_num_seqs and quick 1, 8, 32, max_num_seqs (a GPU
// batches every running sequence); K and V are bf16 and the largest decode
// cell's may take 8 GiB.
struct CalibrationGrids {
  std::vector<int64_t> tokens;              // the GEMMs
  std::vector<int64_t> elementwise_tokens;
  std::vector<int64_t> prefill_query;
  std::vector<int64_t> prefill_cached;      // c; the profile stores c + 1
  std::vector<int64_t> decode_batch;
  std::vector<int64_t> decode_context;      // L = c + 1
  std::vector<int64_t> lm_head_rows;
  std::vector<int64_t> sampling_rows;
};

// Throws InputError naming the flag for an out-of-range option (a device
// other than cpu, cuda or cuda:N names --device). Whether a CUDA device is
// there is not checked here (calibrate() does).
CalibrationGrids calibration_grids(const CalibrationOptions& options);

// Runs every microbenchmark (warm-up, repeats, medians) and the ceilings
// (STREAM copy/triad on arrays >= 4x the last-level cache, a large GEMM).
// `progress` receives one line per benchmark family (12: ceilings, the four
// GEMMs, elementwise, the two attentions, lm_head, sampling, iteration
// overhead, the whole-model timings; each starts "[k/12] "), a setup line,
// a closing line, and a warning when other processes took over 5% of the
// CPUs meanwhile (the share is kept in metadata.machine_load).
// Before every family and at the end (the calibration's 13 moments) it also
// times the whole model's 1-token decode and, in full mode at every other
// moment (0, 2, ..., 12), its prefills and decode steps: their medians over
// the moments set the iteration overhead and the whole-model factors, robust
// to a machine whose speed moves during the calibration. The OpenMP thread count is set
// to options.threads for the run and restored afterwards. InputError for bad
// options, an unwritable raw_benchmarks_path, or a model whose fp32 weights
// would take over 80% of this machine's memory (the CPU decoder could not
// serve it).
// A cuda[:N] device: the options are checked, then require_device (an
// InputError saying why the device cannot be used: no GPU visible, no CUDA
// backend in this build, ...), then calibrate_cuda (calib/calibrate_cuda.h).
DeviceProfile calibrate(const CalibrationOptions& options,
                        std::function<void(const std::string&)> progress = {}, const CalibrationHooks& hooks = {});

}  // namespace servesim
