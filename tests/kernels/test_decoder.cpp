// The built-in decoder (CPU backend) checked against full recomputes of the
// same sequence (cached, chunked and batched paths) and against a plain
// double-precision reference of the Llama architecture.
//
// Models are hand-built and tiny so the whole file runs in well under a
// second; the preset-sized models appear only where size matters (activation
// scale through many layers).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <omp.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/host_weights.h"
#include "sim/model_spec.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

// A small Llama-family shape: GQA (H = 4, Hkv = 2) and a head_dim that is
// not hidden_size / H (H * dh = 64 != d = 40), so no path can assume either.
ModelSpec small_spec(bool attention_bias, bool tied) {
  return test::small_model(attention_bias ? "test-small-bias" : "test-small", 40, 88, 2, 4, 2, 16,
                           97, 1024, "float32", tied, attention_bias,
                           attention_bias ? "qwen2" : "llama");
}

constexpr uint64_t kWeightsSeed = 11;

// One thread unless a test is about threads: these tests run many tiny
// passes, and an OpenMP team on a loaded machine (ctest -j, a benchmark
// next door) can make each pass's barriers cost milliseconds.
std::unique_ptr<DecoderModel> make_decoder(const ModelSpec& spec, int64_t num_blocks, int32_t block_size,
                                           int threads = 1, const cpu::Precision& precision = {}) {
  return make_cpu_decoder(random_weights(spec, kWeightsSeed), num_blocks, block_size,
                          CpuDecoderOptions{threads, precision});
}

// `count` distinct block ids out of 0 .. num_blocks - 1, shuffled: a block
// table that is neither contiguous nor increasing.
std::vector<int32_t> shuffled_blocks(int64_t num_blocks, int64_t count, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(size_t(count));
  return ids;
}

std::vector<int32_t> contiguous_blocks(int64_t count) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

