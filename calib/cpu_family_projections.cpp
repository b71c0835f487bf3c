// The four projections of one layer on M tokens: the decoder's cpu::matmul
// on the model's weight shapes (qkv with its bias; o and down accumulate
// into the residual, as the decoder does them).
#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "calib/cpu_calibration.h"

namespace servesim::cpu_calibration {

void measure_projections(FamilyContext& ctx, LayerKernels& k) {
  const ModelSpec& model = ctx.options.model;
  const std::vector<int64_t>& tokens = ctx.grids.tokens;
  const int64_t d = model.hidden_size, I = model.intermediate_size;
  const int64_t qkv_out = (model.num_attention_heads + 2 * model.num_key_value_heads) * model.head_dim;
  const int64_t q_out = model.num_attention_heads * model.head_dim;
  struct Projection {
    const char* name;
    int64_t K, N;
    bool accumulate;
  };
  const Projection projections[] = {{"gemm_qkv", d, qkv_out, false},
                                    {"gemm_o", q_out, d, true},
                                    {"gemm_gate_up", d, 2 * I, false},
                                    {"gemm_down", I, d, true}};
  DeviceProfile& p = ctx.profile;
  Curve* curves[] = {&p.gemm_qkv, &p.gemm_o, &p.gemm_gate_up, &p.gemm_down};
  for (size_t pi = 0; pi < 4; ++pi) {
    const Projection& proj = projections[pi];
    const int copies = ctx.weight_copies_of(cpu::storage_bytes(ctx.storage.linear) * double(proj.K * proj.N));
    ctx.announce(proj.name, fmt::format("{} token counts M = {} ([M, {}] x [{}, {}]{}; {} weight copies)",
                                        tokens.size(), calibration::axis_text(tokens), proj.K, proj.K, proj.N,
                                        proj.accumulate ? ", accumulating" : "", copies));
    // The weight copies: one-layer Weights per copy for the backend's own
    // methods (qkv with its bias, o), plain matrices for the MLP's GEMMs.
    auto weights = std::make_shared<cpu::Weights>();
    auto matrices = std::make_shared<std::vector<cpu::WeightMatrix>>(
        weight_copies(copies, proj.N, proj.K, ctx.options.weights_seed + 101 * (pi + 1), ctx.storage.linear));
    const double stored_bytes = matrices->front().bytes();  // one copy, scales included
    if (pi < 2) {
      weights->layers.resize(size_t(copies));
      for (int c = 0; c < copies; ++c) {
        cpu::LayerWeights& lw = weights->layers[size_t(c)];
        (pi == 0 ? lw.w_qkv : lw.w_o) = std::move((*matrices)[size_t(c)]);
        if (pi == 0 && model.attention_bias) lw.b_qkv = 0.1f * cpu::Vector::Random(qkv_out);
      }
      matrices->clear();
    }
    for (int64_t M : tokens) {
      auto make = [&k, pi, M, d, I, qkv_out, q_out, weights, matrices]() -> Step {
        auto s = std::make_shared<cpu::Scratch>();
        const int64_t n = pi < 2 ? int64_t(weights->layers.size()) : int64_t(matrices->size());
        switch (pi) {
          case 0:  // s.qkv = s.h W_qkv^T (+ b): the backend's own method
            s->h = noise(M, d, 11);
            s->qkv = noise(M, qkv_out, 12);
            return [&k, s, weights, n](int64_t i) { k.be.qkv_projection(*weights, int(i % n), *s); };
          case 1:  // s.x += s.attn W_o^T
            s->attn = noise(M, q_out, 13);
            s->x = noise(M, d, 14);
            return [&k, s, weights, n](int64_t i) { k.be.output_projection_add(*weights, int(i % n), *s); };
          case 2:  // the first GEMM of mlp_add
            s->h = noise(M, d, 15);
            s->gate_up = noise(M, 2 * I, 16);
            return [s, matrices, n](int64_t i) { cpu::matmul(s->h, (*matrices)[size_t(i % n)], s->gate_up, false); };
          default:  // the last GEMM of mlp_add: s.x += s.act W_down^T
            s->act = noise(M, I, 17);
            s->x = noise(M, d, 18);
            return [s, matrices, n](int64_t i) { cpu::matmul(s->act, (*matrices)[size_t(i % n)], s->x, true); };
        }
      };
      add_benchmark(ctx.session, fmt::format("{}/M:{}", proj.name, M), make, 2.0 * double(M * proj.K * proj.N),
                    stored_bytes + 4.0 * double(M * (proj.K + proj.N)));
    }
    *curves[pi] = calibration::make_curve(tokens, medians(ctx.session.run(), 0, tokens.size()));
  }
}

}  // namespace servesim::cpu_calibration
