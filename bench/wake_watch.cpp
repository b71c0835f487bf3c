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

#include "calib/calibration_common.h"
#include "calib/placement.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/host_weights.h"
#include "sim/errors.h"
#include "sim/model_spec.h"

namespace {

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr, "%s%susage: servesim_wake_watch [--rounds N (8)] [--model M (small-110m)]\n", error.c_str(),
               error.empty() ? "" : "\n");
  std::exit(error.empty() ? 0 : 2);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace servesim;
  int rounds = 8;
  std::string model_name = "small-110m";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("");
    if (i + 1 >= argc) usage(fmt::format("{}: needs a value", flag));
    const std::string value = argv[++i];
    if (flag == "--rounds") {
      char* end = nullptr;
      rounds = int(std::strtol(value.c_str(), &end, 10));
      if (*end != '\0' || rounds < 1) usage(fmt::format("--rounds: expected an integer >= 1, got '{}'", value));
    } else if (flag == "--model") {
      model_name = value;
    } else {
      usage(fmt::format("unknown flag '{}'", flag));
    }
  }
  ModelSpec model;
  try {
    model = resolve_model(model_name);
  } catch (const InputError& e) {
    usage(fmt::format("--model: {}", e.what()));
  }
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
