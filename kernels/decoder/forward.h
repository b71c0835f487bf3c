// The Llama-family forward pass, written once against a backend.
//
// A Backend provides its own Weights, KvCache and Scratch types and the
// kernels used below; the CPU backend (kernels/cpu) and the CUDA backend
// implement them. Shapes: T = new tokens in the packed batch, S = rows that
// sample, d = hidden size, H/Hkv = query/KV heads, dh = head dim,
// I = intermediate size, V = vocabulary.
//
// Per layer (Hugging Face LlamaDecoderLayer / Qwen2DecoderLayer):
//   h   = RMSNorm(x) * attn_norm                         [T, d]
//   qkv = h W_qkv^T (+ b_qkv)                            [T, (H + 2 Hkv) dh]
//   q, k = RoPE(q, k, positions)   (rotate-half pairing, rope_theta)
//   cache[k, v] <- k, v at each token's position (paged: block table)
//   a   = softmax(q k^T / sqrt(dh), causal) v  per head, GQA groups of H/Hkv
//   x  += a W_o^T                                        [T, d]
//   h   = RMSNorm(x) * mlp_norm
//   x  += (silu(h W_gate^T) * (h W_up^T)) W_down^T       [T, d]
// Then logits = RMSNorm(x[sample rows]) * final_norm  W_lm^T   [S, V].
#pragma once

#include <vector>

#include "kernels/decoder/batch_layout.h"

namespace servesim {

template <class Backend>
void forward(Backend& be, const typename Backend::Weights& w, typename Backend::KvCache& kv,
             typename Backend::Scratch& s, const BatchLayout& layout) {
  be.prepare(s, layout);                       // sizes scratch, rotary tables
  be.embed(w, layout, s);                      // s.x [T, d]
  for (int layer = 0; layer < be.num_layers(); ++layer) {
    be.rmsnorm_attention_input(w, layer, s);   // s.h = RMSNorm(s.x)
    be.qkv_projection(w, layer, s);            // s.qkv = s.h W_qkv^T + b
    be.rotary_and_cache_write(layer, layout, kv, s);
    be.attention(layer, layout, kv, s);        // s.attn [T, H dh]
    be.output_projection_add(w, layer, s);     // s.x += s.attn W_o^T
    be.rmsnorm_mlp_input(w, layer, s);         // s.h = RMSNorm(s.x)
    be.mlp_add(w, layer, s);                   // s.x += SwiGLU MLP(s.h)
  }
  be.logits(w, layout, s);                     // s.logits [S, V]
}

}  // namespace servesim
