// Pieces both calibrations share -- the CPU one (calib/calibrate.cpp) and
// the CUDA one (calib/calibrate_cuda.cpp): provenance, tables from grids,
// and the whole-model measurements that tie the kernel tables to what an
// iteration really costs (the fixed iteration overhead, the in-situ factor).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/calibrate.h"
#include "sim/cost/profile.h"
#include "sim/executor.h"
#include "sim/iteration_plan.h"

namespace servesim::calibration {

// ---- provenance

// The source commit: git's HEAD of the checkout holding this executable (a
// build folder sits inside it), else of the working directory; "unknown".
std::string git_commit();
std::string utc_now_iso();       // "2026-11-29T10:11:12Z"
std::string compiler_version();  // "GCC 12.2.0"
std::string cpu_model_name();    // /proc/cpuinfo's model name
// os, hostname and cpu of this machine.
nlohmann::json host_identity();

// ceil(a / b) for a >= 0, b > 0: blocks of b that hold a tokens.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- tables

double median(std::vector<double> v);
Curve make_curve(const std::vector<int64_t>& x, std::vector<double> seconds);
nlohmann::json grids_json(const CalibrationGrids& g);
// "1" or "1 .. 2048": an axis in a progress line.
std::string axis_text(const std::vector<int64_t>& v);

// ---- whole-model measurements

// One sequence of `query` new tokens after `cached` ones, sampling its last
// token, in KV blocks first_block, first_block + 1, ...: the plans the
// whole-model measurements run. Not copyable: the plan points into the
// block table.
class OneSequencePlan {
 public:
  OneSequencePlan(int64_t request_id, int64_t query, int64_t cached, bool prefill, int32_t block_size,
                  int32_t first_block = 0);
  OneSequencePlan(const OneSequencePlan&) = delete;
  OneSequencePlan& operator=(const OneSequencePlan&) = delete;
  const IterationPlan& plan() const { return plan_; }
  int64_t blocks() const { return int64_t(table_.size()); }

 private:
  std::vector<int32_t> table_;
  IterationPlan plan_;
};

// Decode steps as a server runs them: `sequences` sequences (request ids
// 1, 2, ...), sequence i after c_i cached tokens with the c_i spread evenly
// over [c / 2, 3 c / 2] (c for one sequence), each decoding one token and
// sampling it; advance() moves every sequence one token on, so successive
// steps write new KV slots and attend over one more token, as served steps
// do. Each sequence owns enough KV blocks (first_block, first_block + 1,
// ...) for `steps` steps; request ids first_id, first_id + 1, ... (a probe
// during a run keeps off the served requests' blocks and ids).
// Not copyable: the plan points into the block tables.
class DecodeSteps {
 public:
  DecodeSteps(int64_t sequences, int64_t cached, int64_t steps, int32_t block_size, int32_t first_block = 0,
              int64_t first_id = 1);
  DecodeSteps(const DecodeSteps&) = delete;
  DecodeSteps& operator=(const DecodeSteps&) = delete;
  const IterationPlan& plan() const { return plan_; }
  void advance();
  // KV blocks the steps need.
  static int64_t blocks(int64_t sequences, int64_t cached, int64_t steps, int32_t block_size);
  static int64_t cached_of(int64_t i, int64_t sequences, int64_t cached);  // c_i

