// A measured run of any engine, read from what a benchmark client wrote, so
// servesim can put a prediction beside it (`validate --measured`) or fit the
// roofline to it (`fit`, validate/fit_roofline.h). Two formats:
//   - a servesim run folder: requests.csv (+ summary.json), as `run`,
//     `simulate` and `bench` write them (docs/outputs.md);
//   - a vLLM `bench serve --save-result` JSON: per-request lists input_lens,
//     output_lens, ttfts (s), itls (s, one list per request), and
//     start_times where the vLLM version saves them; errors where present.
//     A folder holding vllm_result.json (and no requests.csv) is read as one.
// Times are seconds from the first request's arrival.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/metrics.h"
#include "sim/stats.h"
#include "sim/workload.h"

namespace servesim {

struct MeasuredRequest {
  int64_t id = 0;             // the id in the measured file (a vLLM list's index)
  double arrival_s = 0;       // from the first arrival
  int32_t prompt_tokens = 1;
  int32_t output_tokens = 1;  // asked for (servesim) or received (vLLM: ignore_eos runs receive what they ask)
  bool completed = false;     // false: failed, rejected or unfinished (no latencies)
  double ttft_s = -1, tpot_s = -1, e2e_s = -1;  // -1: undefined (TPOT: fewer than 2 tokens)
};

struct MeasuredRun {
  std::string source;  // the path given
  std::string format;  // "servesim" (requests.csv) or "vllm" (bench serve JSON)
  std::vector<MeasuredRequest> requests;  // by arrival (then id)
  // Requests that were sent but are not simulated: a vLLM request that failed
  // (output length 0), whose asked length the file does not keep.
  int64_t dropped_failed = 0;
  // Every inter-token gap when the file keeps them (vLLM's itls), else the
  // distribution summary.json gives (a servesim folder), else none.
  std::vector<double> itl_samples;
  std::optional<Distribution> itl_summary;
  // Arrival times not in the file (a vLLM JSON without start_times): drawn
  // from its request_rate and burstiness (seeded), or all at 0 for an
  // infinite rate. `arrivals_note` says which.
  bool arrivals_assumed = false;
  std::string arrivals_note;
  // A vLLM run at an infinite rate under --max-concurrency N, without start
  // times: replayed closed loop, N requests in flight (0: open loop).
  int64_t closed_loop_concurrency = 0;
  std::vector<std::string> notes;  // what else the reader assumed
  // A bench folder's summary.json server_metrics (the server's own /metrics
  // over the run: validate/server_steps.h), as read; null where absent.
  nlohmann::json server_metrics;
  std::string server_metrics_source;  // the summary.json it came from

  Distribution ttft() const;
  Distribution tpot() const;
  Distribution e2e() const;
  Distribution itl() const;  // from the samples, else the summary (count 0 when neither)
  int64_t completed() const;
  double duration_s() const;  // last completion - first arrival (0 when none completed)
};

struct MeasuredReadOptions {
  uint64_t seed = 0;                // assumed arrivals' draws
  std::string flag = "--measured";  // what the messages name the path by
};

// Reads a folder or a JSON file (InputError naming the file and the field
// when it is missing, malformed, of unequal list lengths or holds negative
// times).
MeasuredRun read_measured_run(const std::string& path, const MeasuredReadOptions& options = {});
MeasuredRun read_servesim_run_folder(const std::string& folder);
MeasuredRun read_vllm_result_json(const std::string& path, const MeasuredReadOptions& options = {});

// The measured requests as a servesim workload, open loop at their measured
// arrivals (closed loop with closed_loop_concurrency > 0): request i of the workload is run.requests[i] (ids 0..N-1 in
// arrival order), with no token identity (nothing shared: the files do not
// say which prompts shared prefixes).
Workload measured_workload(const MeasuredRun& run);

}  // namespace servesim
