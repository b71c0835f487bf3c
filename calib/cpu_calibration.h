// The CPU calibration's parts (calib/calibrate.h says what each table
// holds): one file per benchmark family (cpu_family_*.cpp), the whole-model
// timings (cpu_whole_model.cpp), and what they share (cpu_bench_support.cpp).
// calibrate() (calibrate.cpp) runs them in order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "calib/calibrate.h"
#include "calib/microbench_runner.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/decoder/batch_layout.h"
#include "sim/cost/profile.h"

namespace servesim::cpu_calibration {

// ---------------------------------------------------------------- support

// One benchmark: `make()` builds its data on the first run (so a family
// holds only its own) and returns the step one iteration performs; the step
// gets the iteration's index to rotate through copies. Counters report
// FLOP/s and bytes/s where given (> 0), per call.
using Step = std::function<void(int64_t)>;
void add_benchmark(MicrobenchSession& session, const std::string& name, std::function<Step()> make,
                   double flops = 0, double bytes = 0);

// p[0, n) uniform on [-scale, scale) from `seed` (SplitMix64 of the index).
void fill_noise(float* p, size_t n, uint64_t seed, float scale);
cpu::Matrix noise(int64_t rows, int64_t cols, uint64_t seed);

// `copies` weight matrices [rows, cols], uniform with variance 1 / cols (as
// random_weights scales a projection), each in its own memory, stored as
// `storage`.
std::vector<cpu::WeightMatrix> weight_copies(int copies, int64_t rows, int64_t cols, uint64_t seed,
                                             cpu::Storage storage);

// The copies of a cell whose one copy touches `bytes`: enough to exceed
// the rotation bytes, at most `cap`.
int copies_for(double bytes, double rotation_bytes, int cap);

// A packed batch and the block tables its slices point into.
struct LayoutCopy {
  std::vector<std::vector<int32_t>> tables;
  BatchLayout layout;
};
// `copies` layouts of `sequences` sequences, each with `cached` tokens in
// the cache and `query` new ones, every sequence of every copy in its own
// blocks, in a shuffled order (a fixed seed): a served sequence's blocks lie
// wherever the block manager found free ones, not one after another.
std::vector<LayoutCopy> make_layouts(int copies, int64_t sequences, int64_t cached, int64_t query,
                                     int32_t block_size);
// Blocks make_layouts uses.
int64_t layout_blocks(int copies, int64_t sequences, int64_t cached, int64_t query, int32_t block_size);

// The backend of one layer of the model (heads, rotary, norms, attention)
// with its RMSNorm weights and a KV cache (stored as `precision` says) that
// holds every attention cell's copies. The projections and the LM head get
// their own weight copies, family by family.
struct LayerKernels {
  ModelSpec spec;
  cpu::Backend be;
  cpu::Weights norms;  // layer 0's two RMSNorm vectors, the final norm
  cpu::KvCache kv;
  LayerKernels(const ModelSpec& model, int64_t kv_blocks, int32_t block_size, uint64_t seed,
               const cpu::Precision& precision);
};

// One attention benchmark cell (one layer): `sequences` sequences of `query`
// new tokens after `cached` ones, their q/k/v filled with noise from `seed`,
// rotating through `copies` layouts so K and V are read cold.
std::function<Step()> attention_cell(LayerKernels& k, int copies, int64_t sequences, int64_t cached, int64_t query,
                                     int64_t qkv_out, int32_t block_size, uint64_t seed);

// Seconds of one table, in grid order.
std::vector<double> medians(const std::vector<MicrobenchResult>& r, size_t first, size_t count);

// ---------------------------------------------------------------- families

// What every family reads: the options, the grids, the session it registers
// its benchmarks in, and the rules for how many copies of a weight matrix or
// an attention cell rotate so that each call meets memory as a forward pass
// leaves it.
struct FamilyContext {
  const CalibrationOptions& options;
  const CalibrationGrids& grids;
  MicrobenchSession& session;
  DeviceProfile& profile;
  // Starts a family: the calibration's moment, then a progress line.
  std::function<void(const std::string& family, const std::string& what)> announce;
  // Copies of a weight matrix of `bytes`.
  std::function<int(double bytes)> weight_copies_of;
  // Copies of a prefill cell (q, c) and of a decode cell (b, context).
  std::function<int(int64_t q, int64_t c)> prefill_copies;
  std::function<int(int64_t b, int64_t context)> decode_copies;
  double kv_bytes_per_token_layer = 0;  // K and V as stored
  cpu::Precision storage;               // what the kernels are timed with
};

// Each fills its tables of ctx.profile.
void measure_ceilings(FamilyContext& ctx, size_t stream_bytes, int64_t gemm_n);
void measure_projections(FamilyContext& ctx, LayerKernels& kernels);
void measure_elementwise(FamilyContext& ctx, LayerKernels& kernels);
void measure_prefill_attention(FamilyContext& ctx, LayerKernels& kernels);
void measure_decode_attention(FamilyContext& ctx, LayerKernels& kernels);
// Returns the LM head's copies (for the provenance).
int measure_lm_head(FamilyContext& ctx, LayerKernels& kernels);
void measure_sampling(FamilyContext& ctx);

// ---------------------------------------------------------------- whole model

// The whole model's decoder, timed at every moment of the calibration
// (before each family, and at the end): its 1-token decode at the smallest
// decode context and, in full mode, whole-model prefills of the
// gemm_factor_lengths and served-like decode steps of 1 .. 32 sequences
// (calibration::DecodeSteps). Their medians over the moments set the
// iteration overhead and the whole-model factors (quick mode times the
// prefills and steps once, at the end).
class WholeModelTimings {
 public:
  WholeModelTimings(const CalibrationOptions& options, const CalibrationGrids& grids, int threads);
  // The decoder's weights and KV blocks, and the decode steps' KV (for the
  // memory check before anything is allocated).
  static double decoder_bytes(const CalibrationOptions& options);
  static double decode_steps_kv_bytes(const CalibrationOptions& options);

  void at_moment();
  // The iteration-overhead family: the 1-token decode through Google
  // Benchmark (kept in the provenance beside the moments' median).
  double benchmark_decode(MicrobenchSession& session);
  // Sets p's iteration_overhead_s, gemm_factor and decode_step_factor (and
  // their metadata) from the moments `keeps` accepts; p's tables must be set.
  void finish(DeviceProfile& p, const std::function<bool(size_t moment)>& keeps,
              const std::function<void(const std::string&)>& say, double benchmark_decode_s);
  // Frees the decoder.
  void release();
  int64_t context() const { return context_; }

 private:
  struct State;
  std::shared_ptr<State> state_;
  int64_t context_ = 0;
};

}  // namespace servesim::cpu_calibration
