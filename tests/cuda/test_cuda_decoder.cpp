// The CUDA decoder as a whole (kernels/cuda/cuda_decoder.cpp): its logits
// against the CPU decoder's for the same weights, cached against
// recomputed, graph replay against eager, device-made random weights
// against random_weights(), token selection on the device, and the engine
// on --device cuda. Tagged [cuda]: skipped without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/decoder/decoder_model.h"
#include "engine/decoder_run.h"
#include "kernels/decoder/host_weights.h"
#include "sim/model_spec.h"
#include "tests/cuda/cuda_test_support.h"

using namespace servesim;

namespace {

constexpr int32_t kBlockSize = 16;

// A small GQA model with odd sizes: d 192, 6 heads of 32 over 2 KV heads.
ModelSpec small_gqa() {
  ModelSpec m = resolve_model("tiny-15m");
  m.name = "test-gqa";
  m.hidden_size = 192;
  m.intermediate_size = 520;
  m.num_hidden_layers = 3;
  m.num_attention_heads = 6;
  m.num_key_value_heads = 2;
  m.head_dim = 32;
  m.vocab_size = 1000;
  m.max_position_embeddings = 512;
  return m;
}

// Every matrix rounded to bf16, so that the CPU decoder (fp32) and the CUDA
// decoder (bf16) start from the same weights; norms stay fp32 in both.
HostWeights bf16_rounded(HostWeights w) {
  auto round = [](std::vector<float>& v) { v = cuda::test::round_to_bf16(std::move(v)); };
  round(w.embedding);
  round(w.lm_head);
  for (HostLayerWeights& L : w.layers)
    for (std::vector<float>* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) round(*m);
  return w;
}

std::vector<int32_t> prompt(int32_t n, int64_t vocab, int32_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = int32_t(3 + (int64_t(i) * 131 + salt * 17) % (vocab - 3));
  return t;
}

std::vector<int32_t> table(int32_t first, int32_t count) {
  std::vector<int32_t> b(static_cast<size_t>(count));
  std::iota(b.begin(), b.end(), first);
  return b;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// Three sequences: a 37-token prompt, a 5-token chunk after 20 cached, a decode.
struct MixedBatch {
  std::vector<int32_t> t1 = table(0, 4), t2 = table(4, 4), t3 = table(8, 4);
  std::vector<int32_t> p1, p2, p3;
  BatchLayout layout;
  explicit MixedBatch(int64_t vocab)
      : p1(prompt(37, vocab, 1)), p2(prompt(25, vocab, 2)), p3(prompt(9, vocab, 3)) {}
};

}  // namespace

TEST_CASE("CUDA decoder logits match the CPU decoder's for the same bf16 weights", "[cuda]") {
  const ModelSpec spec = GENERATE(small_gqa(), resolve_model("tiny-15m"));
  const HostWeights weights = bf16_rounded(random_weights(spec, 7));
  auto cpu_model = make_cpu_decoder(HostWeights(weights), 16, kBlockSize, {});
  auto gpu_model = make_cuda_decoder(HostWeights(weights), 16, kBlockSize, {});
  // The same history in both caches first (prefills of sequences 2 and 3),
  // then one mixed pass: a whole prompt, a later chunk, a decode.
  MixedBatch b(spec.vocab_size);
  BatchLayout history;
  history.add_sequence(std::span<const int32_t>(b.p2).first(20), 0, b.t2, false);
  history.add_sequence(std::span<const int32_t>(b.p3).first(8), 0, b.t3, false);
  cpu_model->forward(history);
  gpu_model->forward(history);
  b.layout.add_sequence(b.p1, 0, b.t1, true);
  b.layout.add_sequence(std::span<const int32_t>(b.p2).subspan(20, 5), 20, b.t2, true);
  b.layout.add_sequence(std::span<const int32_t>(b.p3).subspan(8, 1), 8, b.t3, true);
  const std::vector<float> want = cpu_model->forward(b.layout);
  const std::vector<float> got = gpu_model->forward(b.layout);
  REQUIRE(got.size() == want.size());
  // bf16 activations against fp32 ones through a few layers: about 1% of
  // the largest logit.
  const double err = cuda::test::max_abs_diff(got, want);
  INFO(spec.name << ": max |logit error| " << err << " of max |logit| " << max_abs(want));
  CHECK(err <= 2e-2 * max_abs(want));
}

TEST_CASE("CUDA decoder: cached decode equals one recomputed prefill", "[cuda]") {
  const ModelSpec spec = small_gqa();
  auto model = make_cuda_decoder_random(spec, 3, 32, kBlockSize, {});
  const std::vector<int32_t> tokens = prompt(45, spec.vocab_size, 4);
  const std::vector<int32_t> cached_table = {9, 2, 30, 17}, full_table = {5, 11, 23, 0};  // shuffled
  BatchLayout layout;
  layout.add_sequence(std::span<const int32_t>(tokens).first(40), 0, cached_table, false);
  model->forward(layout);
  std::vector<float> cached;
  for (int32_t p = 40; p < 45; ++p) {
    layout.clear();
    layout.add_sequence(std::span<const int32_t>(tokens).subspan(size_t(p), 1), p, cached_table, true);
    cached = model->forward(layout);  // the last one: logits after all 45 tokens
  }
  layout.clear();
  layout.add_sequence(tokens, 0, full_table, true);
  const std::vector<float> full = model->forward(layout);
  const double err = cuda::test::max_abs_diff(cached, full);
  INFO("max |logit difference| " << err << " of max |logit| " << max_abs(full));
  CHECK(err <= 1e-2 * max_abs(full));
}

TEST_CASE("CUDA decoder: graph replay gives the eager pass's logits and tokens", "[cuda]") {
  const ModelSpec spec = small_gqa();
  CudaDecoderOptions eager_options;
  eager_options.graphs = false;
  auto graphed = make_cuda_decoder_random(spec, 5, 64, kBlockSize, {});
  auto eager = make_cuda_decoder_random(spec, 5, 64, kBlockSize, eager_options);
  // Five sequences (padded to a bucket of 8), prefilled, then 6 decode steps.
  std::vector<std::vector<int32_t>> tables, tokens;
  BatchLayout layout;
  for (int32_t s = 0; s < 5; ++s) {
    tables.push_back(table(8 * s, 8));
    tokens.push_back(prompt(10 + 7 * s, spec.vocab_size, s));
    layout.add_sequence(tokens.back(), 0, tables.back(), true);
  }
  REQUIRE(cuda::test::max_abs_diff(graphed->forward(layout), eager->forward(layout)) == 0.0);
  for (int step = 0; step < 6; ++step) {
    layout.clear();
    std::vector<int32_t> next(5);
    for (int32_t s = 0; s < 5; ++s) {
      next[size_t(s)] = int32_t(3 + (step * 5 + s) % 900);
      layout.add_sequence(std::span<const int32_t>(&next[size_t(s)], 1), int32_t(tokens[size_t(s)].size()),
                          tables[size_t(s)], true);
    }
    const std::vector<float> a = graphed->forward(layout), b = eager->forward(layout);
    // The same kernels with the same arguments: bit for bit.
    REQUIRE(cuda::test::max_abs_diff(a, b) == 0.0);
    for (int32_t s = 0; s < 5; ++s) tokens[size_t(s)].push_back(next[size_t(s)]);
  }
}

TEST_CASE("CUDA decoder: prepared batches (buffers, GEMM buckets, graphs ahead) give the same logits", "[cuda]") {
  const ModelSpec spec = small_gqa();
  auto prepared = make_cuda_decoder_random(spec, 5, 64, kBlockSize, {});
  auto plain = make_cuda_decoder_random(spec, 5, 64, kBlockSize, {});
  prepared->prepare_batches(300, 24);
  // Prompts of lengths in several GEMM buckets, then decode steps of 3,
  // then 7 sequences (graph buckets 4 and 8, captured ahead in `prepared`).
  std::vector<std::vector<int32_t>> tables, tokens;
  for (int32_t s = 0; s < 7; ++s) {
    tables.push_back(table(8 * s, 8));
    tokens.push_back(prompt(11 + 13 * s, spec.vocab_size, s));
    BatchLayout layout;
    layout.add_sequence(tokens.back(), 0, tables.back(), true);
    REQUIRE(cuda::test::max_abs_diff(prepared->forward(layout), plain->forward(layout)) == 0.0);
  }
  for (int32_t n : {3, 3, 7, 7}) {
    BatchLayout layout;
    std::vector<int32_t> next(static_cast<size_t>(n));
    for (int32_t s = 0; s < n; ++s) {
      next[size_t(s)] = int32_t(5 + (n * 7 + s) % 900);
      layout.add_sequence(std::span<const int32_t>(&next[size_t(s)], 1), int32_t(tokens[size_t(s)].size()),
                          tables[size_t(s)], true);
    }
    const std::vector<float> a = prepared->forward(layout), b = plain->forward(layout);
    REQUIRE(cuda::test::max_abs_diff(a, b) == 0.0);  // the same kernels and algorithms: bit for bit
    for (int32_t s = 0; s < n; ++s) tokens[size_t(s)].push_back(next[size_t(s)]);
  }
}

TEST_CASE("CUDA decoder: random weights made on the device equal bf16(random_weights)", "[cuda]") {
  const ModelSpec spec = small_gqa();
  auto device_made = make_cuda_decoder_random(spec, 11, 8, kBlockSize, {});
  auto host_made = make_cuda_decoder(random_weights(spec, 11), 8, kBlockSize, {});
  REQUIRE(device_made->weight_bytes() == host_made->weight_bytes());
  const std::vector<int32_t> t = table(0, 4), tokens = prompt(30, spec.vocab_size, 9);
  BatchLayout layout;
  layout.add_sequence(tokens, 0, t, true);
  REQUIRE(cuda::test::max_abs_diff(device_made->forward(layout), host_made->forward(layout)) == 0.0);
}

TEST_CASE("CUDA decoder: a self-draft made on the device is its target's first layers", "[cuda]") {
  const ModelSpec target = small_gqa();
  const ModelSpec draft = self_draft_spec(target, 2);
  auto device_made = make_cuda_decoder_random(draft, 4, 8, kBlockSize, {}, &target);
  auto host_made = make_cuda_decoder(self_draft_weights(random_weights(target, 4), 2), 8, kBlockSize, {});
  const std::vector<int32_t> t = table(0, 4), tokens = prompt(12, target.vocab_size, 2);
  BatchLayout layout;
  layout.add_sequence(tokens, 0, t, true);
  REQUIRE(cuda::test::max_abs_diff(device_made->forward(layout), host_made->forward(layout)) == 0.0);
}

TEST_CASE("CUDA decoder: tokens chosen on the device are the host sampler's", "[cuda]") {
  const ModelSpec spec = small_gqa();
  auto model = make_cuda_decoder_random(spec, 6, 64, kBlockSize, {});
  BatchLayout layout;
  std::vector<std::vector<int32_t>> tables, tokens;
  for (int32_t s = 0; s < 6; ++s) {
    tables.push_back(table(8 * s, 8));
    tokens.push_back(prompt(5 + 3 * s, spec.vocab_size, 20 + s));
    layout.add_sequence(tokens.back(), 0, tables.back(), true);
  }
  for (double temperature : {0.0, 0.8}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 3;
    std::vector<double> uniforms;
    for (int32_t s = 0; s < 6; ++s) uniforms.push_back(sampling_uniform(params, s, int64_t(tokens[size_t(s)].size())));
    std::vector<int32_t> chosen;
    REQUIRE(model->forward_select(layout, params, uniforms, chosen));
    const std::vector<float> logits = model->forward(layout);  // the same pass again (same cache writes)
    for (int32_t s = 0; s < 6; ++s) {
      const std::span<const float> row(logits.data() + size_t(s) * size_t(spec.vocab_size), size_t(spec.vocab_size));
      INFO("temperature " << temperature << ", row " << s);
      CHECK(chosen[size_t(s)] == sample_token(row, params, s, int64_t(tokens[size_t(s)].size())));
    }
  }
  SamplingParams nucleus;
  nucleus.temperature = 1.0;
  nucleus.top_p = 0.9;
  std::vector<int32_t> chosen;
  CHECK_FALSE(model->forward_select(layout, nucleus, std::vector<double>(6, 0.5), chosen));  // the host's job
}

TEST_CASE("CUDA decoder: read_kv returns what the CPU decoder cached, to bf16 precision", "[cuda]") {
  const ModelSpec spec = small_gqa();
  const HostWeights weights = bf16_rounded(random_weights(spec, 8));
  auto cpu_model = make_cpu_decoder(HostWeights(weights), 8, kBlockSize, {});
  auto gpu_model = make_cuda_decoder(HostWeights(weights), 8, kBlockSize, {});
  const std::vector<int32_t> t = {6, 1, 4}, tokens = prompt(40, spec.vocab_size, 5);
  BatchLayout layout;
  layout.add_sequence(tokens, 0, t, true);
  cpu_model->forward(layout);
  gpu_model->forward(layout);
  const size_t n = size_t(spec.num_key_value_heads * spec.head_dim);
  std::vector<float> kc(n), vc(n), kg(n), vg(n);
  for (int32_t layer = 0; layer < int32_t(spec.num_hidden_layers); ++layer)
    for (int32_t pos : {0, 15, 16, 39}) {
      cpu_model->read_kv(layer, t, pos, kc, vc);
      gpu_model->read_kv(layer, t, pos, kg, vg);
      INFO("layer " << layer << ", position " << pos);
      CHECK(cuda::test::max_abs_diff(kg, kc) <= 3e-2 * std::max(1.0, max_abs(kc)));
      CHECK(cuda::test::max_abs_diff(vg, vc) <= 3e-2 * std::max(1.0, max_abs(vc)));
    }
}

TEST_CASE("The engine serves a workload on --device cuda", "[cuda]") {
  EngineSetup setup;
  setup.device = "cuda";
  setup.model = small_gqa();
  setup.kv_cache_bytes = 64.0 * (1 << 20);
  setup.workload.num_requests = 12;
  setup.workload.rate = 50;
  setup.workload.prompt_len = "uniform:4:60";
  setup.workload.output_len = "uniform:2:20";
  for (const char* policy : {"continuous", "chunked"}) {
    setup.scheduler.policy = parse_scheduler_policy(policy);
    const Workload workload = make_workload(setup.workload);
    const EngineOutput out = run_engine(setup, workload);
    INFO(policy);
    CHECK(out.device.starts_with("cuda:0"));
    REQUIRE(out.records.requests.size() == 12);
    for (const auto& r : out.records.requests) {
      CHECK(r.completed());
      CHECK(r.tokens_emitted == r.output_tokens);
    }
  }
}

TEST_CASE("The engine speculates on --device cuda with a self-draft made on the device", "[cuda]") {
  EngineSetup setup;
  setup.device = "cuda:0";
  setup.model = small_gqa();
  setup.kv_cache_bytes = 64.0 * (1 << 20);
  setup.workload.num_requests = 6;
  setup.workload.rate = 50;
  setup.workload.prompt_len = "uniform:4:40";
  setup.workload.output_len = "uniform:8:20";
  setup.scheduler.num_speculative_tokens = 3;
  setup.speculative.self_draft_layers = 1;
  const EngineOutput out = run_engine(setup, make_workload(setup.workload));
  REQUIRE(out.speculative.has_value());
  CHECK(out.draft_weights_source.find("first 1 layers") != std::string::npos);
  for (const auto& r : out.records.requests) CHECK(r.tokens_emitted == r.output_tokens);
}
