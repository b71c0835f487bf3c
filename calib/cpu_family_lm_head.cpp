// The end of an iteration on S sampling rows: the final RMSNorm and the LM
// head (the head rotating through copies), and sampling (copying the [S, V]
// logits out of the backend and choosing each row's token).
#include <span>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "calib/cpu_calibration.h"
#include "kernels/decoder/sampler.h"

namespace servesim::cpu_calibration {

int measure_lm_head(FamilyContext& ctx, LayerKernels& k) {
  const std::vector<int64_t>& rows = ctx.grids.lm_head_rows;
  const int64_t d = ctx.options.model.hidden_size, V = ctx.options.model.vocab_size;
  const cpu::Storage storage = ctx.storage.embedding;
  const int head_copies = ctx.weight_copies_of(cpu::storage_bytes(storage) * double(V * d));
  ctx.announce("lm_head", fmt::format("{} row counts S = {} (final RMSNorm + [S, {}] x [{}, {}]; {} head copies)",
                                      rows.size(), calibration::axis_text(rows), d, d, V, head_copies));
  auto heads = std::make_shared<std::vector<cpu::Weights>>(size_t(head_copies));
  std::vector<cpu::WeightMatrix> matrices = weight_copies(head_copies, V, d, ctx.options.weights_seed + 707, storage);
  for (int c = 0; c < head_copies; ++c) {
    (*heads)[size_t(c)].lm_head = std::move(matrices[size_t(c)]);
    (*heads)[size_t(c)].final_norm = k.norms.final_norm;
  }
  for (int64_t S : rows) {
    auto make = [&k, S, d, heads]() -> Step {
      struct Cell {
        cpu::Scratch s;
        BatchLayout layout;
      };
      auto c = std::make_shared<Cell>();
      c->s.x = noise(S, d, 51);
      for (int32_t r = 0; r < int32_t(S); ++r) c->layout.sample_rows.push_back(r);
      return [&k, c, heads](int64_t i) {
        k.be.logits((*heads)[size_t(i % int64_t(heads->size()))], c->layout, c->s);
      };
    };
    add_benchmark(ctx.session, fmt::format("lm_head/S:{}", S), make, 2.0 * double(S * d * V),
                  cpu::storage_bytes(storage) * double(V * d) + 4.0 * double(S * (d + V)));
  }
  ctx.profile.lm_head = calibration::make_curve(rows, medians(ctx.session.run(), 0, rows.size()));
  return head_copies;
}

void measure_sampling(FamilyContext& ctx) {
  const std::vector<int64_t>& rows = ctx.grids.sampling_rows;
  const int64_t V = ctx.options.model.vocab_size;
  const SamplingParams sampling = ctx.options.sampling;
  ctx.announce("sampling", fmt::format("{} row counts S = {} ({} over {} logits)", rows.size(),
                                       calibration::axis_text(rows),
                                       sampling.temperature == 0 ? "greedy" : "temperature/top-p", V));
  for (int64_t S : rows) {
    auto make = [S, V, sampling]() -> Step {
      struct Cell {
        cpu::Matrix logits;
        std::vector<float> host;
      };
      auto c = std::make_shared<Cell>();
      c->logits = noise(S, V, 61);
      return [c, S, V, sampling](int64_t i) {
        c->host.assign(c->logits.data(), c->logits.data() + c->logits.size());
        for (int64_t r = 0; r < S; ++r) {
          const int32_t token = sample_token(std::span<const float>(c->host).subspan(size_t(r * V), size_t(V)),
                                             sampling, r, i);
          benchmark::DoNotOptimize(token);
        }
      };
    };
    add_benchmark(ctx.session, fmt::format("sampling/S:{}", S), make, 0, 8.0 * double(S * V));
  }
  ctx.profile.sampling = calibration::make_curve(rows, medians(ctx.session.run(), 0, rows.size()));
}

}  // namespace servesim::cpu_calibration
