// The warm-up passes a real run makes before its clock starts: what they
// run, where they write, and that no request's results depend on them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "kernels/decoder/decoder_model.h"
#include "engine/decoder_run.h"
#include "kernels/decoder/host_weights.h"
#include "engine/warm_up.h"
#include "support/test_support.h"
#include "sim/workload.h"

using namespace servesim;
using Catch::Matchers::Contains;

namespace {

// Two layers, GQA (4 query heads on 2 KV heads), d = 32, V = 61.
ModelSpec warm_up_spec() { return test::small_model("test-warm-up", 32, 64, 2, 4, 2, 8, 61, 512, "float32"); }

constexpr int32_t kBlockSize = 4;
constexpr int64_t kBlocks = 32;

// K of `layer`, KV head 0, at one token of a one-block table: its first element.
float cached_k(const DecoderModel& model, int32_t layer, int32_t block, int32_t slot) {
  const int64_t n = model.spec().num_key_value_heads * model.spec().head_dim;
  std::vector<float> k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  const std::vector<int32_t> table{block};
  model.read_kv(layer, table, slot, k, v);
  return k[0];
}

// Logits of a 10-token prefill and 6 decodes of one sequence on blocks 0 ..,
// the blocks a warm-up writes first.
std::vector<float> sequence_logits(DecoderModel& model) {
  std::vector<int32_t> table(4);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> tokens(16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((7 * i + 3) % 61);
  std::vector<float> all;
  BatchLayout layout;
  layout.add_sequence(std::span<const int32_t>(tokens).first(10), 0, table, true);
  const auto& first = model.forward(layout);
  all.insert(all.end(), first.begin(), first.end());
  for (int32_t t = 10; t < 16; ++t) {
    layout.clear();
    layout.add_sequence(std::span<const int32_t>(tokens).subspan(size_t(t), 1), t, table, true);
    const auto& next = model.forward(layout);
    all.insert(all.end(), next.begin(), next.end());
  }
  return all;
}

}  // namespace

TEST_CASE("warm-up: a prefill and decode steps on the first KV blocks", "[warm_up]") {
  auto model = make_cpu_decoder(random_weights(warm_up_spec(), 4), kBlocks, kBlockSize, CpuDecoderOptions{1});
  WarmUpSettings settings;
  settings.prefill_tokens = 21;
  settings.decode_steps = 3;
  const WarmUpReport report = warm_up(*model, settings);
  CHECK(report.prefill_tokens == 21);
  CHECK(report.decode_steps == 3);
  CHECK(report.seconds > 0);
  CHECK(report.to_json()["prefill_tokens"] == 21);
  // 24 positions: blocks 0 .. 5 written, block 6 untouched (the cache starts zeroed).
  CHECK(cached_k(*model, 0, 0, 0) != 0.0f);
  CHECK(cached_k(*model, 1, 5, 3) != 0.0f);
  CHECK(cached_k(*model, 1, 6, 0) == 0.0f);

  SECTION("capped by the KV cache, less the decode steps") {
    settings.prefill_tokens = 10000;
    const WarmUpReport capped = warm_up(*model, settings);
    CHECK(capped.prefill_tokens == kBlocks * kBlockSize - 3);
    CHECK(capped.decode_steps == 3);
  }
  SECTION("0 tokens: nothing") {
    settings.prefill_tokens = 0;
    const WarmUpReport none = warm_up(*model, settings);
    CHECK(none.prefill_tokens == 0);
    CHECK(none.decode_steps == 0);
    CHECK(none.seconds == 0);
  }
}

TEST_CASE("warm-up: a later sequence on the same blocks computes the same logits", "[warm_up]") {
  auto fresh = make_cpu_decoder(random_weights(warm_up_spec(), 4), kBlocks, kBlockSize, CpuDecoderOptions{1});
  auto warmed = make_cpu_decoder(random_weights(warm_up_spec(), 4), kBlocks, kBlockSize, CpuDecoderOptions{1});
  WarmUpSettings settings;
  settings.prefill_tokens = 40;  // more positions than the later sequence's 16: all of its blocks were written
  warm_up(*warmed, settings);
  const std::vector<float> want = sequence_logits(*fresh);
  const std::vector<float> got = sequence_logits(*warmed);
  REQUIRE(got.size() == 7 * 61);
  REQUIRE(got == want);  // bit for bit: every position is written before it is read
}

TEST_CASE("warm-up: serve warms up within the token budget and says so", "[warm_up][engine]") {
  EngineSetup setup;
  setup.model = warm_up_spec();
  setup.threads = 1;
  setup.kv_cache_bytes = 1e6;
  setup.scheduler.max_num_batched_tokens = 48;
  setup.workload.arrival = ArrivalProcess::Closed;
  setup.workload.concurrency = 2;
  setup.workload.num_requests = 3;
  setup.workload.prompt_len = "uniform:4:20";
  setup.workload.output_len = "uniform:1:4";
  const Workload workload = make_workload(setup.workload);
  std::string ready;
  EngineRunOptions run;
  run.on_ready = [&](const std::string& s) { ready = s; };
  EngineOutput out = run_engine(setup, workload, run);
  CHECK(out.warm_up.prefill_tokens == 48);  // 256 by default, capped by the budget
  CHECK(out.warm_up.decode_steps == 4);
  CHECK_THAT(ready, Contains("warmed up: a 48-token prefill and 4 decode steps"));
  CHECK(engine_setup_to_json(setup, out)["warm_up"]["prefill_tokens"] == 48);
  CHECK(out.summary.completed == 3);

  setup.warm_up.prefill_tokens = 0;
  out = run_engine(setup, workload, run);
  CHECK(out.warm_up.prefill_tokens == 0);
  CHECK_THAT(ready, Contains("no warm-up"));
}

namespace {

// A CPU decoder that records what prepare_batches was asked for.
class PrepareRecorder final : public DecoderModel {
 public:
  explicit PrepareRecorder(std::unique_ptr<DecoderModel> inner) : inner_(std::move(inner)) {}
  const ModelSpec& spec() const override { return inner_->spec(); }
  std::string device() const override { return inner_->device(); }
  double weight_bytes() const override { return inner_->weight_bytes(); }
  double kv_cache_bytes() const override { return inner_->kv_cache_bytes(); }
  int64_t kv_num_blocks() const override { return inner_->kv_num_blocks(); }
  int32_t kv_block_size() const override { return inner_->kv_block_size(); }
  const std::vector<float>& forward(const BatchLayout& layout) override {
    ++passes;
    return inner_->forward(layout);
  }
  void read_kv(int32_t layer, std::span<const int32_t> table, int32_t position, std::span<float> k,
               std::span<float> v) const override {
    inner_->read_kv(layer, table, position, k, v);
  }
  void prepare_batches(int32_t max_tokens, int32_t max_sample_rows) override {
    prepared.push_back({max_tokens, max_sample_rows, passes});
  }
  struct Call {
    int32_t tokens, rows, passes_before;
  };
  std::vector<Call> prepared;
  int passes = 0;

 private:
  std::unique_ptr<DecoderModel> inner_;
};

}  // namespace

TEST_CASE("warm-up: prepares the decoder for the scheduler's largest batch before its passes", "[warm_up]") {
  PrepareRecorder model(make_cpu_decoder(random_weights(warm_up_spec(), 4), kBlocks, kBlockSize, CpuDecoderOptions{1}));
  WarmUpSettings settings;
  settings.prefill_tokens = 8;
  settings.decode_steps = 2;
  settings.max_batched_tokens = 96;
  settings.max_sample_rows = 12;
  warm_up(model, settings);
  REQUIRE(model.prepared.size() == 1);
  CHECK(model.prepared[0].tokens == 96);
  CHECK(model.prepared[0].rows == 12);
  CHECK(model.prepared[0].passes_before == 0);
  CHECK(model.passes == 3);

  settings.max_batched_tokens = 0;  // not asked for: not prepared
  warm_up(model, settings);
  CHECK(model.prepared.size() == 1);
}
