// The CUDA backend's own kernels (everything but the GEMMs, which go through
// cuBLAS: kernels/cuda/gemm.h). Host-callable launchers over device
// pointers; each enqueues its work on `stream`, checks the launch
// (CUDA_CHECK_LAUNCH) and returns without synchronising. Plain C++ can
// include this header (no CUDA syntax here).
//
// Precision: weights and activations bf16, the residual stream and every
// accumulation (norms, softmax, dot products) fp32, norm weights and biases
// fp32. Shapes use the names of kernels/decoder/forward.h: T new tokens in
// the packed batch, S sampling rows, d hidden, H / Hkv query / KV heads, dh
// head dim, I intermediate, V vocabulary. Matrices are row-major.
//
// The paged KV cache of one layer, for K and for V alike:
//   [num_blocks][Hkv][block_size][dh] bf16
// so one head's block is a contiguous [block_size, dh] matrix (the CPU
// backend's layout). A token at `slot` = block * block_size + offset lives at
//   ((block * Hkv + g) * block_size + offset) * dh    for KV head g.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace servesim::cuda {

using bf16 = __nv_bfloat16;

// One sequence of a packed batch, as the attention kernels read it. Its new
// tokens are rows first_row .. first_row + num_query - 1; new token i sits
// at position num_cached + i; its KV blocks are
// block_tables[block_offset .. block_offset + ceil((num_cached + num_query) / block_size) - 1].
struct DeviceSequence {
  int32_t first_row;
  int32_t num_query;
  int32_t num_cached;
  int32_t block_offset;
};

// ---- embedding, norms, rotary, activation -------------------------------

// x[t, :] = float(embedding[tokens[t], :])        embedding [V, d], x fp32 [T, d]
// Token ids are not checked here: the executor draws them in 0 .. V - 1.
void launch_embedding(const bf16* embedding, const int32_t* tokens, int32_t T, int64_t d, float* x,
                      cudaStream_t stream);

// The residual add fused with the next RMSNorm (Hugging Face LlamaRMSNorm:
// x / sqrt(mean(x^2) + eps) * weight, in fp32).
// For k in 0 .. num_rows - 1, with r = rows ? rows[k] : k (rows distinct):
//   if (branch) x[r, :] += float(branch[r, :])     x fp32 [*, d], branch bf16 [*, d]
//   out[k, :] = bf16(RMSNorm(x[r, :]) * weight)    weight fp32 [d], out bf16 [num_rows, d]
// `rows` (nullable) picks the sampling rows for the final norm; rows of x
// not picked are left alone.
void launch_add_rmsnorm(float* x, const bf16* branch, const int32_t* rows, int32_t num_rows, int64_t d,
                        const float* weight, float eps, bf16* out, cudaStream_t stream);

// cos[t, i] = cos(positions[t] * inv_freq[i]), sin likewise, computed in
// double and stored fp32.                          inv_freq double [dh/2], cos/sin fp32 [T, dh/2]
void launch_rotary_tables(const int32_t* positions, int32_t T, const double* inv_freq, int32_t half,
                          float* cos, float* sin, cudaStream_t stream);

// In place on qkv bf16 [T, (H + 2 Hkv) dh] (q heads, then k heads, then v
// heads, each dh wide):
//   1. adds bias fp32 [(H + 2 Hkv) dh] (nullable) to every column;
//   2. rotates every q and k head (rotate-half pairing: (j, j + dh/2)):
//        x1' = x1 cos - x2 sin,  x2' = x2 cos + x1 sin   with cos/sin [T, dh/2];
//   3. writes token t's k and v heads into the layer's caches at
//      slot_mapping[t] (see the layout above); slot_mapping[t] < 0 skips
//      the cache write for row t (padding rows of captured CUDA graphs).
// q stays in qkv (rotated) for the attention kernels.
void launch_rotary_cache_write(bf16* qkv, const float* bias, const float* cos, const float* sin,
                               const int32_t* slot_mapping, int32_t T, int32_t H, int32_t Hkv, int32_t dh,
                               int32_t block_size, bf16* k_cache, bf16* v_cache, cudaStream_t stream);

// act[t, i] = bf16(silu(g) * u), g = gate_up[t, i], u = gate_up[t, I + i]
//                                                  gate_up bf16 [T, 2I], act bf16 [T, I]
void launch_swiglu(const bf16* gate_up, int32_t T, int64_t I, bf16* act, cudaStream_t stream);

// ---- small-M products (decode's projections and LM head) ---------------------

// in bf16 [T, K], w bf16 [N, K] -> out [T, N] = in w^T, fp32 accumulation,
// for T <= kSmallMGemmMaxRows (kernels/cuda/small_m_gemm.cu: a weight-
// streaming GEMV; cuda::Gemm routes such products here). Needs
// small_m_gemm_fits(in, w, K): K a multiple of 8, in and w 16-byte aligned.
constexpr int32_t kSmallMGemmMaxRows = 8;
bool small_m_gemm_fits(const bf16* in, const bf16* w, int64_t K);
void launch_small_m_gemm(const bf16* in, const bf16* w, int32_t T, int64_t N, int64_t K, bf16* out,
                         cudaStream_t stream);
void launch_small_m_gemm(const bf16* in, const bf16* w, int32_t T, int64_t N, int64_t K, float* out,
                         cudaStream_t stream);
