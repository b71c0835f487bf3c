// The calibration on a CUDA device: the CUDA decoder's own kernels (the
// launchers of kernels/cuda/cuda_kernels.h, cuBLAS through cuda::Gemm, the
// steps of cuda::Backend) timed with CUDA events, into the same profile
// tables as the CPU calibration (calib/calibrate.h says what each holds).
// Plain C++ can include this header; the definition is compiled only where
// the CUDA backend is, in its module (kernels/cuda_plugin/).
//
// Timing (calib/cuda_timer.h):
//   cold  - the GEMMs, both attentions and lm_head: before every launch the
//           L2 cache is flushed (cudaMemsetAsync over twice its size, outside
//           the timed region) and CUDA events bracket that single launch, so
//           weights and KV come from HBM as in a forward pass that streams
//           the whole model between two uses of a layer;
//   warm  - elementwise and sampling: events around a CUDA graph of n
//           back-to-back launches (n sized to last >= min_time), the decoder's
//           own graph replay, per launch = elapsed / n.
//   Each benchmark: a warm-up, then `repetitions` repetitions (0: 5; quick:
//   3) of at least min_time_s each (0: 5 ms; quick: 1 ms); its median.
// Ceilings in the same run:
//   stream_copy_bytes_per_s  device-to-device cudaMemcpyAsync of a buffer of
//       max(8 x L2, 64 MiB) (stream_array_bytes overrides), bytes read +
//       written / time;
//   stream_triad_bytes_per_s cuBLAS saxpy y = a x + y on two fp32 arrays of
//       that size: STREAM triad's traffic (two reads and a write per element);
//   gemm_flops_per_s         cuBLAS bf16 GEMM n^3 through cuda::Gemm, n =
//       8192 (quick 4096; gemm_ceiling_size overrides).
// iteration_overhead_s: a whole-model 1-token decode at the smallest decode
// context through the real CUDA decoder (make_cuda_decoder_random +
// DecoderExecutor: staging, a CUDA-graph replay, token selection, sync),
// minus the tables' prediction for it, clamped at 0. gemm_factor: whole-
// model prefills of 32 and 128 (full: also 512) tokens, as on the CPU.
// decode_step_factor: whole-model decode steps at every batch the decoder
// pads a decode step to (1, 2, 4, then multiples of 8: decode_padding, the
// rule the profile records) up to the bucket of min(max_num_seqs, 256),
// around context 256 (calibration::DecodeSteps), graph-replayed as served,
// over what the rest of the profile predicts for them. No anchor probes
// (calib/anchor.h; a GPU keeps its speed).
// The raw measurements (every repetition's seconds) go to
// options.raw_benchmarks_path as JSON: {"context": {...}, "benchmarks":
// [{"name", "method", "launches_per_repetition", "repetitions_s",
// "median_s", "flops_per_launch", "bytes_per_launch"}, ...]}.
#pragma once

#include <functional>
#include <string>

#include "calib/calibrate.h"
#include "sim/cost/profile.h"

namespace servesim {

// Progress: a setup line, "[k/11] family: ..." for the 11 families
// (ceilings, the four GEMMs, elementwise, the two attentions, lm_head,
// sampling, iteration overhead with the in-situ prefills), a closing line.
// InputError for bad options, a device that cannot be used
// (require_device), an unwritable raw_benchmarks_path, or a model whose bf16
// weights and calibration buffers do not fit in the GPU's free memory
// (cudaMemGetInfo, checked before each phase allocates).
DeviceProfile calibrate_cuda(const CalibrationOptions& options,
                             std::function<void(const std::string&)> progress = {});

}  // namespace servesim
