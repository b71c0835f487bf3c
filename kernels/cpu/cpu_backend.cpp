#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <omp.h>

namespace servesim::cpu {
namespace {

using ConstMatrixMap = Eigen::Map<const Matrix>;
using RowBlock = Eigen::Map<const Matrix, 0, Eigen::OuterStride<>>;

// Copies host tensor `v` ([rows, cols]) into dst's rows row0 .. row0 + rows - 1
// (converting to dst's storage) and frees the host copy (to bound peak memory).
void take_rows(WeightMatrix& dst, int64_t row0, std::vector<float>& v, int64_t rows) {
  dst.set_rows(row0, v.data(), rows);
  std::vector<float>().swap(v);
}

WeightMatrix to_weight(std::vector<float>& v, int64_t rows, int64_t cols, Storage storage) {
  WeightMatrix m(rows, cols, storage);
  take_rows(m, 0, v, rows);
  return m;
}

Vector to_vector(std::vector<float>& v) {
  Vector out = Eigen::Map<const Vector>(v.data(), Eigen::Index(v.size()));
  std::vector<float>().swap(v);
  return out;
}

// Below this many tokens matmul streams the weights with dot products.
constexpr Eigen::Index kSmallBatch = 8;

// Output columns per matmul work item for T tokens and N columns: 64 weight
// rows for a decode batch (many small items balance the threads), one share
// per thread (rounded to 16) for 32+ tokens, where each item re-packs the
// [T, K] input (matmul says why).
Eigen::Index column_chunk(Eigen::Index T, Eigen::Index N) {
  if (T < 32) return 64;
  const int threads = omp_get_max_threads();
  return std::max<Eigen::Index>(64, ((N + threads - 1) / threads + 15) / 16 * 16);
}

// Queries per attention tile: bounds the score matrix at tile x context.
constexpr int32_t kQueryTile = 128;
// Attention tiles of at least this many rows (GQA group x queries) gather
// their keys and values before multiplying.
constexpr int64_t kGatherRows = 16;

}  // namespace

void rmsnorm(const Matrix& in, const Vector& weight, float eps, Matrix& out) {
  out.resize(in.rows(), in.cols());
  const Eigen::Index rows = in.rows();
#pragma omp parallel for schedule(static) if (rows > 16)
  for (Eigen::Index t = 0; t < rows; ++t) {
    const float mean_square = in.row(t).squaredNorm() / float(in.cols());
    const float scale = 1.0f / std::sqrt(mean_square + eps);
    out.row(t) = (in.row(t) * scale).cwiseProduct(weight.transpose());
  }
}

void matmul(const Matrix& in, const Matrix& w, Matrix& out, bool accumulate) {
  const Eigen::Index T = in.rows(), N = w.rows();
  if (!accumulate) out.resize(T, N);
  // Split the N output columns. With few tokens (decode) the pass streams the
  // weights: many small chunks balance the threads. With many tokens
  // (prefill) each chunk re-packs the [T, K] input, so use one per thread.
  // The small chunks are handed out on demand (dynamic), not split up front:
  // on a VM one vCPU can stall for a moment, and with a static split the
  // other thread then waits at the barrier; on demand, it takes over the
  // remaining chunks. The chunks are large (64 weight rows, 196 KB and up),
  // so handing them out is rare next to the work in each.
  const Eigen::Index chunk = column_chunk(T, N), chunks = (N + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic)
  for (Eigen::Index c = 0; c < chunks; ++c) {
    const Eigen::Index n0 = c * chunk, nb = std::min(chunk, N - n0);
    if (T > 1 && T < kSmallBatch) {
      // A few tokens (a decode batch): Eigen's GEMM would pack the weight
      // chunk, a second pass over memory. Dot each weight row, while it sits
      // in L1, with every token instead: the weights stream once.
      for (Eigen::Index n = n0; n < n0 + nb; ++n) {
        const auto row = w.row(n);
        for (Eigen::Index t = 0; t < T; ++t) {
          const float dot = in.row(t).dot(row);
          out(t, n) = accumulate ? out(t, n) + dot : dot;
        }
      }
    } else if (accumulate)
      out.middleCols(n0, nb).noalias() += in * w.middleRows(n0, nb).transpose();
    else
      out.middleCols(n0, nb).noalias() = in * w.middleRows(n0, nb).transpose();
  }
}

void matmul(const Matrix& in, const WeightMatrix& w, Matrix& out, bool accumulate) {
  if (w.storage() == Storage::Fp32) return matmul(in, w.fp32(), out, accumulate);
  const Eigen::Index T = in.rows(), N = w.rows(), K = w.cols();
  if (!accumulate) out.resize(T, N);
  // The chunks as for fp32 weights (above), handed out on demand.
  const Eigen::Index chunk = column_chunk(T, N), chunks = (N + chunk - 1) / chunk;
#pragma omp parallel
  {
    Matrix buffer;  // per thread: fp32 rows of the chunk in hand
#pragma omp for schedule(dynamic)
    for (Eigen::Index c = 0; c < chunks; ++c) {
      const Eigen::Index n0 = c * chunk, nb = std::min(chunk, N - n0);
      if (T == 1) {
        // One token: a dot product straight from the stored row, which
        // streams once and is never written out in fp32.
        for (Eigen::Index n = n0; n < n0 + nb; ++n) {
          const float dot = w.dot_row(in.data(), n);
          out(0, n) = accumulate ? out(0, n) + dot : dot;
        }
      } else if (T < kSmallBatch) {
        // A decode batch: each row converted once into L1, then dotted
        // with every token.
        buffer.resize(1, K);
        for (Eigen::Index n = n0; n < n0 + nb; ++n) {
          w.load_rows(n, 1, buffer.data());
          for (Eigen::Index t = 0; t < T; ++t) {
            const float dot = in.row(t).dot(buffer.row(0));
            out(t, n) = accumulate ? out(t, n) + dot : dot;
          }
        }
      } else {
        // A prefill: the chunk converted once, then one GEMM.
        buffer.resize(nb, K);
        w.load_rows(n0, nb, buffer.data());
        if (accumulate) out.middleCols(n0, nb).noalias() += in * buffer.transpose();
        else out.middleCols(n0, nb).noalias() = in * buffer.transpose();
      }
    }
  }
}

void swiglu(const Matrix& gate_up, Matrix& act) {
  const Eigen::Index T = gate_up.rows(), I = gate_up.cols() / 2;
  act.resize(T, I);
#pragma omp parallel for schedule(static) if (T > 4)
  for (Eigen::Index t = 0; t < T; ++t) {
    const auto g = gate_up.row(t).head(I).array();
    const auto u = gate_up.row(t).tail(I).array();
    act.row(t).array() = g / (1.0f + (-g).exp()) * u;  // Eigen's vectorised exp
  }
}

double Weights::bytes() const {
  double n = embedding.bytes() + lm_head.bytes() + double(final_norm.size()) * sizeof(float);
  for (const LayerWeights& L : layers)
    n += L.w_qkv.bytes() + L.w_o.bytes() + L.w_gate_up.bytes() + L.w_down.bytes() +
         double(L.attn_norm.size() + L.b_qkv.size() + L.mlp_norm.size()) * sizeof(float);
  return n;
}

Backend::Backend(const ModelSpec& spec, const Precision& precision) : spec_(spec), precision_(precision) {
  const int64_t half = spec_.head_dim / 2;
  inv_freq_.resize(size_t(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq_[size_t(i)] = std::pow(spec_.rope_theta, -2.0 * double(i) / double(spec_.head_dim));
}

Weights Backend::upload(HostWeights&& host) const {
  const ModelSpec& m = spec_;
  const int64_t d = m.hidden_size, I = m.intermediate_size, V = m.vocab_size;
  const int64_t q_out = m.num_attention_heads * m.head_dim, kv_out = m.num_key_value_heads * m.head_dim;
  const Storage linear = precision_.linear, head = precision_.embedding;
  Weights w;
  w.embedding = to_weight(host.embedding, V, d, head);
  w.final_norm = to_vector(host.final_norm);
  if (!m.tie_word_embeddings) w.lm_head = to_weight(host.lm_head, V, d, head);
  w.layers.resize(host.layers.size());
  for (size_t l = 0; l < host.layers.size(); ++l) {
    HostLayerWeights& H = host.layers[l];
    LayerWeights& L = w.layers[l];
    L.attn_norm = to_vector(H.attn_norm);
    L.w_qkv = WeightMatrix(q_out + 2 * kv_out, d, linear);
    take_rows(L.w_qkv, 0, H.wq, q_out);
    take_rows(L.w_qkv, q_out, H.wk, kv_out);
    take_rows(L.w_qkv, q_out + kv_out, H.wv, kv_out);
    if (m.attention_bias) {
      L.b_qkv.resize(q_out + 2 * kv_out);
      L.b_qkv << to_vector(H.bq), to_vector(H.bk), to_vector(H.bv);
    }
    L.w_o = to_weight(H.wo, d, q_out, linear);
    L.mlp_norm = to_vector(H.mlp_norm);
    L.w_gate_up = WeightMatrix(2 * I, d, linear);
    take_rows(L.w_gate_up, 0, H.w_gate, I);
    take_rows(L.w_gate_up, I, H.w_up, I);
    L.w_down = to_weight(H.w_down, d, I, linear);
  }
  return w;
}

KvCache Backend::make_kv_cache(int64_t num_blocks, int32_t block_size) const {
  return KvCache(spec_.num_hidden_layers, num_blocks, block_size, spec_.num_key_value_heads, spec_.head_dim,
                 precision_.kv);
}

void Backend::prepare(Scratch& s, const BatchLayout& layout) const {
  const int64_t T = layout.num_tokens(), half = spec_.head_dim / 2;
  s.cos.resize(T, half);
  s.sin.resize(T, half);
  for (int64_t t = 0; t < T; ++t) {
    const double pos = layout.positions[size_t(t)];
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq_[size_t(i)];
      s.cos(t, i) = float(std::cos(angle));
      s.sin(t, i) = float(std::sin(angle));
    }
  }
}

void Backend::embed(const Weights& w, const BatchLayout& layout, Scratch& s) const {
  const int64_t T = layout.num_tokens();
  s.x.resize(T, spec_.hidden_size);
  for (int64_t t = 0; t < T; ++t) w.embedding.load_rows(layout.tokens[size_t(t)], 1, s.x.row(t).data());
}

void Backend::rmsnorm_attention_input(const Weights& w, int layer, Scratch& s) const {
  rmsnorm(s.x, w.layers[size_t(layer)].attn_norm, float(spec_.rms_norm_eps), s.h);
}

void Backend::qkv_projection(const Weights& w, int layer, Scratch& s) const {
  const LayerWeights& L = w.layers[size_t(layer)];
  matmul(s.h, L.w_qkv, s.qkv, false);
  if (L.b_qkv.size()) s.qkv.rowwise() += L.b_qkv.transpose();
}

void Backend::rotary_and_cache_write(int layer, const BatchLayout& layout, KvCache& kv, Scratch& s) const {
  const int64_t H = spec_.num_attention_heads, Hkv = spec_.num_key_value_heads, dh = spec_.head_dim;
  const int64_t half = dh / 2, bs = kv.block_size;
  for (const SequenceSlice& seq : layout.sequences) {
#pragma omp parallel for schedule(static) if (seq.num_query > 8)
    for (int32_t i = 0; i < seq.num_query; ++i) {
      const int64_t t = seq.first_row + i;
      float* row = s.qkv.row(t).data();
      const float* c = s.cos.row(t).data();
      const float* sn = s.sin.row(t).data();
      // Rotate-half RoPE on every query and key head: pairs (j, j + dh/2).
      for (int64_t head = 0; head < H + Hkv; ++head) {
        float* x = row + head * dh;
        for (int64_t j = 0; j < half; ++j) {
          const float x1 = x[j], x2 = x[j + half];
          x[j] = x1 * c[j] - x2 * sn[j];
          x[j + half] = x2 * c[j] + x1 * sn[j];
        }
      }
      // Store this token's K and V at its position in the paged cache.
      const int64_t pos = seq.num_cached + i;
      const int64_t block = seq.block_table[size_t(pos / bs)], slot = pos % bs;
      for (int64_t g = 0; g < Hkv; ++g) kv.write(layer, block, g, slot, row + (H + g) * dh, row + (H + Hkv + g) * dh);
    }
  }
}

void Backend::attention(int layer, const BatchLayout& layout, KvCache& kv, Scratch& s) const {
  const int64_t H = spec_.num_attention_heads, Hkv = spec_.num_key_value_heads, dh = spec_.head_dim;
  const int64_t group = H / Hkv, bs = kv.block_size;
  const float scale = 1.0f / std::sqrt(float(dh));
  s.attn.resize(layout.num_tokens(), H * dh);

  // One task per (sequence, KV head, query tile).
  struct Task {
    int32_t seq, kv_head, q0, nq;
  };
  std::vector<Task> tasks;
  for (int32_t si = 0; si < int32_t(layout.sequences.size()); ++si)
    for (int32_t g = 0; g < int32_t(Hkv); ++g)
      for (int32_t q0 = 0; q0 < layout.sequences[size_t(si)].num_query; q0 += kQueryTile)
        tasks.push_back({si, g, q0, std::min(kQueryTile, layout.sequences[size_t(si)].num_query - q0)});

#pragma omp parallel
  {
    Matrix q, keys, values, scores, out;  // per thread, reused across its tasks
    Matrix block_k, block_v;               // per thread: one block in fp32 (a bf16 or int8 cache)
    const bool in_place = kv.storage() == Storage::Fp32;
#pragma omp for schedule(dynamic, 1)
    for (size_t k = 0; k < tasks.size(); ++k) {
      const Task& task = tasks[k];
      const SequenceSlice& seq = layout.sequences[size_t(task.seq)];
      const int64_t rows = group * task.nq;
      // Keys visible to the tile's last query: positions 0 .. c + q0 + nq - 1.
      const int64_t ctx = seq.num_cached + task.q0 + task.nq;
      // q: [group * nq, dh], row j * nq + i = head (g * group + j), query q0 + i.
      q.resize(rows, dh);
      for (int64_t j = 0; j < group; ++j)
        for (int64_t i = 0; i < task.nq; ++i)
          q.row(j * task.nq + i) =
              s.qkv.row(seq.first_row + task.q0 + i).segment((task.kv_head * group + j) * dh, dh) * scale;
      // A decode-sized tile multiplies block by block straight from the
      // cache. A larger one first gathers the keys and values into
      // contiguous [ctx, dh] matrices, so that each product is one GEMM
      // rather than one small GEMM per block (the copy costs far less).
      const bool gather = rows >= kGatherRows;
      scores.resize(rows, ctx);
      if (gather) {
        keys.resize(ctx, dh);
        values.resize(ctx, dh);
        for (int64_t b = 0; b * bs < ctx; ++b) {
          const int64_t valid = std::min(bs, ctx - b * bs), block = seq.block_table[size_t(b)];
          kv.load_k(layer, block, task.kv_head, valid, keys.row(b * bs).data());
          kv.load_v(layer, block, task.kv_head, valid, values.row(b * bs).data());
        }
        scores.noalias() = q * keys.transpose();
      } else {
        for (int64_t b = 0; b * bs < ctx; ++b) {
          const int64_t valid = std::min(bs, ctx - b * bs), block = seq.block_table[size_t(b)];
          if (!in_place) {
            block_k.resize(valid, dh);
            kv.load_k(layer, block, task.kv_head, valid, block_k.data());
          }
          ConstMatrixMap kb(in_place ? kv.fp32_k(layer, block, task.kv_head) : block_k.data(), valid, dh);
          scores.middleCols(b * bs, valid).noalias() = q * kb.transpose();
        }
      }
      // Causal softmax: query q0 + i sees positions 0 .. c + q0 + i.
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t visible = seq.num_cached + task.q0 + (r % task.nq) + 1;
        auto row = scores.row(r).head(visible);
        const float m = row.maxCoeff();
        row.array() = (row.array() - m).exp();
        row /= row.sum();
        scores.row(r).tail(ctx - visible).setZero();
      }
      // out = P V.
      if (gather) {
        out.noalias() = scores * values;
      } else {
        out.setZero(rows, dh);
        for (int64_t b = 0; b * bs < ctx; ++b) {
          const int64_t valid = std::min(bs, ctx - b * bs), block = seq.block_table[size_t(b)];
          if (!in_place) {
            block_v.resize(valid, dh);
            kv.load_v(layer, block, task.kv_head, valid, block_v.data());
          }
          ConstMatrixMap vb(in_place ? kv.fp32_v(layer, block, task.kv_head) : block_v.data(), valid, dh);
          out.noalias() += scores.middleCols(b * bs, valid) * vb;
        }
      }
      for (int64_t j = 0; j < group; ++j)
        for (int64_t i = 0; i < task.nq; ++i)
          s.attn.row(seq.first_row + task.q0 + i).segment((task.kv_head * group + j) * dh, dh) =
              out.row(j * task.nq + i);
    }
  }
}

void Backend::output_projection_add(const Weights& w, int layer, Scratch& s) const {
  matmul(s.attn, w.layers[size_t(layer)].w_o, s.x, true);
}

void Backend::rmsnorm_mlp_input(const Weights& w, int layer, Scratch& s) const {
  rmsnorm(s.x, w.layers[size_t(layer)].mlp_norm, float(spec_.rms_norm_eps), s.h);
}

void Backend::mlp_add(const Weights& w, int layer, Scratch& s) const {
  const LayerWeights& L = w.layers[size_t(layer)];
  matmul(s.h, L.w_gate_up, s.gate_up, false);
  swiglu(s.gate_up, s.act);
  matmul(s.act, L.w_down, s.x, true);
}

void Backend::logits(const Weights& w, const BatchLayout& layout, Scratch& s) const {
  Matrix rows(layout.num_samples(), spec_.hidden_size);
  for (int32_t k = 0; k < layout.num_samples(); ++k) rows.row(k) = s.x.row(layout.sample_rows[size_t(k)]);
  rmsnorm(rows, w.final_norm, float(spec_.rms_norm_eps), s.last);
  matmul(s.last, w.head(), s.logits, false);
}

}  // namespace servesim::cpu