// The MLP's gate_up product and SwiGLU in one pass: in bf16 [T, K],
// w_gate_up bf16 [2I, K] (gate rows, then up rows) -> act bf16 [T, I], bit
// for bit what launch_small_m_gemm into gate_up [T, 2I] and launch_swiglu
// give (one launch and one round trip of gate_up fewer per layer).
void launch_small_m_gemm_swiglu(const bf16* in, const bf16* w_gate_up, int32_t T, int64_t I, int64_t K, bf16* act,
                                cudaStream_t stream);

// ---- attention --------------------------------------------------------------

// What both attention kernels read. Scale 1/sqrt(dh), causal: new token i
// of a sequence sees positions 0 .. num_cached + i, all read from the paged
// cache (rotary_cache_write has stored this pass's K and V already). GQA:
// query head h reads KV head h / (H / Hkv). dh must be a multiple of 16, at
// most 256 (std::invalid_argument otherwise).
struct AttentionArgs {
  const bf16* qkv = nullptr;       // [T, qkv_stride]; query head h at columns h*dh .. h*dh + dh - 1
  int64_t qkv_stride = 0;          // elements per row: (H + 2 Hkv) dh
  const bf16* k_cache = nullptr;   // this layer's caches (layout above)
  const bf16* v_cache = nullptr;
  const DeviceSequence* sequences = nullptr;  // [num_sequences]
  const int32_t* block_tables = nullptr;
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  bf16* out = nullptr;             // [T, H dh], head h at columns h*dh ..
};

// Prefill (and any sequence with several new tokens: chunks, speculative
// verification): tiled over query rows, online softmax over the sequence's
// cached and new keys. One work item is a tile of at most
// kPrefillQueryTile query rows of one sequence (all heads).
constexpr int32_t kPrefillQueryTile = 64;
struct PrefillWorkItem {
  int32_t sequence;   // index into AttentionArgs::sequences
  int32_t first_query;  // tile's first new-token index within the sequence
  int32_t num_query;    // 1 .. kPrefillQueryTile
};
// Which kernel: Wmma (attention_prefill.cu, the default) or Mma
// (attention_prefill_mma.cu: S and P in registers, mma.sync, K/V double-
// buffered) where prefill_mma_supports(head_dim) (multiples of 16 up to 128;
// Wmma above). The decoder takes Mma with SERVESIM_PREFILL_ATTENTION=mma
// until a GPU run has checked and timed it.
enum class PrefillKernel { Wmma, Mma };
bool prefill_mma_supports(int32_t head_dim);
void launch_prefill_attention(const AttentionArgs& args, const PrefillWorkItem* items, int32_t num_items,
                              cudaStream_t stream, PrefillKernel kernel = PrefillKernel::Wmma);

// Decode: sequences 0 .. num_sequences - 1 of args each have num_query == 1
// (row first_row). Flash-decoding: each (sequence, KV head) splits its
// context into `num_splits` contiguous ranges (ceil(context / num_splits)
// keys each, ranges past the context empty), each range's partial softmax
// (max, sum, weighted values) goes to `workspace`, and a second kernel
// combines them. num_splits is fixed per launch and the contexts are read on
// the device, so a captured CUDA graph replays for any contexts.
// workspace: decode_attention_workspace_floats(...) floats.
int64_t decode_attention_workspace_floats(int32_t num_sequences, int32_t num_heads, int32_t head_dim,
                                          int32_t num_splits);
void launch_decode_attention(const AttentionArgs& args, int32_t num_sequences, int32_t num_splits,
                             float* workspace, cudaStream_t stream);
// A split count that fills the GPU: about 2 blocks per SM over
// num_sequences * Hkv (sequence, KV head) pairs, between 1 and 64.
int32_t decode_attention_splits(int32_t num_sequences, int32_t num_kv_heads, int32_t sm_count);

// ---- token selection ----------------------------------------------------------

// tokens[k] for each row k of logits fp32 [S, V]:
//   temperature == 0: argmax (ties: lowest id) — the CPU sampler's rule;
//   temperature > 0: inverse CDF over softmax(logits / temperature) in id
//     order with u = uniforms[k] in [0, 1) (the CPU sampler with top_p = 1;
//     float sums instead of double can move a draw that falls within
//     rounding of a boundary).
void launch_select_tokens(const float* logits, int32_t S, int64_t V, float temperature, const double* uniforms,
                          int32_t* tokens, cudaStream_t stream);

// ---- initialisation ------------------------------------------------------------

// Random weights made on the device (an 8B model's would take minutes on
// the host), value for value those of random_weights() (host_weights.cpp):
//   u_i = (splitmix64_finalize(seed + i * 0x9E3779B97F4A7C15) >> 11) * 2^-53
//   p[i] = offset + scale * float(2 u_i - 1)     in float, no FMA contraction
// (then rounded to bf16 for the bf16 overload). `seed` is the tensor's
// stream seed, random_tensor_seed(seed, name); splitmix64_finalize is
// sim/random.h's.
void launch_fill_uniform(bf16* p, int64_t n, uint64_t seed, float scale, float offset, cudaStream_t stream);
void launch_fill_uniform(float* p, int64_t n, uint64_t seed, float scale, float offset, cudaStream_t stream);

// dst[i] = bf16(src[i])  (host weights uploaded as fp32, converted on the device)
void launch_convert_to_bf16(const float* src, int64_t n, bf16* dst, cudaStream_t stream);

}  // namespace servesim::cuda