 private:
  std::vector<std::vector<int32_t>> tables_;
  IterationPlan plan_;
};

// Stores in `p` the attention fits its tables give (DeviceProfile::
// prefill_fit, decode_fit), so that every later use of the profile costs
// with the fits it was written with.
void store_attention_fits(DeviceProfile& p);

// What the tables of `p` predict for `plan`, without the fixed iteration
// overhead and without an in-situ factor (calib/profile_model.h).
double tables_seconds(const DeviceProfile& p, const IterationPlan& plan);

// The median of IterationResult::duration_s over `repetitions` executions
// of `plan` after `warmup` untimed ones.
double median_execute_s(Executor& executor, const IterationPlan& plan, int warmup, int repetitions);

// The prefill lengths T of the in-situ factor: 32 and 128 (quick) or 32,
// 128 and 512 (full), those within both max_batched_tokens and the
// context limit.
std::vector<int64_t> gemm_factor_lengths(const CalibrationOptions& options, int64_t max_context);

// Fills p.gemm_factor: a whole-model prefill of each of `lengths` tokens
// on `executor` (1 warm-up, then `repetitions` timed; the median), against
// what p's tables predict for it (with p's iteration overhead):
//   f(T) = (measured - attention - LM head - overhead) / (GEMMs + elementwise),
// floored at 0.1. `say` gets one line per length. The executor must serve
// the profiled model with at least ceil(max(lengths) / block_size) KV blocks.
// With lead_steps > 0 each prefill follows that many decode steps around
// `lead_cached` tokens (time_prefills), and the executor must hold
// prefill_blocks_with_lead(max(lengths), ..) blocks.
void measure_gemm_factor(DeviceProfile& p, Executor& executor, const std::vector<int64_t>& lengths,
                     int32_t block_size, int repetitions, const std::function<void(const std::string&)>& say,
                     int lead_steps = 0, int64_t lead_cached = 0);
// Untimed 1-sequence decode steps before each timed whole-model prefill
// (time_prefills) on the CPU: a served prefill follows decode steps, and one
// that does runs slower than one after another prefill (docs/calibration.md),
// so the whole-model prefills are timed as served ones run.
constexpr int kPrefillLeadSteps = 2;

// The seconds of `timed` prefills of `tokens` tokens (request first_id,
// KV blocks first_block ..) on `executor` after `warm_up` untimed ones, each
// after `lead_steps` untimed DecodeSteps of one sequence around
// `lead_cached` tokens (request first_id + 1, on the blocks after the
// prefill's); both requests are finished after each. The executor must
// hold prefill_blocks_with_lead(..) KV blocks from first_block on.
std::vector<double> time_prefills(Executor& executor, int64_t tokens, int32_t block_size, int warm_up, int timed,
                                  int lead_steps, int64_t lead_cached, int32_t first_block = 0,
                                  int64_t first_id = 1);
int64_t prefill_blocks_with_lead(int64_t tokens, int32_t block_size, int lead_steps, int64_t lead_cached);

// The seconds of `timed` successive DecodeSteps of `sequences` sequences
// around `cached` tokens on `executor`, after `warm_up` untimed ones. The
// executor must hold DecodeSteps::blocks(sequences, cached, warm_up +
// timed) KV blocks from `first_block` on; its request ids first_id ..
// first_id + sequences - 1 are finished after.
std::vector<double> time_decode_steps(Executor& executor, int64_t sequences, int64_t cached, int32_t block_size,
                                      int warm_up, int timed, int32_t first_block = 0, int64_t first_id = 1);
// Fills p.decode_step_factor: for each of `batches`, the median over its
// measured steps of measured / predicted (p's tables, gemm_factor and
// iteration overhead). measured[i] holds batches[i]'s timed steps from
// time_decode_steps(.., warm_up, timed), one or more runs of them back to
// back (step k is the (k mod timed)-th of its run). Call after p's other
// parts are set.
void set_decode_step_factor(DeviceProfile& p, const std::vector<int64_t>& batches, int64_t cached, int32_t block_size,
                        int warm_up, int timed, const std::vector<std::vector<double>>& measured,
                        const std::function<void(const std::string&)>& say);
// Untimed steps before measure_decode_step_factor's timed ones.
constexpr int kDecodeStepWarmUp = 3;
// Both at once: kDecodeStepWarmUp untimed and `repetitions` timed steps per
// batch size (the CUDA calibration, the CPU's quick one).
void measure_decode_step_factor(DeviceProfile& p, Executor& executor, const std::vector<int64_t>& batches,
                            int64_t cached, int32_t block_size, int repetitions,
                            const std::function<void(const std::string&)>& say);
// The same from measured seconds, one per length (measure_gemm_factor's
// medians, or the CPU calibration's medians over the whole calibration).
void set_gemm_factor(DeviceProfile& p, const std::vector<int64_t>& lengths, const std::vector<double>& measured_s,
                 int32_t block_size, const std::function<void(const std::string&)>& say);

// Per batch size, the largest over the smallest of its per-moment median
// step times (medians[moment][batch]): how far the host's speed for that
// shape moved during the calibration.
std::vector<double> moment_spread(const std::vector<std::vector<double>>& medians);

}  // namespace servesim::calibration
