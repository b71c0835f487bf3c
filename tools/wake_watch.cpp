// Does a whole-model iteration run slower after the machine has been idle?
// One small-110m decoder; round after round, for each idle time S (in a
// rotating order) it sleeps S seconds, then times a 128-token prefill (the
// first iteration after the wait) and the same prefill again at once (the
// control), then 4 1-sequence decode steps and the same prefill after them
// (as a served prefill follows decode steps). One CSV row per (round, S) on
// stdout: first / control is the wake-up cost of S seconds idle,
// after_decode / control the cost of following decode steps.
//
// Usage: servesim_wake_watch [--rounds N (8)] [--model M (small-110m)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tools/watch_flags.h"
#include "calib/calibration_common.h"
#include "validate/host_drift/placement.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/host_weights.h"
#include "sim/errors.h"
#include "sim/model_spec.h"

namespace {

const servesim::bench::WatchFlags kFlags("usage: servesim_wake_watch [--rounds N (8)] [--model M (small-110m)]");

}  // namespace

int main(int argc, char** argv) {
  using namespace servesim;
  int rounds = 8;
  std::string model_name = "small-110m";
  kFlags.parse(argc, argv, [&](const std::string& flag, const std::string& value) {
    if (flag == "--rounds") rounds = kFlags.integer_at_least(flag, value, 1);
    else if (flag == "--model") model_name = value;
    else return false;
    return true;
  });
  const ModelSpec model = kFlags.model(model_name);
  const int32_t block_size = 16;
  const int64_t tokens = 128;
  DecoderExecutor executor(make_cpu_decoder(random_weights(model, 0), 64, block_size, CpuDecoderOptions{0}), {});
  int64_t next_id = 1;
  IterationResult result;
  auto prefill_s = [&] {
    const calibration::OneSequencePlan prefill(next_id, tokens, 0, true, block_size);
    result.reset();
    executor.execute(prefill.plan(), result);
    executor.on_request_finished(next_id++);
    return result.duration_s;
  };
  for (int i = 0; i < 3; ++i) prefill_s();  // warm-up
  const std::vector<double> idle_s = {0.0, 0.1, 0.3, 1.0, 2.0, 4.0};
  std::printf("round,idle_s,first_prefill_s,control_prefill_s,decode_step_s,after_decode_prefill_s,placement\n");
  for (int round = 0; round < rounds; ++round) {
    for (size_t j = 0; j < idle_s.size(); ++j) {
      const double idle = idle_s[(j + size_t(round)) % idle_s.size()];
      std::this_thread::sleep_for(std::chrono::duration<double>(idle));
      const double first = prefill_s(), control = prefill_s();
      const double decode = calibration::median(
          calibration::time_decode_steps(executor, 1, 127, block_size, 0, 4, 0, next_id++));
      const double after_decode = prefill_s();
      const Placement placement = placement_of(core_to_core_latency_ns(0));
      std::printf("%d,%.1f,%.6f,%.6f,%.6f,%.6f,%s\n", round, idle, first, control, decode, after_decode,
                  to_string(placement));
      std::fflush(stdout);
    }
  }
  return 0;
}
