// Times one decode step of the built-in CPU decoder over and over: B
// sequences with C tokens cached each, one new token per sequence, the same
// step every time (same positions, so the work never changes). One CSV row
// per step on stdout, so that a step's jitter can be read against its
// neighbours: experiments/decode_jitter/run.sh compares two builds this way.
//
// Usage: servesim_decode_steps [--batch B (1)] [--context C (200)]
//                              [--seconds S (10)] [--model M (small-110m)]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/watch_flags.h"
#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/host_weights.h"
#include "sim/model_spec.h"

namespace {

using namespace servesim;
using Clock = std::chrono::steady_clock;
constexpr int32_t kBlockSize = 16;

struct Options {
  int32_t batch = 1;
  int32_t context = 200;
  double seconds = 10;
  std::string model = "small-110m";
};

const bench::WatchFlags kFlags(
    "usage: servesim_decode_steps [--batch B (1)] [--context C (200)] [--seconds S (10)] [--model M (small-110m)]");

Options parse(int argc, char** argv) {
  Options o;
  kFlags.parse(argc, argv, [&](const std::string& flag, const std::string& value) {
    if (flag == "--batch") o.batch = kFlags.integer_at_least(flag, value, 1);
    else if (flag == "--context") o.context = kFlags.integer_at_least(flag, value, 1);
    else if (flag == "--seconds") o.seconds = kFlags.positive(flag, value);
    else if (flag == "--model") o.model = value;
    else return false;
    return true;
  });
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const ModelSpec spec = kFlags.model(o.model);
  if (o.context + 1 > spec.max_position_embeddings)
    kFlags.usage(fmt::format("--context: {} + 1 is more than {}'s {} positions", o.context, spec.name,
                             spec.max_position_embeddings));

  // Each sequence owns the blocks that hold its context and the new token.
  const int32_t blocks_per_sequence = (o.context + 1 + kBlockSize - 1) / kBlockSize;
  auto model = make_cpu_decoder(random_weights(spec, 7), o.batch * blocks_per_sequence, kBlockSize,
                                CpuDecoderOptions{});
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int32_t> token(0, int32_t(spec.vocab_size) - 1);
  std::vector<std::vector<int32_t>> blocks(size_t(o.batch)), ids(size_t(o.batch));
  BatchLayout step;
  for (int32_t s = 0; s < o.batch; ++s) {
    for (int32_t b = 0; b < blocks_per_sequence; ++b) blocks[size_t(s)].push_back(s * blocks_per_sequence + b);
    for (int32_t i = 0; i <= o.context; ++i) ids[size_t(s)].push_back(token(rng));
    BatchLayout fill;  // the cached context, one prefill per sequence
    fill.add_sequence(std::span(ids[size_t(s)]).first(size_t(o.context)), 0, blocks[size_t(s)], true);
    model->forward(fill);
    step.add_sequence(std::span(ids[size_t(s)]).last(1), o.context, blocks[size_t(s)], true);
  }
  model->forward(step);  // warm-up: sizes the scratch matrices

  std::printf("elapsed_s,step_ms\n");
  const auto start = Clock::now();
  for (;;) {
    const auto t0 = Clock::now();
    const double elapsed = std::chrono::duration<double>(t0 - start).count();
    if (elapsed > o.seconds) break;
    model->forward(step);
    std::printf("%.4f,%.4f\n", elapsed, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return 0;
}
