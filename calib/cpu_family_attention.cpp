// One layer's attention: a prefill chunk of one sequence (x = query tokens
// q, y = cached tokens c + 1, so a first chunk sits at y = 1), and a decode
// batch (x = sequences b, y = context length L = c + 1), each sequence with
// its own KV blocks. Every cell is measured, also those with c + q beyond
// max_context.
#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "calib/cpu_calibration.h"
#include "sim/cost/profile_model.h"

namespace servesim::cpu_calibration {
namespace {

int64_t qkv_width(const ModelSpec& m) { return (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim; }

}  // namespace

void measure_prefill_attention(FamilyContext& ctx, LayerKernels& k) {
  const CalibrationGrids& g = ctx.grids;
  const ModelSpec& model = ctx.options.model;
  const double heads_dim = double(model.num_attention_heads * model.head_dim);
  ctx.announce("prefill_attention", fmt::format("{} x {} cells, query tokens q = {}, cached tokens c = {}",
                                                g.prefill_query.size(), g.prefill_cached.size(),
                                                calibration::axis_text(g.prefill_query),
                                                calibration::axis_text(g.prefill_cached)));
  for (int64_t q : g.prefill_query)
    for (int64_t c : g.prefill_cached) {
      auto make = attention_cell(k, ctx.prefill_copies(q, c), 1, c, q, qkv_width(model), ctx.options.block_size, 31);
      const double pairs = double(q) * double(c) + double(q) * double(q + 1) / 2;
      add_benchmark(ctx.session, fmt::format("prefill_attention/q:{}/c:{}", q, c), make, 4.0 * heads_dim * pairs,
                    double(c + q) * ctx.kv_bytes_per_token_layer);
    }
  const auto r = ctx.session.run();
  Grid2D& grid = ctx.profile.prefill_attention;
  for (int64_t q : g.prefill_query) grid.x.push_back(double(q));
  for (int64_t c : g.prefill_cached) grid.y.push_back(prefill_grid_y(double(c)));
  const size_t ny = g.prefill_cached.size();
  for (size_t i = 0; i < g.prefill_query.size(); ++i) grid.seconds.push_back(medians(r, i * ny, ny));
}

void measure_decode_attention(FamilyContext& ctx, LayerKernels& k) {
  const CalibrationGrids& g = ctx.grids;
  const ModelSpec& model = ctx.options.model;
  const double heads_dim = double(model.num_attention_heads * model.head_dim);
  ctx.announce("decode_attention", fmt::format("{} x {} cells, batch b = {}, context L = {}", g.decode_batch.size(),
                                               g.decode_context.size(), calibration::axis_text(g.decode_batch),
                                               calibration::axis_text(g.decode_context)));
  for (int64_t b : g.decode_batch)
    for (int64_t ctx_len : g.decode_context) {
      auto make = attention_cell(k, ctx.decode_copies(b, ctx_len), b, ctx_len - 1, 1, qkv_width(model),
                                 ctx.options.block_size, 41);
      add_benchmark(ctx.session, fmt::format("decode_attention/b:{}/L:{}", b, ctx_len), make,
                    4.0 * heads_dim * double(b * ctx_len), double(b * ctx_len) * ctx.kv_bytes_per_token_layer);
    }
  const auto r = ctx.session.run();
  Grid2D& grid = ctx.profile.decode_attention;
  for (int64_t b : g.decode_batch) grid.x.push_back(double(b));
  for (int64_t ctx_len : g.decode_context) grid.y.push_back(decode_grid_y(double(ctx_len - 1)));
  const size_t ny = g.decode_context.size();
  for (size_t i = 0; i < g.decode_batch.size(); ++i) grid.seconds.push_back(medians(r, i * ny, ny));
}

}  // namespace servesim::cpu_calibration