std::vector<int32_t> random_tokens(int64_t vocab, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

int64_t blocks_for(int64_t tokens, int32_t block_size) { return (tokens + block_size - 1) / block_size; }

// Fills every slot of every block with the K and V of an unrelated sequence,
// so a read from the wrong block (or a slot never written) sees non-zero
// junk instead of the zeros a fresh cache holds.
void fill_cache_with_junk(DecoderModel& model, int64_t num_blocks, int32_t block_size) {
  const auto table = contiguous_blocks(num_blocks);
  const auto junk = random_tokens(model.spec().vocab_size, num_blocks * block_size, 999);
  BatchLayout layout;
  layout.add_sequence(junk, 0, table, true);
  model.forward(layout);
}

// Logits of the whole `tokens` prefix in one prefill of a fresh decoder: the
// full recompute every cached path must match. Rows: the last token only, or
// every token (row i = logits after tokens[0..i], by causality).
std::vector<float> full_recompute(const ModelSpec& spec, std::span<const int32_t> tokens, bool every_row = false,
                                  const cpu::Precision& precision = {}) {
  const int32_t bs = 16;
  const auto table = contiguous_blocks(blocks_for(int64_t(tokens.size()), bs));
  auto fresh = make_decoder(spec, int64_t(table.size()), bs, 1, precision);
  BatchLayout layout;
  layout.add_sequence(tokens, 0, table, true);
  if (every_row) {
    layout.sample_rows.resize(tokens.size());
    std::iota(layout.sample_rows.begin(), layout.sample_rows.end(), 0);
  }
  return fresh->forward(layout);
}

double max_abs(std::span<const float> v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

// |got - want| <= rel * max|want| over the whole row(s). Different paths of
// the same fp32 computation differ only in summation order (GEMV for one
// token vs. blocked GEMM for many, softmax over a different tile), worth a
// few ulp per dot product of length <= 88 and per layer: ~1e-6 relative.
// 1e-4 leaves two orders of margin yet catches any wrong block, position,
// mask or missing bias, which move logits by O(1) relative.
constexpr double kPathTolerance = 1e-4;

void require_close(std::span<const float> got, std::span<const float> want, double rel = kPathTolerance) {
  const double scale = max_abs(want), diff = max_abs_diff(got, want);
  INFO("max |diff| " << diff << " vs. max |logit| " << scale);
  REQUIRE(scale > 0.1);  // never compare against (near) zeros
  REQUIRE(diff <= rel * scale);
}

// The storage the path tests run at. A stored bf16 or int8 value is a
// rounding of an fp32 one, and two paths that compute that fp32 value in a
// different order (GEMV vs GEMM) can round it to neighbouring steps: one
// int8 step is 1/127 of a row's largest value, one bf16 step 2^-8 of the
// value. Such flips moved a logit by at most 2.1e-4 of the largest in these
// tests (measured); a wrong block, position, mask or scale moves it by O(1).
struct PrecisionCase {
  const char* name;
  cpu::Precision precision;
  double tolerance;
};
const PrecisionCase kPrecisionCases[] = {
    {"fp32", {}, kPathTolerance},
    {"bf16 weights and KV", {cpu::Storage::Bf16, cpu::Storage::Bf16, cpu::Storage::Bf16}, 2e-3},
    {"w8a16, int8 KV", {cpu::Storage::Int8, cpu::Storage::Fp32, cpu::Storage::Int8}, 2e-3},
};

int32_t argmax(std::span<const float> v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

std::span<const float> row(const std::vector<float>& logits, int64_t vocab, int64_t r) {
  return std::span<const float>(logits).subspan(size_t(r * vocab), size_t(vocab));
}

}  // namespace

// ---------------------------------------------------------------------------
// 1. Cached decoding == full recompute

TEST_CASE("decoder: decoding through the paged cache matches a full recompute at every step", "[decoder]") {
  for (const PrecisionCase& pc : kPrecisionCases)
  for (const bool bias : {false, true}) {
    const ModelSpec spec = small_spec(bias, /*tied=*/!bias);
    INFO(spec.name << ", " << pc.name);
    const int32_t bs = 4;  // small blocks: the sequence spans 10 of them
    const int64_t num_blocks = 37;
    auto cached = make_decoder(spec, num_blocks, bs, 1, pc.precision);
    fill_cache_with_junk(*cached, num_blocks, bs);

    const int prompt = 9, steps = 30;
    const auto table = shuffled_blocks(num_blocks, blocks_for(prompt + steps, bs), 5 + bias);
    REQUIRE_FALSE(std::is_sorted(table.begin(), table.end()));
    std::vector<int32_t> tokens = random_tokens(spec.vocab_size, prompt, 21);

    BatchLayout layout;
    layout.add_sequence(tokens, 0, table, true);
    std::vector<float> logits = cached->forward(layout);
    for (int step = 0; step < steps; ++step) {
      INFO("step " << step << ", " << tokens.size() << " tokens");
      REQUIRE(logits.size() == size_t(spec.vocab_size));
      require_close(logits, full_recompute(spec, tokens, false, pc.precision), pc.tolerance);
      tokens.push_back(argmax(logits));
      layout.clear();
      layout.add_sequence(std::span<const int32_t>(tokens).last(1), int32_t(tokens.size()) - 1, table, true);
      REQUIRE(layout.positions == std::vector<int32_t>{int32_t(tokens.size()) - 1});
      logits = cached->forward(layout);
    }
  }
}

// ---------------------------------------------------------------------------
// 2. Chunked prefill

TEST_CASE("decoder: chunked prefill of any chunk size matches one prefill", "[decoder]") {
  for (const PrecisionCase& pc : kPrecisionCases) {
  INFO(pc.name);
  const ModelSpec spec = small_spec(/*bias=*/true, /*tied=*/false);
  const int32_t bs = 4;
  // Longer than the attention's 128-query tile and than the 32-token switch
  // of the matmul's work split, so both regimes are chunked and unchunked;
  // chunks of 140 split into two query tiles with history before them.
  const int prompt = 300;
  const auto tokens = random_tokens(spec.vocab_size, prompt, 3);
  // Row i: logits after tokens[0..i] from one prefill of the whole prompt.
  const auto every_row = full_recompute(spec, tokens, /*every_row=*/true, pc.precision);
  REQUIRE(every_row.size() == size_t(prompt * spec.vocab_size));
  // Sampling every row must agree with sampling only the last row.
  require_close(row(every_row, spec.vocab_size, prompt - 1), full_recompute(spec, tokens, false, pc.precision),
                pc.tolerance);

  const int64_t num_blocks = 90;
  for (const int chunk : {1, 3, 7, 32, 140, prompt}) {
    INFO("chunk " << chunk);
    auto model = make_decoder(spec, num_blocks, bs, 1, pc.precision);
    fill_cache_with_junk(*model, num_blocks, bs);
    const auto table = shuffled_blocks(num_blocks, blocks_for(prompt, bs), 100 + uint64_t(chunk));
    std::vector<float> last;
    for (int off = 0; off < prompt; off += chunk) {
      const int n = std::min(chunk, prompt - off);
      BatchLayout layout;
      layout.add_sequence(std::span<const int32_t>(tokens).subspan(size_t(off), size_t(n)), off, table, true);
      last = model->forward(layout);
      INFO("chunk ending at token " << off + n);
      require_close(last, row(every_row, spec.vocab_size, off + n - 1), pc.tolerance);
    }
  }
  }
}

// ---------------------------------------------------------------------------
// 3. Batch invariance

namespace {

// One sequence of the mixed batch: `history` tokens already cached (written
// by an earlier prefill of its own), then `step` new tokens this pass.
struct Seq {
  std::vector<int32_t> tokens;  // history + step
  int32_t history = 0;
  bool samples = true;
  std::vector<int32_t> table;
  std::span<const int32_t> step() const {
    return std::span<const int32_t>(tokens).subspan(size_t(history));
  }
};

void prefill_history(DecoderModel& model, const Seq& s) {
  if (s.history == 0) return;
  BatchLayout layout;
  layout.add_sequence(std::span<const int32_t>(s.tokens).first(size_t(s.history)), 0, s.table, true);
  model.forward(layout);
}

}  // namespace

TEST_CASE("decoder: a sequence's logits do not depend on the rest of its batch", "[decoder]") {
  for (const PrecisionCase& pc : kPrecisionCases) {
  INFO(pc.name);
  const ModelSpec spec = small_spec(/*bias=*/true, /*tied=*/true);
  const int64_t V = spec.vocab_size;
  const int32_t bs = 4;
  const int64_t num_blocks = 80;
  // A prefill chunk (positions 10..29), a first prefill chunk that does not
  // sample (0..11), and three decodes with 5, 17 and 41 cached tokens.
  std::vector<Seq> seqs(5);
  const int history[] = {10, 0, 5, 17, 41};
  const int step[] = {20, 12, 1, 1, 1};
  const auto all_blocks = shuffled_blocks(num_blocks, num_blocks, 77);
  size_t next_block = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = seqs[i];
    s.tokens = random_tokens(V, history[i] + step[i], 1000 + i);
    s.history = history[i];
    s.samples = i != 1;
    const int64_t nb = blocks_for(int64_t(s.tokens.size()) + 8, bs);  // room for an 8-token follow-up
    s.table.assign(all_blocks.begin() + long(next_block), all_blocks.begin() + long(next_block + size_t(nb)));
    next_block += size_t(nb);
  }
  REQUIRE(next_block <= size_t(num_blocks));

  // Alone: each sequence's step in a pass of its own.
  auto alone = make_decoder(spec, num_blocks, bs, 1, pc.precision);
  fill_cache_with_junk(*alone, num_blocks, bs);
  std::vector<std::vector<float>> want(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    prefill_history(*alone, seqs[i]);
    BatchLayout layout;
    layout.add_sequence(seqs[i].step(), seqs[i].history, seqs[i].table, seqs[i].samples);
    want[i] = alone->forward(layout);
    REQUIRE(want[i].size() == (seqs[i].samples ? size_t(V) : 0u));
  }

  // Together: every step in one packed pass, in plan order and reversed.
  auto batched = make_decoder(spec, num_blocks, bs, 1, pc.precision);
  fill_cache_with_junk(*batched, num_blocks, bs);
  for (const Seq& s : seqs) prefill_history(*batched, s);
  for (const bool reversed : {false, true}) {
    INFO((reversed ? "reversed order" : "plan order"));
    std::vector<size_t> order(seqs.size());
    std::iota(order.begin(), order.end(), 0);
    if (reversed) std::reverse(order.begin(), order.end());
    BatchLayout layout;
    for (size_t i : order) layout.add_sequence(seqs[i].step(), seqs[i].history, seqs[i].table, seqs[i].samples);
    REQUIRE(layout.num_tokens() == 35);
    REQUIRE(layout.num_samples() == 4);
    const auto got = batched->forward(layout);
    REQUIRE(got.size() == size_t(4 * V));
    int64_t r = 0;
    for (size_t i : order) {
      if (!seqs[i].samples) continue;
      INFO("sequence " << i);
      require_close(row(got, V, r), want[i], pc.tolerance);
      require_close(row(got, V, r), full_recompute(spec, seqs[i].tokens, false, pc.precision), pc.tolerance);
      ++r;
    }
  }

  // The sequence that did not sample still wrote its K and V: its next chunk
  // sees the same history in both decoders.
  const std::vector<int32_t> more = random_tokens(V, 8, 4242);
  BatchLayout follow;
  follow.add_sequence(more, int32_t(seqs[1].tokens.size()), seqs[1].table, true);
  const auto follow_alone = alone->forward(follow);
  const auto follow_batched = batched->forward(follow);
  require_close(follow_batched, follow_alone, pc.tolerance);
  std::vector<int32_t> whole = seqs[1].tokens;
  whole.insert(whole.end(), more.begin(), more.end());
  require_close(follow_batched, full_recompute(spec, whole, false, pc.precision), pc.tolerance);
  }
}

// ---------------------------------------------------------------------------
// 4. A tiny model against a plain double-precision reference

namespace {

// The architecture written out plainly from its definition (Hugging Face
// LlamaForCausalLM / Qwen2ForCausalLM), in double, for every position of
// `tokens` at once. Returns logits [T, V].
std::vector<double> reference_logits(const HostWeights& w, const std::vector<int32_t>& tokens) {
  const ModelSpec& m = w.spec;
  const int64_t T = int64_t(tokens.size()), d = m.hidden_size, H = m.num_attention_heads,
                Hkv = m.num_key_value_heads, dh = m.head_dim, I = m.intermediate_size, V = m.vocab_size;
  using Mat = std::vector<std::vector<double>>;
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<float>& weight) {
    double ms = 0;
    for (double v : x) ms += v * v;
    const double inv = 1.0 / std::sqrt(ms / double(x.size()) + m.rms_norm_eps);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * weight[i];
    return out;
  };
  // y = W x (+ b), W [out, in] row-major as nn.Linear stores it.
  auto linear = [](const std::vector<float>& W, const std::vector<float>& b, const std::vector<double>& x,
                   int64_t out) {
    const int64_t in = int64_t(x.size());
    std::vector<double> y(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : double(b[size_t(o)]);
      for (int64_t i = 0; i < in; ++i) acc += double(W[size_t(o * in + i)]) * x[size_t(i)];
      y[size_t(o)] = acc;
    }
    return y;
  };
  // Rotate-half RoPE of one head at `pos`: pairs (j, j + dh/2) rotate by
  // pos * theta^(-2j/dh).
  auto rope = [&](double* x, int64_t pos) {
    for (int64_t j = 0; j < dh / 2; ++j) {
      const double angle = double(pos) * std::pow(m.rope_theta, -2.0 * double(j) / double(dh));
      const double x1 = x[j], x2 = x[j + dh / 2];
      x[j] = x1 * std::cos(angle) - x2 * std::sin(angle);
      x[j + dh / 2] = x2 * std::cos(angle) + x1 * std::sin(angle);
    }
  };
  const std::vector<float> none;

  Mat x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    x[size_t(t)].assign(w.embedding.begin() + tokens[size_t(t)] * d, w.embedding.begin() + (tokens[size_t(t)] + 1) * d);
  for (const HostLayerWeights& L : w.layers) {
    Mat q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const auto h = rmsnorm(x[size_t(t)], L.attn_norm);
      q[size_t(t)] = linear(L.wq, L.bq, h, H * dh);
      k[size_t(t)] = linear(L.wk, L.bk, h, Hkv * dh);
      v[size_t(t)] = linear(L.wv, L.bv, h, Hkv * dh);
      for (int64_t hd = 0; hd < H; ++hd) rope(q[size_t(t)].data() + hd * dh, t);
      for (int64_t hd = 0; hd < Hkv; ++hd) rope(k[size_t(t)].data() + hd * dh, t);
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> attn(size_t(H * dh), 0.0);
      for (int64_t hd = 0; hd < H; ++hd) {
        const int64_t g = hd / (H / Hkv);  // GQA: repeat_kv maps query head hd to KV head hd / (H / Hkv)
        std::vector<double> p(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t s = 0; s <= t; ++s) {  // causal: positions 0 .. t
          double dot = 0;
          for (int64_t j = 0; j < dh; ++j) dot += q[size_t(t)][size_t(hd * dh + j)] * k[size_t(s)][size_t(g * dh + j)];
          p[size_t(s)] = dot / std::sqrt(double(dh));
          mx = std::max(mx, p[size_t(s)]);
        }
        double sum = 0;
        for (double& e : p) sum += e = std::exp(e - mx);
        for (int64_t s = 0; s <= t; ++s)
          for (int64_t j = 0; j < dh; ++j)
            attn[size_t(hd * dh + j)] += p[size_t(s)] / sum * v[size_t(s)][size_t(g * dh + j)];
      }
      const auto o = linear(L.wo, none, attn, d);
      for (int64_t i = 0; i < d; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      const auto h = rmsnorm(x[size_t(t)], L.mlp_norm);
      const auto gate = linear(L.w_gate, none, h, I), up = linear(L.w_up, none, h, I);
      std::vector<double> act(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) act[size_t(i)] = gate[size_t(i)] / (1.0 + std::exp(-gate[size_t(i)])) * up[size_t(i)];
      const auto down = linear(L.w_down, none, act, d);
      for (int64_t i = 0; i < d; ++i) x[size_t(t)][size_t(i)] += down[size_t(i)];
    }
  }
  const std::vector<float>& head = m.tie_word_embeddings ? w.embedding : w.lm_head;
  REQUIRE(head.size() == size_t(V * d));
  std::vector<double> logits;
  for (int64_t t = 0; t < T; ++t) {
    const auto y = linear(head, none, rmsnorm(x[size_t(t)], w.final_norm), V);
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

// (1) the smallest GQA model: one layer, d = 8, two query heads sharing one
// KV head, q/k/v biases, an untied head; (2) two layers, tied head, groups
// of 3 query heads per KV head (so a wrong query-to-KV-head map shows) and
// H * dh = 24 != d = 12.
ModelSpec tiny_spec(bool bias_untied) {
  ModelSpec m = test::small_model(bias_untied ? "tiny-bias-untied" : "tiny-tied-gqa3",
                                  bias_untied ? 8 : 12, 12, bias_untied ? 1 : 2,
                                  bias_untied ? 2 : 6, bias_untied ? 1 : 2, 4, 11, 64, "float32",
                                  !bias_untied, bias_untied, bias_untied ? "qwen2" : "llama");
  m.rope_theta = bias_untied ? 100.0 : 500000.0;  // not the default: theta must be honoured
  m.rms_norm_eps = bias_untied ? 1e-6 : 1e-5;
  m.eos_token_id = 2;
  return m;
}

}  // namespace

TEST_CASE("decoder: a tiny model matches a plain double-precision reference", "[decoder]") {
  for (const bool bias_untied : {true, false}) {
    const ModelSpec spec = tiny_spec(bias_untied);
    INFO(spec.name);
    const int64_t V = spec.vocab_size;
    HostWeights w = random_weights(spec, 5);
    REQUIRE(w.lm_head.empty() == !bias_untied);
    REQUIRE(w.layers[0].bq.empty() == !bias_untied);
    const int T = 40;  // positions up to 39: many RoPE angles
    const auto tokens = random_tokens(V, T, 8);
    const std::vector<double> ref = reference_logits(w, tokens);

    // fp32 against double over dot products of length <= 12 and 1-2 layers:
    // errors are a few fp32 ulp (~1e-6 relative). 1e-4 relative to the
    // row's largest logit states the agreement with margin; a wrong RoPE
    // pairing, GQA map, bias or norm is off by O(1).
    auto check_row = [&](std::span<const float> got, int64_t t) {
      double scale = 0, diff = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double want = ref[size_t(t * V + v)];
        scale = std::max(scale, std::abs(want));
        diff = std::max(diff, std::abs(double(got[size_t(v)]) - want));
      }
      INFO("position " << t << ": max |diff| " << diff << ", max |logit| " << scale);
      REQUIRE(scale > 0.1);
      REQUIRE(diff <= 1e-4 * scale);
    };

    const int32_t bs = 4;
    auto model = make_cpu_decoder(std::move(w), 16, bs, CpuDecoderOptions{1});
    const auto table = shuffled_blocks(16, blocks_for(T, bs), 9);

    // One prefill of all 40 tokens, every row sampled.
    BatchLayout layout;
    layout.add_sequence(tokens, 0, table, true);
    layout.sample_rows.resize(size_t(T));
    std::iota(layout.sample_rows.begin(), layout.sample_rows.end(), 0);
    const auto all = model->forward(layout);
    REQUIRE(all.size() == size_t(T * V));
    for (int64_t t = 0; t < T; ++t) check_row(row(all, V, t), t);

    // Prefill of 30, then decodes one token at a time from the cache.
    layout.clear();
    layout.add_sequence(std::span<const int32_t>(tokens).first(30), 0, table, true);
    check_row(model->forward(layout), 29);
    for (int t = 30; t < T; ++t) {
      layout.clear();
      layout.add_sequence(std::span<const int32_t>(tokens).subspan(size_t(t), 1), t, table, true);
      check_row(model->forward(layout), t);
    }
  }
}

// ---------------------------------------------------------------------------
// 5. Activation scale of random weights at real sizes

TEST_CASE("decoder: random weights keep activations finite and well scaled through every layer", "[decoder]") {
  for (const char* name : {"tiny-15m", "small-110m"}) {
    const ModelSpec spec = resolve_model(name);
    INFO(name);
    omp_set_num_threads(2);  // the backend's kernels use the calling thread's OpenMP setting
    cpu::Backend be(spec);
    const cpu::Weights w = be.upload(random_weights(spec, 1));
    const int32_t bs = 16;
    cpu::KvCache kv = be.make_kv_cache(4, bs);
    cpu::Scratch s;
    const auto tokens = random_tokens(spec.vocab_size, 24, 2);
    const auto table = contiguous_blocks(4);
    BatchLayout layout;
    layout.add_sequence(tokens, 0, table, true);

    // RMS of the residual stream, per token, must stay O(1): embedding rows
    // have unit variance and each residual branch is scaled by 1/sqrt(2L),
    // so it grows at most to a few units. [0.3, 30] flags a blow-up or a
    // collapse by an order of magnitude either way.
    auto check_residual = [&](const char* where) {
      INFO(where);
      REQUIRE(s.x.allFinite());
      for (Eigen::Index t = 0; t < s.x.rows(); ++t) {
        const double rms = std::sqrt(double(s.x.row(t).squaredNorm()) / double(s.x.cols()));
        INFO("token " << t << " rms " << rms);
        REQUIRE(rms > 0.3);
        REQUIRE(rms < 30);
      }
    };
    be.prepare(s, layout);
    be.embed(w, layout, s);
    check_residual("embedding");
    for (int layer = 0; layer < be.num_layers(); ++layer) {
      INFO("layer " << layer);
      be.rmsnorm_attention_input(w, layer, s);
      be.qkv_projection(w, layer, s);
      be.rotary_and_cache_write(layer, layout, kv, s);
      be.attention(layer, layout, kv, s);
      REQUIRE(s.attn.allFinite());
      be.output_projection_add(w, layer, s);
      be.rmsnorm_mlp_input(w, layer, s);
      be.mlp_add(w, layer, s);
      check_residual("after the layer");
    }
    be.logits(w, layout, s);
    REQUIRE(s.logits.rows() == 1);
    REQUIRE(s.logits.cols() == spec.vocab_size);
    REQUIRE(s.logits.allFinite());
    const double mean = s.logits.mean();
    const double sd = std::sqrt((s.logits.array() - float(mean)).square().mean());
    INFO("logits mean " << mean << " std " << sd);
    // Sane: neither vanishing nor saturating a softmax.
    REQUIRE(sd > 0.1);
    REQUIRE(sd < 100);
    REQUIRE(s.logits.maxCoeff() > s.logits.minCoeff());
  }
}

// ---------------------------------------------------------------------------
// Threads

TEST_CASE("decoder: two threads compute what one thread computes", "[decoder]") {
  // A batch big enough for every kernel to split its work: a 150-token
  // prefill (two attention tiles, the many-token matmul split) packed with
  // decodes of long histories. Same tolerance as the other path checks: the
  // threads split output columns and (sequence, head, tile) tasks, so only
  // the GEMM blocking may change summation order.
  const ModelSpec spec = small_spec(/*bias=*/true, /*tied=*/false);
  const int64_t V = spec.vocab_size;
  const int32_t bs = 4;
  const int64_t num_blocks = 100;
  const auto blocks = shuffled_blocks(num_blocks, num_blocks, 31);
  const std::vector<int32_t> t0(blocks.begin(), blocks.begin() + 40), t1(blocks.begin() + 40, blocks.begin() + 70),
      t2(blocks.begin() + 70, blocks.end());
  const auto p0 = random_tokens(V, 150, 1), p1 = random_tokens(V, 101, 2), p2 = random_tokens(V, 77, 3);
  std::vector<std::vector<float>> results;
  for (const int threads : {1, 2}) {
    auto model = make_decoder(spec, num_blocks, bs, threads);
    fill_cache_with_junk(*model, num_blocks, bs);
    BatchLayout history;
    history.add_sequence(std::span<const int32_t>(p1).first(100), 0, t1, true);
    history.add_sequence(std::span<const int32_t>(p2).first(76), 0, t2, true);
    model->forward(history);
    BatchLayout layout;
    layout.add_sequence(p0, 0, t0, true);
    layout.add_sequence(std::span<const int32_t>(p1).last(1), 100, t1, true);
    layout.add_sequence(std::span<const int32_t>(p2).last(1), 76, t2, true);
    results.push_back(model->forward(layout));
  }
  REQUIRE(results[0].size() == size_t(3 * V));
  for (int64_t r = 0; r < 3; ++r) {
    INFO("sequence " << r);
    require_close(row(results[1], V, r), row(results[0], V, r));
  }
  require_close(row(results[1], V, 0), full_recompute(spec, p0));
  require_close(row(results[1], V, 1), full_recompute(spec, p1));
}

// ---------------------------------------------------------------------------
// What the decoder reports about itself

TEST_CASE("decoder: weight and KV cache bytes are the closed forms in fp32", "[decoder]") {
  for (const bool bias : {false, true}) {
    const ModelSpec spec = small_spec(bias, /*tied=*/bias);
    INFO(spec.name);
    auto model = make_decoder(spec, 13, 4, 2);
    REQUIRE(model->spec().hidden_size == spec.hidden_size);
    REQUIRE(model->device() == "cpu (2 threads)");
    // Every parameter once (a tied head is not stored twice), 4 bytes each.
    REQUIRE(model->weight_bytes() == double(spec.parameter_count()) * 4);
    // K and V of 13 blocks x 4 tokens in every layer: 2 * L * Hkv * dh * 4 bytes per token.
    REQUIRE(model->kv_cache_bytes() == 13.0 * 4 * 2 * 2 * 2 * 16 * 4);
  }
}
