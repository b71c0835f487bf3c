// One layer's two RMSNorms, rotary + KV-cache write and SwiGLU on M tokens
// of one sequence (the residual adds happen inside the o and down GEMMs;
// the per-iteration rotary tables and embedding gather are left to the
// iteration overhead).
#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "calib/cpu_calibration.h"

namespace servesim::cpu_calibration {

void measure_elementwise(FamilyContext& ctx, LayerKernels& k) {
  const ModelSpec& model = ctx.options.model;
  const std::vector<int64_t>& tokens = ctx.grids.elementwise_tokens;
  const int64_t d = model.hidden_size, I = model.intermediate_size, Hkv = model.num_key_value_heads;
  const int64_t dh = model.head_dim;
  const int64_t qkv_out = (model.num_attention_heads + 2 * Hkv) * dh;
  const int32_t bs = ctx.options.block_size;
  ctx.announce("elementwise", fmt::format("{} token counts M = {} (2 RMSNorms, rotary + KV write, SwiGLU)",
                                          tokens.size(), calibration::axis_text(tokens)));
  for (int64_t M : tokens) {
    auto make = [&k, M, d, I, qkv_out, bs]() -> Step {
      struct Cell {
        cpu::Scratch s;
        std::vector<LayoutCopy> layouts;
      };
      auto c = std::make_shared<Cell>();
      c->layouts = make_layouts(1, 1, 0, M, bs);
      c->s.x = noise(M, d, 21);
      c->s.qkv = noise(M, qkv_out, 22);
      c->s.gate_up = noise(M, 2 * I, 23);
      k.be.prepare(c->s, c->layouts[0].layout);  // rotary tables: per iteration, not per layer
      return [&k, c](int64_t) {
        k.be.rmsnorm_attention_input(k.norms, 0, c->s);
        k.be.rotary_and_cache_write(0, c->layouts[0].layout, k.kv, c->s);
        k.be.rmsnorm_mlp_input(k.norms, 0, c->s);
        cpu::swiglu(c->s.gate_up, c->s.act);
      };
    };
    add_benchmark(ctx.session, fmt::format("elementwise/M:{}", M), make, 0,
                  4.0 * double(M) * double(4 * d + qkv_out + 2 * Hkv * dh + 3 * I));
  }
  ctx.profile.elementwise = calibration::make_curve(tokens, medians(ctx.session.run(), 0, tokens.size()));
}

}  // namespace servesim::cpu_calibration
